"""The worker's state of one running generation request, and what it reports at the end."""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field

from .output import OutputProcessor
from .reasoning import ReasoningSplitter
from .requests import PreparedRequest
from .sampler import SamplerChain
from .scheduler import SeqState
from .speculative import SeqSpeculation
from .types import Timings, TokenLogprob, Usage

__all__ = ["ActiveRequest"]


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
