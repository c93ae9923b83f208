"""Which tokens of which sequences go into the next decode. Pure bookkeeping: no llama.cpp here.

Each of the ``n_seq_max`` slots is one KV sequence. A slot remembers the tokens its cells hold, so a
new request takes the free slot sharing the longest prefix with its prompt and evaluates only the
rest. A step holds one token of every generating sequence first (so streams keep flowing), then
prompt chunks of the sequences still reading their prompt, up to ``n_batch`` tokens in all.

Images in a prompt are spans of positions holding a negative key (see ``native/vision.py``).
They are evaluated apart from the batched text decode, one image per step, so running streams
keep flowing while an image is read; a text chunk never crosses into an image.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from ..batch import BatchEntry, common_prefix

__all__ = ["ImageStep", "Scheduler", "SeqState", "SeqStatus", "Slot", "StepPlan"]


class SeqStatus(enum.Enum):
    PREFILL = "prefill"
    DECODE = "decode"


@dataclass
class Slot:
    """One KV sequence. ``cached`` is what its cells hold, position by position."""

    seq_id: int
    cached: list[int] = field(default_factory=list)
    last_used: int = 0
    busy: bool = False


@dataclass
class SeqState:
    """A request bound to a slot: how far its prompt went, and the token to decode next."""

    request_id: str
    prompt: Sequence[int]
    slot: Slot
    n_reused: int
    copy_from: Slot | None = None
    image_spans: Mapping[int, int] = field(default_factory=dict)  # start -> positions
    status: SeqStatus = SeqStatus.PREFILL
    next_token: int | None = None

    @property
    def n_past(self) -> int:
        return len(self.slot.cached)


@dataclass(frozen=True)
class ImageStep:
    """One image of a prompt to evaluate: ``n_pos`` positions from ``start``."""

    seq: SeqState
    start: int
    n_pos: int


@dataclass
class StepPlan:
    entries: list[tuple[SeqState, BatchEntry]]
    image: ImageStep | None = None


class Scheduler:
    def __init__(self, n_seq_max: int, n_batch: int) -> None:
        self.slots = [Slot(seq_id=i) for i in range(n_seq_max)]
        self.n_batch = n_batch
        self.running: list[SeqState] = []
        self._clock = 0

    @property
    def n_free(self) -> int:
        return sum(not slot.busy for slot in self.slots)

    def admit(
        self,
        request_id: str,
        prompt: Sequence[int],
        image_spans: Mapping[int, int] | None = None,
    ) -> SeqState:
        """Bind a request to a free slot, reusing the longest cached prefix of its prompt.

        The prefix may come from any slot, busy ones included: if taking over that slot would
        throw away a longer cached conversation (or it is busy), the prefix is shared into another
        free slot instead (``copy_from``). At least the last prompt token is always evaluated,
        since sampling needs its logits, and an image is reused whole or not at all. The caller
        then applies the cache changes.
        """
        image_spans = image_spans or {}
        free = [slot for slot in self.slots if not slot.busy]
        assert free, "admit() called with no free slot"
        shared, _, source = max(
            ((common_prefix(s.cached, prompt), not s.busy, s) for s in self.slots),
            key=lambda candidate: candidate[:2],
        )
        n_reused = _outside_images(min(shared, len(prompt) - 1), image_spans)
        # Taking the source over loses nothing when all it holds is a prefix of this prompt.
        keeps_whole = shared == len(source.cached) or len(free) == 1
        if n_reused > 0 and not source.busy and keeps_whole:
            target, copy_from = source, None
        else:
            # Empty slots first, then the least recently used one.
            target = min(free, key=lambda s: (len(s.cached) > 0, s.last_used))
            copy_from = source if n_reused > 0 and source is not target else None
            if copy_from is None and target is not source:
                n_reused = 0
        if copy_from is not None:
            target.cached[:] = source.cached[:n_reused]
        del target.cached[n_reused:]
        target.busy = True
        self._clock += 1
        target.last_used = self._clock
        seq = SeqState(
            request_id=request_id,
            prompt=prompt,
            slot=target,
            n_reused=n_reused,
            copy_from=copy_from,
            image_spans=image_spans,
        )
        self.running.append(seq)
        return seq

    def forget(self, seq: SeqState) -> None:
        """The slot's cells could not be cut at ``n_reused``: start its prompt from scratch."""
        seq.slot.cached.clear()
        seq.n_reused = 0

    def plan(self, drafts: Mapping[int, Sequence[int]] | None = None) -> StepPlan:
        """The next step: every decoding sequence's next token (followed by its ``drafts``,
        by slot id, as far as the batch has room), then prompt chunks."""
        entries: list[tuple[SeqState, BatchEntry]] = []
        image: ImageStep | None = None
        budget = self.n_batch
        decoding = [
            seq
            for seq in self.running
            if seq.status is SeqStatus.DECODE and seq.next_token is not None
        ]
        budget -= len(decoding)
        for seq in decoding:
            assert seq.next_token is not None
            # Drafts only take room no other sequence's next token needs.
            draft = list((drafts or {}).get(seq.slot.seq_id, ()))[: max(0, budget)]
            budget -= len(draft)
            entry = BatchEntry(
                seq.slot.seq_id, [seq.next_token, *draft], seq.n_past, True, logits_all=bool(draft)
            )
            entries.append((seq, entry))
        for seq in self.running:
            if seq.status is not SeqStatus.PREFILL:
                continue
            start = seq.n_past
            n_image = seq.image_spans.get(start)
            if n_image is not None:
                if image is None:
                    image = ImageStep(seq, start, n_image)
                continue
            if budget <= 0:
                continue
            end = min([start + budget, len(seq.prompt)] + [s for s in seq.image_spans if s > start])
            chunk = seq.prompt[start:end]
            done = end == len(seq.prompt)
            entries.append((seq, BatchEntry(seq.slot.seq_id, chunk, start, done)))
            budget -= len(chunk)
        # With one KV stream per sequence llama.cpp cuts a batch into micro-batches of
        # consecutive sequence ids: in id order the decode tokens of a step make one, not many.
        entries.sort(key=lambda pair: pair[1].seq_id)
        return StepPlan(entries, image)

    def decoded(self, plan: StepPlan) -> None:
        """The plan's tokens are now in the cache."""
        for seq, entry in plan.entries:
            seq.slot.cached.extend(entry.tokens)
            if seq.status is SeqStatus.PREFILL and seq.n_past == len(seq.prompt):
                seq.status = SeqStatus.DECODE
            seq.next_token = None

    def restored(self, seq: SeqState, n_reused: int) -> None:
        """The slot now holds the first ``n_reused`` prompt tokens, from a saved state."""
        seq.slot.cached[:] = seq.prompt[:n_reused]
        seq.n_reused = n_reused
        seq.copy_from = None

    def rollback(self, seq: SeqState, n_keep: int) -> None:
        """The sequence's cells from position ``n_keep`` on were dropped (rejected drafts)."""
        del seq.slot.cached[n_keep:]

    def image_decoded(self, step: ImageStep) -> None:
        """The image's embeddings are now in the cache."""
        step.seq.slot.cached.extend(step.seq.prompt[step.start : step.start + step.n_pos])

    def release(self, seq: SeqState, *, keep_cache: bool) -> None:
        """Free the request's slot; its cells stay for prefix reuse unless ``keep_cache`` is off."""
        self.running.remove(seq)
        seq.slot.busy = False
        if not keep_cache:
            seq.slot.cached.clear()


def _outside_images(n_reused: int, image_spans: Mapping[int, int]) -> int:
    """``n_reused`` moved back to the start of an image it would cut through."""
    for start, n_pos in image_spans.items():
        if start < n_reused < start + n_pos:
            return start
    return n_reused
