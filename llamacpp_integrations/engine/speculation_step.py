"""The worker's side of speculative decoding: drafts before a step, verification after it.

``EngineCore`` owns one ``SpeculationStep`` when its configuration speculates. Before the
scheduler plans a step, ``draft`` gives each decoding sequence that speculates its drafts
(``SeqState.draft``): by n-gram lookup in its own tokens (``"ngram"``), or from a small draft
model run on the worker beside the target (``"draft"``, see ``draft_model.py``). The scheduler
puts them after the sequence's next token with logits at every position; after the decode
``verify`` samples those positions with the request's own sampler and keeps drafts while they
equal what it picks (the rule and its guarantees are in ``speculative.py``).

Sampling, taking a token and ending a request stay the core's: they come in as callables.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from typing import Protocol

from ..errors import EngineError, LlamaCppIntegrationError
from .active import ActiveRequest
from .batch import BatchEntry
from .config import EngineConfig
from .draft_model import DraftModel, DraftWant
from .requests import PreparedRequest
from .runner import GenerationContext
from .scheduler import Scheduler, SeqState, SeqStatus
from .speculative import SeqSpeculation, SpecStats
from .types import FinishReason

__all__ = ["SpeculationStep", "TakeToken"]

log = logging.getLogger("llamacpp_integrations.engine")


class TakeToken(Protocol):
    """The core's handling of one generated token; False when it ended the request."""

    def __call__(
        self,
        active: ActiveRequest,
        token: int,
        now: float,
        logits_index: int,
        *,
        send: bool = True,
    ) -> bool: ...


class SpeculationStep:
    """Drafting and verification for one engine's sequences.

    Args:
        config: The engine's configuration (``speculative`` is set).
        scheduler: The engine's scheduler (drafts go on its sequences; rejected ones are
            rolled back there).
        n_ctx_per_seq: Context of one sequence; drafts never run past it.
        context: The generation context (made on first use by the core).
        sample: Samples (or forces) the token at a logits row of the last decode.
        take: Takes one token into its request (``TakeToken``).
        finish: Ends a request with a reason and an optional error.
        send: Sends a request's pending text; False when its caller went away.
        draft_model: The draft model and its context, in ``"draft"`` mode.
    """

    def __init__(
        self,
        config: EngineConfig,
        scheduler: Scheduler,
        *,
        n_ctx_per_seq: int,
        context: Callable[[], GenerationContext],
        sample: Callable[[ActiveRequest, int], int],
        take: TakeToken,
        finish: Callable[[ActiveRequest, FinishReason, LlamaCppIntegrationError | None], None],
        send: Callable[[ActiveRequest], bool],
        draft_model: DraftModel | None = None,
    ) -> None:
        self.config = config
        self.scheduler = scheduler
        self.stats = SpecStats()  # drafts verified by every request of this engine
        self.draft_model = draft_model
        self._n_ctx_per_seq = n_ctx_per_seq
        self._context = context
        self._sample = sample
        self._take = take
        self._finish = finish
        self._send = send

    def start(self, request: PreparedRequest) -> SeqSpeculation | None:
        """The speculation state of a newly admitted request, or None when it does not
        speculate (opted out; a grammar-constrained answer unless ``speculative_grammar``; in
        ``"draft"`` mode also a prompt with images)."""
        if not request.speculative:
            return None
        if request.constrained and not self.config.speculative_grammar:
            return None
        if self.draft_model is not None:
            if request.media is not None:
                return None  # the draft model never saw the images
            return SeqSpeculation.without_ngrams(max_draft=self.config.speculative_max_draft)
        return SeqSpeculation(
            request.prompt_tokens,
            max_draft=self.config.speculative_max_draft,
            ngram_size=self.config.speculative_ngram_size,
        )

    def draft(self, active: Mapping[str, ActiveRequest]) -> None:
        """Give each decoding sequence that speculates its drafts for this step.

        Only while few sequences decode: a batch of many already keeps the CPU busy, and
        verifying drafts there would cost more than the steps it saves.
        """
        decoding = [
            seq
            for seq in self.scheduler.running
            if seq.status is SeqStatus.DECODE and seq.next_token is not None
        ]
        if not decoding or len(decoding) > self.config.speculative_max_batch:
            return
        wants: list[tuple[SeqState, DraftWant]] = []
        for seq in decoding:
            request = active[seq.request_id]
            if request.spec is None or request.forced:
                continue
            # Drafts never go past the request's token limit or the sequence's context.
            limit = min(
                request.prepared.max_new_tokens - 1 - len(request.generated),
                self._n_ctx_per_seq - 1 - seq.n_past,
            )
            if self.draft_model is None:
                seq.draft = request.spec.draft(limit) if limit > 0 else []
                continue
            k = request.spec.budget(limit) if limit > 0 else 0
            if k > 0:
                assert seq.next_token is not None
                wants.append((seq, DraftWant(seq.slot.seq_id, seq.slot.cached, seq.next_token, k)))
        if wants:
            assert self.draft_model is not None
            drafts = self.draft_model.draft([want for _, want in wants])
            for seq, want in wants:
                seq.draft = drafts.get(want.seq_id, [])

    def verify(self, active: ActiveRequest, seq: SeqState, entry: BatchEntry, now: float) -> None:
        """Sample a speculating sequence position by position, keeping drafts while they
        equal what its sampler picks (see ``speculative.py``); drop the cells of the rest."""
        draft = entry.tokens[1:]
        # Counted as found, before a token that ends the request publishes the stats: a
        # caller that sees the request gone then sees its drafts too.
        self.stats.add(len(draft), 0)
        accepted = 0
        running = True
        for i in range(len(draft) + 1):
            index = entry.first_index + i
            token = self._sample(active, index)
            matched = i < len(draft) and token == draft[i]
            if matched:
                self.stats.accepted += 1
            running = self._take(active, token, now, index, send=False)
            if not running or not matched:
                break
            accepted += 1
        assert active.spec is not None
        active.spec.verified(len(draft), accepted)
        if not running:
            # Ended: its cells (drafts included) still hold exactly the tokens the slot
            # lists, so they stay valid for prefix reuse.
            return
        n_keep = entry.start_pos + 1 + accepted
        if accepted < len(draft):
            if not self._context().remove(seq.slot.seq_id, n_keep):
                self._finish(active, "error", EngineError("could not drop rejected draft cells"))
                return
            self.scheduler.rollback(seq, n_keep)
        if (active.unsent_text or active.unsent_reasoning) and not self._send(active):
            self._finish(active, "cancelled", None)

    def forget(self, seq_id: int) -> None:
        """The main context dropped this sequence's cells: so does the draft context."""
        if self.draft_model is not None:
            self.draft_model.forget(seq_id)

    def draft_cells(self, seq_id: int) -> int:
        """How many cells the draft context holds for a sequence (0 without a draft model)."""
        return 0 if self.draft_model is None else self.draft_model.cells(seq_id)

    def close(self) -> None:
        """Free the draft model's context and weights, if any."""
        if self.draft_model is not None:
            self.draft_model.close()
