"""What crosses from the caller's side to the worker: validated, tokenized work items."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from .channel import EventChannel
from .reasoning import ReasoningSpec

if TYPE_CHECKING:
    from .sampler import SamplerChain
    from .vision import MediaPrompt

__all__ = ["EmbedJob", "ForcedText", "PreparedRequest"]


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
    submitted_at: float
    deadline: float | None
    channel: EventChannel = field(repr=False)
    sampler: SamplerChain = field(repr=False)


@dataclass(frozen=True)
class ForcedText:
    """Tokens the worker writes itself (a reasoning budget's end marker) once the model has
    thought for ``after`` tokens without ending its thinking."""

    after: int
    tokens: tuple[int, ...]


@dataclass(frozen=True, kw_only=True)
class EmbedJob:
    """Texts (already tokenized) to embed in as few batched decodes as the budget allows."""

    request_id: str
    token_lists: Sequence[Sequence[int]]
    normalize: bool
    submitted_at: float
    deadline: float | None
    channel: EventChannel = field(repr=False)
    # Chunk-and-average mode: how many consecutive token lists make each text (None: one each).
    chunks: Sequence[int] | None = None
