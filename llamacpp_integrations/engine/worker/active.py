"""The worker's state of one running generation request: the tokens it took, the text and
reasoning not sent yet, and the events it sends (a chunk as text becomes certain, the last one
with its usage and timings when it ends)."""

from __future__ import annotations

import logging
from collections import deque
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from ...errors import LlamaCppIntegrationError
from ...prompts.reasoning import ReasoningSplitter
from ..results import FinishReason, StreamChunk, Timings, TokenLogprob, Usage
from ..speculation.drafts import SeqSpeculation
from .output import OutputProcessor
from .requests import PreparedRequest
from .sequences import SeqState

if TYPE_CHECKING:
    from ..native.sampler import SamplerChain

__all__ = ["ActiveRequest"]

log = logging.getLogger("llamacpp_integrations.engine")


@dataclass
class ActiveRequest:
    """Worker-owned state of one running generation request."""

    prepared: PreparedRequest
    seq: SeqState
    sampler: SamplerChain
    output: OutputProcessor
    admitted_at: float
    first_token_at: float | None = None
    generated: list[int] = field(default_factory=list)
    unsent_ids: list[int] = field(default_factory=list)
    unsent_logprobs: list[TokenLogprob] = field(default_factory=list)
    unsent_text: list[str] = field(default_factory=list)
    unsent_reasoning: list[str] = field(default_factory=list)
    splitter: ReasoningSplitter | None = None  # a reasoning model's: thinking apart from text
    reasoning_tokens: int = 0
    undecided_tokens: int = 0  # tokens not yet known to be reasoning or answer
    forced: deque[int] = field(default_factory=deque)  # tokens to write instead of sampling
    budget_spent: bool = False  # the reasoning budget ran out, or the answer began
    spec: SeqSpeculation | None = None  # drafting state, when the request speculates

    @classmethod
    def start(
        cls, request: PreparedRequest, seq: SeqState, now: float, spec: SeqSpeculation | None
    ) -> ActiveRequest:
        """The state of a request just admitted to ``seq`` at ``now``."""
        return cls(
            prepared=request,
            seq=seq,
            sampler=request.sampler,
            output=OutputProcessor(request.stop),
            admitted_at=now,
            splitter=None if request.reasoning is None else request.reasoning.splitter(),
            spec=spec,
        )

    def next_forced(self) -> int | None:
        """The next token to write instead of sampling, already given to the sampler; ``None``
        when nothing is forced, or the grammar refused the forced text (then forcing stops
        and the model goes on)."""
        while self.forced:
            token = self.forced.popleft()
            if self.sampler.force(token):
                return token
            log.warning("request %s: forced token refused", self.prepared.request_id)
            self.forced.clear()
        return None

    def take(self, token: int, piece: bytes, logprob: TokenLogprob | None) -> FinishReason | None:
        """Take one generated token (not an end of generation), its bytes and, when asked
        for, its log-probability; ``"stop"`` or ``"length"`` when it ends the request."""
        self.generated.append(token)
        self.unsent_ids.append(token)
        if self.spec is not None:
            self.spec.push(token)
        if logprob is not None:
            self.unsent_logprobs.append(logprob)
        self.take_token_text(self.output.feed(piece))
        self.check_budget()
        if self.output.stopped:
            return "stop"
        if len(self.generated) >= self.prepared.max_new_tokens:
            return "length"
        self.seq.next_token = token
        return None

    def pending_chunk(self) -> StreamChunk | None:
        """What became certain since the last chunk, as a chunk (``None``: no text yet)."""
        if not (self.unsent_text or self.unsent_reasoning):
            return None
        text, reasoning = self.take_unsent()
        chunk = StreamChunk(
            request_id=self.prepared.request_id,
            text=text,
            token_ids=tuple(self.unsent_ids),
            logprobs=tuple(self.unsent_logprobs),
            reasoning=reasoning,
        )
        self.unsent_ids = []
        self.unsent_logprobs = []
        return chunk

    def last_chunk(self, reason: FinishReason, now: float) -> StreamChunk:
        """The chunk that ends the request: what was held back, usage and timings."""
        self.take_final_text(self.output.flush())
        text, reasoning = self.take_unsent()
        return StreamChunk(
            request_id=self.prepared.request_id,
            text=text,
            token_ids=tuple(self.unsent_ids),
            finish_reason=reason,
            usage=self.usage(),
            timings=self.timings(now),
            logprobs=tuple(self.unsent_logprobs),
            reasoning=reasoning,
            stop_string=self.output.stop_string if reason == "stop" else None,
        )

    def failure(self, error: LlamaCppIntegrationError) -> LlamaCppIntegrationError:
        """``error`` as this request's: its id, and the text it had produced."""
        error.request_id = self.prepared.request_id
        if hasattr(error, "partial_text"):
            error.partial_text = self.output.text
        return error

    def take_token_text(self, text: str) -> None:
        """A generated token's text (what became certain with it), split into answer and
        reasoning for the next chunk, and the token counted.

        A token is reasoning when the reasoning was going on before it (so the one that
        completes the end marker counts), or when it shows that the output opens reasoning
        (then so are the tokens before it that could not tell).
        """
        splitter = self.splitter
        if splitter is None:
            self._queue("", text)
            return
        before = splitter.state
        self._queue(*splitter.feed(text))
        after = splitter.state
        if before == "reasoning":
            self.reasoning_tokens += 1
        elif before == "undecided":
            if after == "undecided":
                self.undecided_tokens += 1
                return
            if after == "reasoning":
                self.reasoning_tokens += self.undecided_tokens + 1
            self.undecided_tokens = 0

    def take_final_text(self, text: str) -> None:
        """The output ended: what was held back of it (and ``text``) goes to the last chunk."""
        splitter = self.splitter
        if splitter is None:
            self._queue("", text)
            return
        self._queue(*splitter.finish(text))
        if splitter.state == "reasoning":  # cut inside the reasoning
            self.reasoning_tokens += self.undecided_tokens
        self.undecided_tokens = 0

    def _queue(self, reasoning: str, answer: str) -> None:
        if reasoning:
            self.unsent_reasoning.append(reasoning)
        if answer:
            self.unsent_text.append(answer)

    def take_unsent(self) -> tuple[str, str]:
        """The (text, reasoning) not sent yet, now counted as sent."""
        text, reasoning = "".join(self.unsent_text), "".join(self.unsent_reasoning)
        self.unsent_text.clear()
        self.unsent_reasoning.clear()
        return text, reasoning

    def check_budget(self) -> None:
        """After a token: queue the budget's forced tokens once the model has thought for
        the budget and is still thinking (never in the middle of a marker of the format's
        framing, where the end marker could not go)."""
        budget, splitter = self.prepared.budget, self.splitter
        if budget is None or splitter is None or self.budget_spent:
            return
        state = splitter.state
        if state == "answer":
            self.budget_spent = True
        elif state == "reasoning" and self.reasoning_tokens >= budget.after:
            self.forced.extend(budget.tokens)
            self.budget_spent = True

    def draft_room(self, n_ctx_per_seq: int) -> int:
        """How many tokens may be drafted after the next one: never past the token limit or
        the context, nor past a reasoning budget's end (its forced tokens must follow the very
        token that spent it)."""
        room = min(
            self.prepared.max_new_tokens - 1 - len(self.generated),
            n_ctx_per_seq - 1 - self.seq.n_past,
        )
        budget = self.prepared.budget
        if budget is None or self.splitter is None or self.budget_spent:
            return room
        return min(room, budget.after - self.reasoning_tokens - self.undecided_tokens - 1)

    def usage(self) -> Usage:
        """Token counts so far (image embeddings counted in KV cells)."""
        media = self.prepared.media
        n_prompt = len(self.prepared.prompt_tokens)
        n_reused = self.seq.n_reused
        return Usage(
            prompt_tokens=n_prompt if media is None else media.n_tokens,
            completion_tokens=len(self.generated),
            cached_prompt_tokens=n_reused if media is None else media.tokens_before(n_reused),
            prompt_image_tokens=0 if media is None else media.n_image_tokens,
            reasoning_tokens=self.reasoning_tokens,
        )

    def timings(self, now: float) -> Timings:
        """Seconds spent so far, from submission to ``now``."""
        submitted = self.prepared.submitted_at
        first = self.first_token_at
        return Timings(
            queued_s=self.admitted_at - submitted,
            time_to_first_token_s=None if first is None else first - submitted,
            total_s=now - submitted,
            prompt_eval_s=(first or now) - self.admitted_at,
            generation_s=0.0 if first is None else now - first,
        )
