"""Room in the KV cache, decided as data: how far the streams grow, who gives way, who ends.

Pure bookkeeping, the way speculation's ``propose`` and ``settle`` work: ``keep_room.py`` asks,
does what needs the context (growing the streams, dropping cells), and applies the
``RoomDecision`` it gets back in one place, handing the requests it ends to the core, where
every request that ends goes through ``_finish``.

With a stream per sequence, streams grow (doubled, at most to the context) before a step or an
admission whose sequences would not fit (``plan_growth``); what that cost is ``after_growth``:
requests whose cells were lost while the context was made again end with ``EngineError``, and
if the streams could not grow, the requests that needed it end with ``KVCacheFullError`` (all
of them with ``EngineError`` if not even the old context came back); followers that were to
copy cells that went end too. In a unified cache with no room left even after idle cells went,
one sequence of a decode gives way (``give_way``): a prompt being read waits to read again, or
the newest answer ends with ``KVCacheFullError``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence, Set
from dataclasses import dataclass, field

from ...errors import EngineError, KVCacheFullError
from .requests import PreparedRequest
from .sequences import Join, SeqState, SeqStatus, StepPlan

__all__ = [
    "Growth",
    "RoomDecision",
    "after_growth",
    "cells_needed",
    "cells_to",
    "drop_ended",
    "give_way",
    "plan_growth",
]


@dataclass(frozen=True)
class Growth:
    """Streams to grow to ``stream_cells`` cells per sequence, for the requests in ``needs``
    (request id -> the cells its sequence will hold)."""

    stream_cells: int
    needs: Mapping[str, int]


@dataclass
class RoomDecision:
    """What keeping room decided, for the core to apply.

    Attributes:
        ends: Requests that end, by request id, with their error.
        pauses: Sequences whose cells were given up: they read their prompt again once a
            request ends (``Scheduler.pause``).
        lost: Sequences whose cells are gone: idle slots forget what they held, and followers
            no longer copy from them.
        failure: Why the streams could not grow, if they could not (an admission that needed
            the room is refused with it).
    """

    ends: dict[str, EngineError] = field(default_factory=dict)
    pauses: list[SeqState] = field(default_factory=list)
    lost: frozenset[int] = frozenset()
    failure: EngineError | None = None


def cells_to(request: PreparedRequest, position: int) -> int:
    """Cells a request's sequence holds once it reaches ``position``: one per position, and
    for models whose images take fewer positions than embeddings (M-RoPE), the extra ones."""
    media = request.media
    if media is None:
        return position
    extra = sum(
        span.n_tokens - span.n_pos for start, span in media.spans.items() if start < position
    )
    return position + extra


def cells_needed(plan: StepPlan, requests: Mapping[str, PreparedRequest]) -> dict[str, int]:
    """The cells each request of ``plan`` holds after the step, by request id."""
    needs = {
        seq.request_id: cells_to(requests[seq.request_id], entry.end_pos)
        for seq, entry in plan.entries
    }
    image = plan.image
    if image is not None:
        request = requests[image.seq.request_id]
        needs[image.seq.request_id] = cells_to(request, image.start + image.n_pos)
    return needs


def plan_growth(needs: Mapping[str, int], *, stream_cells: int, limit: int) -> Growth | None:
    """The growth that gives every request of ``needs`` room (``None`` if they fit): streams
    doubled (from one cell at least) until the largest need fits, at most ``limit`` cells."""
    if not needs or max(needs.values()) <= stream_cells or stream_cells >= limit:
        return None
    target = max(1, stream_cells)
    while target < max(needs.values()):
        target *= 2
    # Past the largest need it stops at the limit: a sequence never holds more.
    return Growth(min(target, limit), dict(needs))


def after_growth(
    growth: Growth,
    running: Sequence[SeqState],
    joins: Sequence[Join] = (),
    *,
    lost: Sequence[int] = (),
    error: EngineError | None = None,
    stream_cells: int,
    n_seq_max: int,
    kept: bool = True,
) -> RoomDecision:
    """Who ends after the streams tried to grow for ``growth``.

    Args:
        growth: The growth tried.
        running: The engine's running sequences.
        joins: The copies the step was to make (a follower of lost cells ends).
        lost: Sequences whose cells could not be carried over into the new context.
        error: Why the streams could not grow (``None``: they grew).
        stream_cells: Cells per sequence now (after a failure, the old size).
        n_seq_max: The engine's sequences.
        kept: Whether a context exists after a failure (if not, every sequence's cells are
            gone; before the context is first made, growing only sizes it and cannot fail).
    """
    ends: dict[str, EngineError] = {}
    gone = set(lost)
    if error is not None and not kept:
        gone = set(range(n_seq_max))
        for seq in running:
            ends[seq.request_id] = EngineError(str(error))
    for seq in running:
        if seq.slot.seq_id in lost:
            ends.setdefault(
                seq.request_id, EngineError("its KV cells were lost while the cache grew")
            )
    if error is not None:
        for seq in running:
            cells = growth.needs.get(seq.request_id)
            if cells is not None and cells > stream_cells:
                gone.add(seq.slot.seq_id)
                ends.setdefault(
                    seq.request_id,
                    KVCacheFullError(
                        f"the KV cache could not grow to {cells} cells per sequence: {error}"
                    ),
                )
    by_slot = {seq.slot.seq_id: seq for seq in running}
    for join in joins:
        target = by_slot.get(join.target.seq_id)
        if join.source.seq_id in gone and target is not None:
            ends.setdefault(target.request_id, EngineError("the prefix it was to copy was lost"))
    return RoomDecision(ends=ends, lost=frozenset(gone), failure=error)


def give_way(
    running: Sequence[SeqState], seqs: Sequence[SeqState], n_cells: int
) -> tuple[SeqState, RoomDecision]:
    """The unified cache had no room for a decode of ``seqs`` (idle cells already freed): the
    one that gives up its cells, and what becomes of it. A sequence still reading its prompt
    waits to read it again, the newest first, while another of the ``running`` requests holds
    cells that will free up (so some request always runs while any is paused, and its end
    resumes them); otherwise the newest answer ends with ``KVCacheFullError``."""
    asked = {seq.request_id for seq in seqs}
    newest_first = [seq for seq in reversed(running) if seq.request_id in asked]
    holders = [seq for seq in running if seq.n_past > 0 and not seq.paused]
    for seq in newest_first:
        if seq.status is SeqStatus.PREFILL and any(h is not seq for h in holders):
            return seq, RoomDecision(pauses=[seq])
    error = KVCacheFullError(
        f"the KV cache ({n_cells} cells) is full with running requests' cells; set a larger "
        "kv_cells or a smaller n_seq_max"
    )
    return newest_first[0], RoomDecision(ends={newest_first[0].request_id: error})


def drop_ended(plan: StepPlan, running: Set[str], lost: Set[int] = frozenset()) -> None:
    """Take the entries and image of requests no longer ``running`` out of ``plan``, and the
    joins whose follower ended or whose source's cells are ``lost``."""
    kept = [i for i, (seq, _) in enumerate(plan.entries) if seq.request_id in running]
    if len(kept) < len(plan.entries):
        renumbered = {old: new for new, old in enumerate(kept)}
        plan.entries = [plan.entries[i] for i in kept]
        groups = [[renumbered[i] for i in group if i in renumbered] for group in plan.groups]
        plan.groups = [group for group in groups if group]
    if plan.image is not None and plan.image.seq.request_id not in running:
        plan.image = None
    plan.joins = [j for j in plan.joins if j.source.seq_id not in lost and j.target.busy]
