"""Which finished answer to read again while the engine idles, and how (``Scheduler.realign``).

An answer's cells were made one token at a time, not as a longer prompt's chunks would make
them, so a follow-up turn could keep none of them. Its tokens are read again, block by block,
into an empty idle slot that starts from a copy of the answered slot's exact prefix (the
answered slot stays as it is, for a repeat of its prompt), or, with no slot empty, in place
(the cells from the last chunk start on are dropped and read again); a follow-up then keeps the
prefix up to the answer's last block boundary. Pure bookkeeping over the scheduler's slots.
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from dataclasses import dataclass

from ..batch import BatchEntry, PrefillLayout
from ..prefix_index import PrefixIndex
from .sequences import RealignStep, Slot

__all__ = ["RealignChoice", "realign_choice", "realign_step"]


@dataclass(frozen=True)
class RealignChoice:
    """The slot to read into; for a new realignment also the answered slot and the span of its
    tokens to read again (``None`` while a slot still has ``unread`` tokens of one begun)."""

    target: Slot
    source: Slot | None = None
    span: tuple[int, int] | None = None


def realign_choice(
    slots: Sequence[Slot], layout: PrefillLayout, index: PrefixIndex[Hashable]
) -> RealignChoice | None:
    """What to read again next among the idle ``slots``, or ``None``: a realignment begun goes
    on first, then the most recently used answer whose span no slot holds exactly yet."""
    if not layout.aligned:
        return None
    idle = [slot for slot in slots if not slot.busy]
    for slot in idle:
        if slot.unread:
            return RealignChoice(slot)
    empty = next((slot for slot in idle if not slot.cached), None)
    for source in sorted(idle, key=lambda slot: slot.last_used, reverse=True):
        span = layout.realign_span(source.cached, source.exact)
        if span is not None and not _held_exactly(slots, index, source, span[1]):
            return RealignChoice(empty or source, source, span)
    return None


def realign_step(choice: RealignChoice, layout: PrefillLayout) -> RealignStep:
    """The next block to read for ``choice``; a new realignment first sets up its target slot
    (a copy of the answered slot's prefix, or its own cells cut back) and what it is to read."""
    target, source, span = choice.target, choice.source, choice.span
    copy_from, drop = None, False
    if source is not None and span is not None:
        start, end = span
        unread = source.cached[start:end]
        if target is source:  # no free slot: in place, the answered tail dropped
            drop = True
            target.cut(start)
        else:
            target.hold(source.cached[:start])
            target.lora = source.lora  # the copied cells' adapters, and so the block's
            copy_from = source
        target.unread[:] = unread
        target.exact, target.prompt_len = start, 0
    start = len(target.cached)
    tokens = [*target.cached, *target.unread]  # a turn's end inside the answer is an edge too
    stop = layout.next_chunk_end(start, len(tokens), tokens)
    entry = BatchEntry(target.seq_id, target.unread[: stop - start], start, False)
    return RealignStep(target, entry, copy_from, drop)


def _held_exactly(
    slots: Sequence[Slot], index: PrefixIndex[Hashable], source: Slot, n: int
) -> bool:
    """Whether some slot's exact cells, made with ``source``'s adapters, already cover its
    first ``n`` tokens."""
    shared = index.shared(source.cached[:n])
    return any(
        slot.exact >= n and shared[slot.seq_id] >= n and slot.lora == source.lora for slot in slots
    )
