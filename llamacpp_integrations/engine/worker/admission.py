"""Where a new request's prompt starts: the slot it takes, the cells it keeps, and the request
still reading a prefix it may wait for. Pure choices over the scheduler's slots and running
sequences; ``Scheduler.admit`` and ``Scheduler._follow`` apply them.

A new request takes the free slot sharing the longest prefix with its prompt and evaluates
only the rest, as far as the prefill layout lets it keep cells (``batch.PrefillLayout``: a kept
prefix never changes an answer). The prefix may sit in any slot, busy ones included: where
taking that slot over would throw away a longer cached conversation (or it is busy), the prefix
is copied into another free slot instead.

A request admitted while another is still reading a prompt that shares its beginning waits
for that one's cells instead of reading the prefix itself (in-flight sharing): its ``leader``,
and how far it takes from it (``share_until``, a prefix the layout lets it keep).
"""

from __future__ import annotations

from collections.abc import Hashable, Mapping, Sequence
from dataclasses import dataclass

from ..batch import PrefillLayout
from .sequences import SeqState, SeqStatus, Slot

__all__ = ["SlotChoice", "choose_slot", "leader_for"]


@dataclass(frozen=True)
class SlotChoice:
    """The slot a new request takes, the slot whose cells it copies first (``None``: it
    keeps what its own slot holds, or nothing), and how many prompt tokens it keeps."""

    target: Slot
    copy_from: Slot | None
    n_reused: int


def choose_slot(
    slots: Sequence[Slot],
    shared: Mapping[Hashable, int],
    prompt: Sequence[int],
    image_spans: Mapping[int, int],
    layout: PrefillLayout,
) -> SlotChoice:
    """The slot for a prompt that shares ``shared[seq_id]`` leading tokens with each slot's
    cells (``Scheduler.lookup``); at least one slot must be free."""
    free = [slot for slot in slots if not slot.busy]
    assert free, "a slot was chosen with none free"

    def keeps(slot: Slot) -> int:
        return layout.kept(
            shared[slot.seq_id],
            len(prompt),
            image_spans,
            exact=slot.exact,
            cached_prompt=slot.prompt_len,
            tokens=prompt,
        )

    n_reused, _, source = max(
        ((keeps(s), not s.busy, s) for s in slots), key=lambda candidate: candidate[:2]
    )
    # Taking the source over loses nothing when all it holds is a prefix of this prompt.
    keeps_whole = shared[source.seq_id] == len(source.cached) or len(free) == 1
    if n_reused > 0 and not source.busy and keeps_whole:
        return SlotChoice(source, None, n_reused)
    # Empty slots first, then the least recently used one.
    target = min(free, key=lambda s: (len(s.cached) > 0, s.last_used))
    if n_reused > 0 and source is not target:
        return SlotChoice(target, source, n_reused)
    return SlotChoice(target, None, n_reused if target is source else 0)


def leader_for(
    seq: SeqState,
    running: Sequence[SeqState],
    layout: PrefillLayout,
    shared: Mapping[Hashable, int],
) -> tuple[SeqState | None, int]:
    """The request still reading the longest prefix ``seq`` may keep, and how far it keeps
    it; ``(None, 0)`` unless that gains ``seq`` at least a block, or an image. The same image
    in the same place has the same key, so a follower takes its cells whole (as ``kept``
    allows) instead of encoding it again, which costs far more than its positions' text.
    ``shared``: what the prefix index holds in common with its prompt, by request id."""
    best, until = None, seq.n_past
    for other in running:
        if other is seq or other.leader is not None:
            continue
        if other.status is not SeqStatus.PREFILL:
            continue  # its prompt's cells exist: admission already kept what it could
        n = layout.kept(
            shared.get(other.request_id, 0),
            len(seq.prompt),
            seq.image_spans,
            exact=len(other.prompt) - 1,
            cached_prompt=len(other.prompt),
            tokens=seq.prompt,
        )
        if n > until and (n >= seq.n_past + layout.block or _gains_image(seq, n)):
            best, until = other, n
    return (best, until) if best is not None else (None, 0)


def _gains_image(seq: SeqState, n: int) -> bool:
    """Whether taking the first ``n`` cells spares ``seq`` encoding one of its images."""
    return any(
        seq.n_past <= start and start + n_pos <= n for start, n_pos in seq.image_spans.items()
    )
