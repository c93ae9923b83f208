"""The worker's state of one running generation request, and what it reports at the end."""

from __future__ import annotations

from dataclasses import dataclass, field

from .output import OutputProcessor
from .requests import PreparedRequest
from .sampler import SamplerChain
from .scheduler import SeqState
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
