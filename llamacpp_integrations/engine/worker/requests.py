"""What crosses from the caller's side to the worker: a validated, tokenized generation request
(embedding jobs are ``embedding/queue.py``'s ``EmbedJob``)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from ...errors import LlamaCppIntegrationError
from ...prompts.reasoning import ReasoningSpec
from ..channel import EventChannel
from ..lora import LoraKey

if TYPE_CHECKING:
    from ..native.sampler import SamplerChain
    from ..native.vision import MediaPrompt

__all__ = ["ForcedText", "PreparedRequest"]


@dataclass(frozen=True, kw_only=True)
class PreparedRequest:
    """A generation request ready for the scheduler: prompt tokenized, limits resolved.

    With images, ``media`` holds their chunks and ``prompt_tokens`` their keys (negative).
    """

    request_id: str
    prompt_tokens: tuple[int, ...]
    media: MediaPrompt | None = field(default=None, repr=False)
    max_new_tokens: int
    stop: tuple[str, ...]
    ignore_eos: bool
    special: bool
    logprobs: int | None = None
    speculative: bool = True  # the request lets the engine speculate (if it is configured to)
    constrained: bool = False  # a grammar constrains the whole answer (not a lazy one)
    reasoning: ReasoningSpec | None = None
    budget: ForcedText | None = None
    lora: LoraKey = ()  # the adapters its rows are decoded with (``engine/lora.py``)
    submitted_at: float
    deadline: float | None
    channel: EventChannel = field(repr=False)
    sampler: SamplerChain = field(repr=False)

    def refuse(self, error: LlamaCppIntegrationError) -> None:
        """End the request before it was admitted: free what it holds, hand the caller
        ``error``."""
        self.sampler.close()
        if self.media is not None:
            self.media.close()
        self.channel.put(error)


@dataclass(frozen=True)
class ForcedText:
    """Tokens the worker writes itself (a reasoning budget's end marker) once the model has
    thought for ``after`` tokens without ending its thinking."""

    after: int
    tokens: tuple[int, ...]
