"""What the worker asks of speculation each step, as data in and data out.

Before the scheduler plans a step, the core offers every decoding sequence that speculates as
a ``DraftAsk`` (what its cells hold, the token it decodes next, how many drafts it has room
for) and ``propose`` answers with drafts by sequence: n-gram lookup in the sequence's own
tokens (``"ngram"``), or a small draft model run on the worker beside the target (``"draft"``,
``draft_model.py``). The scheduler puts them after the sequence's next token with logits at
every position. After the decode the core samples those positions with the request's own
sampler, in order, while the sampled token equals the draft, and hands the sampled tokens to
``settle``, which answers how many drafts were accepted (the rule and its guarantees are in
``drafts.py``) and keeps the counters. Taking the tokens into the request, and dropping the
cells of rejected drafts, stay the core's.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from ..batch import common_prefix
from ..config import EngineConfig
from ..sizing import ContextChoice
from .drafts import DraftWant, SeqSpeculation, SpecStats

if TYPE_CHECKING:
    from ..native.runner import DecodeRun
    from ..native.weights import LoadedModel
    from .draft_model import DraftModel

__all__ = ["DraftAsk", "SpeculationStep"]

log = logging.getLogger("llamacpp_integrations.engine")


@dataclass(frozen=True)
class DraftAsk:
    """One decoding sequence offered for drafting this step.

    Attributes:
        seq_id: Its KV sequence.
        cached: The tokens its cells hold (prompt and accepted output).
        next_token: The token it decodes first this step; drafts follow it.
        state: Its speculation state (``SpeculationStep.start``).
        room: The most drafts it can take: what is left of its token limit and context, and
            fewer near a reasoning budget, whose forced end must come at its exact place.
    """

    seq_id: int
    cached: Sequence[int]
    next_token: int
    state: SeqSpeculation
    room: int


class SpeculationStep:
    """Drafting and the accounting of verification for one engine's sequences.

    Args:
        config: The engine's configuration (``speculative`` is set).
        draft_model: The draft model and its context, in ``"draft"`` mode.
    """

    def __init__(self, config: EngineConfig, draft_model: DraftModel | None = None) -> None:
        self.config = config
        self.stats = SpecStats()  # drafts verified by every request of this engine
        self.draft_model = draft_model

    @classmethod
    def for_engine(
        cls,
        config: EngineConfig,
        target: LoadedModel,
        draft_weights: LoadedModel | None,
        *,
        kv: ContextChoice,
        run: DecodeRun | None = None,
    ) -> SpeculationStep:
        """The speculation of an engine on ``target``, with a draft model on
        ``draft_weights`` (its context made here, on the worker) in ``"draft"`` mode, whose
        decodes ``run`` runs where given (under the stall watch: its context is then made
        interruptible)."""
        draft = None
        if config.speculative == "draft":
            # Imported here: the rest of this module is pure and unit-tested without llama.cpp.
            from .draft_model import DraftModel

            assert draft_weights is not None
            draft = DraftModel(draft_weights, target, config, kv=kv, run=run)
        return cls(config, draft_model=draft)

    def start(
        self, prompt: Sequence[int], *, allowed: bool, constrained: bool, has_images: bool
    ) -> SeqSpeculation | None:
        """The speculation state of a newly admitted request, or None when it does not
        speculate: not ``allowed`` (the request opted out), ``constrained`` by a grammar from
        its first token (unless ``speculative_grammar``), or in ``"draft"`` mode a prompt
        with images."""
        if not allowed:
            return None
        if constrained and not self.config.speculative_grammar:
            return None
        if self.draft_model is not None:
            if has_images:
                return None  # the draft model never saw the images
            return SeqSpeculation.without_ngrams(max_draft=self.config.speculative_max_draft)
        return SeqSpeculation(
            prompt,
            max_draft=self.config.speculative_max_draft,
            ngram_size=self.config.speculative_ngram_size,
        )

    def propose(self, asks: Sequence[DraftAsk], *, n_decoding: int) -> dict[int, list[int]]:
        """This step's drafts by sequence id (sequences without drafts left out).

        Only while few sequences decode (``n_decoding`` of them this step): a batch of many
        already keeps the CPU busy, and verifying drafts there would cost more than the steps
        it saves.
        """
        if n_decoding > self.config.speculative_max_batch:
            return {}
        if self.draft_model is None:
            drafts = {ask.seq_id: ask.state.draft(ask.room) for ask in asks if ask.room > 0}
            return {seq_id: draft for seq_id, draft in drafts.items() if draft}
        wants = [
            DraftWant(ask.seq_id, ask.cached, ask.next_token, k)
            for ask in asks
            if (k := ask.state.budget(ask.room) if ask.room > 0 else 0) > 0
        ]
        if not wants:
            return {}
        return {seq_id: draft for seq_id, draft in self.draft_model.draft(wants).items() if draft}

    def settle(self, state: SeqSpeculation, drafted: Sequence[int], sampled: Sequence[int]) -> int:
        """How many of ``drafted`` the target accepted, given what its sampler picked at each
        verified position (``sampled``: position by position, stopping at the first token
        that differs from the draft); the counters and the draft length learn from it."""
        accepted = min(common_prefix(drafted, sampled), len(drafted))
        self.stats.add(len(drafted), accepted)
        state.verified(len(drafted), accepted)
        return accepted

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
