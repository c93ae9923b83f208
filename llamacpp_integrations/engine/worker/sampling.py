"""What a step's logits become: each request's next tokens, sampled (or forced), checked
against its drafts when it speculates, and taken into the request (``active.py``).

Data out, the way ``speculation/step.py`` works: ``take`` answers which requests ended and
why, and the core finishes them (``EngineCore._finish``). Before a step, ``drafts`` offers the
decoding sequences that speculate to ``SpeculationStep.propose``; after it, the positions of a
speculating sequence are sampled in order while the sampler agrees with its drafts, settled,
taken, and the cells of rejected drafts dropped.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from functools import cached_property

from ...errors import EngineError
from ..batch import BatchEntry
from ..channel import EventChannel
from ..native.runner import GenerationContext
from ..native.weights import LoadedModel
from ..outbox import Outbox
from ..results import FinishReason
from ..speculation.step import DraftAsk, SpeculationStep
from .active import ActiveRequest
from .logprobs import LogprobComputer
from .scheduler import Scheduler
from .sequences import SeqState, SeqStatus

__all__ = ["Ending", "Sampling", "readers_gone"]


@dataclass(frozen=True)
class Ending:
    """A request that ended while its tokens were taken, and why."""

    active: ActiveRequest
    reason: FinishReason
    error: EngineError | None = None


class Sampling:
    """Samples and takes the tokens of one engine's sequences.

    Args:
        model: The weights (end-of-generation tokens, pieces, log-probabilities).
        scheduler: The engine's scheduler (the running sequences; drafts rolled back).
        speculation: The engine's speculation, if it speculates.
        n_ctx_per_seq: Positions a sequence may hold (what bounds its drafts).
    """

    def __init__(
        self,
        model: LoadedModel,
        scheduler: Scheduler,
        speculation: SpeculationStep | None,
        n_ctx_per_seq: int,
    ) -> None:
        self.model = model
        self.scheduler = scheduler
        self.speculation = speculation
        self.n_ctx_per_seq = n_ctx_per_seq
        # The step's chunks, handed over by the core right before its next decode
        # (``EngineCore.hand_over``).
        self.outbox = Outbox()
        # What llama.cpp says of a token never changes: asked once per token (two ctypes calls
        # a token otherwise), kept for the engine's life (at most the vocabulary).
        self._eog: dict[int, bool] = {}
        self._pieces: tuple[dict[int, bytes], dict[int, bytes]] = ({}, {})  # by ``special``

    def drafts(self, actives: Mapping[str, ActiveRequest]) -> dict[int, list[int]]:
        """This step's drafts by slot id, from the sequences that speculate."""
        if self.speculation is None:
            return {}
        asks: list[DraftAsk] = []
        n_decoding = 0
        for seq in self.scheduler.running:
            if seq.status is not SeqStatus.DECODE or seq.next_token is None:
                continue
            n_decoding += 1
            active = actives[seq.request_id]
            if active.spec is None or active.forced:
                continue
            room = active.draft_room(self.n_ctx_per_seq)
            asks.append(
                DraftAsk(seq.slot.seq_id, seq.slot.cached, seq.next_token, active.spec, room)
            )
        return self.speculation.propose(asks, n_decoding=n_decoding)

    def take(
        self,
        context: GenerationContext,
        pairs: Sequence[tuple[SeqState, BatchEntry]],
        actives: Mapping[str, ActiveRequest],
        now: float,
    ) -> list[Ending]:
        """Sample every sequence of a decoded group that produced logits and take its tokens;
        the requests that ended."""
        endings: list[Ending] = []
        greedy = _greedy_rows(context, pairs, actives)
        for seq, entry in pairs:
            if entry.logits_all:
                ending = self._verify(context, actives[seq.request_id], entry, now)
            elif entry.logits_last:
                active = actives[seq.request_id]
                token = active.next_forced()  # a reasoning budget that ran out
                if token is None:
                    index = entry.logits_index
                    token = active.sampler.sample(context, index, greedy.get(index))
                ending = self._take(context, active, token, now, entry.logits_index)
            else:
                continue  # a prompt chunk before its last token
            if ending is not None:
                endings.append(ending)
        return endings

    def _take(
        self,
        context: GenerationContext,
        active: ActiveRequest,
        token: int,
        now: float,
        logits_index: int,
        *,
        send: bool = True,
    ) -> Ending | None:
        """Hand one generated token to its request; how it ended, if it did. Without ``send``
        the text waits for the caller to send it (a speculative step sends once)."""
        request = active.prepared
        if active.first_token_at is None:
            active.first_token_at = now
        if self._is_eog(token) and not request.ignore_eos:
            return Ending(active, "stop")
        logprob = None
        if request.logprobs is not None:
            # The raw row is still that of this step's decode: sampling only reads it.
            logprob = self._logprobs.compute(
                context.logits_view(logits_index),
                token,
                request.logprobs,
                special=request.special,
            )
        pieces = self._pieces[request.special]
        piece = pieces.get(token)
        if piece is None:
            piece = pieces[token] = self.model.token_to_piece(token, special=request.special)
        ended = active.take(token, piece, logprob)
        if ended is not None:
            return Ending(active, ended)
        if send:
            self._send(active)
        return None

    def _verify(
        self, context: GenerationContext, active: ActiveRequest, entry: BatchEntry, now: float
    ) -> Ending | None:
        """Sample a speculating sequence's positions in order while its sampler agrees with
        the drafts, settle them, take the tokens, and drop the cells of rejected drafts."""
        assert self.speculation is not None and active.spec is not None
        draft = entry.tokens[1:]
        sampled: list[int] = []
        for i in range(len(draft) + 1):
            token = active.sampler.sample(context, entry.first_index + i)
            sampled.append(token)
            if i == len(draft) or token != draft[i] or self._is_eog(token):
                break
        # Settled before the tokens are taken: once the request ends, the stats are published,
        # and a caller that sees the request gone then sees its drafts too.
        accepted = self.speculation.settle(active.spec, draft, sampled)
        for i, token in enumerate(sampled):
            ending = self._take(context, active, token, now, entry.first_index + i, send=False)
            if ending is not None:
                # Its cells (drafts included) still hold exactly the tokens the slot lists, so
                # they stay valid for prefix reuse.
                return ending
        n_keep = entry.start_pos + 1 + accepted
        if accepted < len(draft):
            seq = active.seq
            if not context.remove(seq.slot.seq_id, n_keep):
                return Ending(active, "error", EngineError("could not drop rejected draft cells"))
            self.scheduler.rollback(seq, n_keep)
        self._send(active)
        return None

    def _is_eog(self, token: int) -> bool:
        eog = self._eog.get(token)
        if eog is None:
            eog = self._eog[token] = self.model.is_eog(token)
        return eog

    def _send(self, active: ActiveRequest) -> None:
        """Send what became certain (at the step's hand-over)."""
        chunk = active.pending_chunk()
        if chunk is not None:
            self.outbox.put(active.prepared.channel, chunk)

    @cached_property
    def _logprobs(self) -> LogprobComputer:
        """Made when a request first asks for log-probabilities."""
        return LogprobComputer(self.model)


def readers_gone(actives: Mapping[str, ActiveRequest], gone: list[EventChannel]) -> list[Ending]:
    """The running requests whose caller's event loop is gone (``Outbox.flush`` could not hand
    their events over): they end as cancelled."""
    if not gone:
        return []
    return [
        Ending(active, "cancelled")
        for active in actives.values()
        if active.prepared.channel in gone
    ]


def _greedy_rows(
    context: GenerationContext,
    pairs: Sequence[tuple[SeqState, BatchEntry]],
    actives: Mapping[str, ActiveRequest],
) -> dict[int, int]:
    """The argmax of every row whose sampler starts from it, by row, worked out at once."""
    rows = [
        entry.logits_index
        for seq, entry in pairs
        if entry.logits_last
        and not entry.logits_all
        and actives[seq.request_id].sampler.reads_argmax
    ]
    if not rows:
        return {}
    return dict(zip(rows, context.argmax_rows(rows), strict=True))
