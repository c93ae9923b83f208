"""The request bodies the server reads, as pydantic models (OpenAI's field names).

Fields OpenAI defines that change nothing here (``user``, ``store``, ``metadata``...) are
accepted and ignored, as clients send them unasked; fields whose values cannot be honoured
(``n`` above ``MAX_CHOICES``, ``echo``, ``suffix``, ``dimensions`` other than the model's width,
and the fields ``field_policy`` lists) are refused with a 400 naming them. The generation bodies
keep the fields they do not declare (``model_extra``) so that ``field_policy`` can see them;
any it does not list is ignored, as llama-server ignores them. ``top_k``, ``min_p``,
``repeat_penalty``, ``grammar``, ``reasoning``, ``reasoning_budget`` and
``chat_template_kwargs`` are extensions, as llama-server has most of them.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from ..lora_choice import LoraChoice
from ..reasoning_effort import ReasoningEffort

__all__ = [
    "MAX_CHOICES",
    "ChatCompletionBody",
    "CompletionBody",
    "EmbeddingBody",
    "SamplingFields",
    "StreamOptions",
]

MAX_CHOICES = 16
"""Most answers one request may ask for (``n``): each is an engine request of its own, so a
larger ``n`` would let one client fill the engine's queue."""


class StreamOptions(BaseModel):
    """``stream_options``: whether the last chunk of a stream carries the usage."""

    model_config = ConfigDict(extra="ignore")

    include_usage: bool = False


class SamplingFields(BaseModel):
    """Sampling and limits both generation endpoints take; ``None`` keeps the engine default."""

    model_config = ConfigDict(extra="ignore")

    model: str | None = None
    temperature: float | None = Field(default=None, ge=0.0)
    top_p: float | None = Field(default=None, gt=0.0, le=1.0)
    top_k: int | None = Field(default=None, ge=0)
    min_p: float | None = Field(default=None, ge=0.0, le=1.0)
    presence_penalty: float | None = None
    frequency_penalty: float | None = None
    repeat_penalty: float | None = Field(default=None, gt=0.0)
    logit_bias: dict[str, float] | None = None
    seed: int | None = None
    stop: str | list[str] | None = None
    max_tokens: int | None = Field(default=None, ge=1)
    n: int | None = Field(default=None, ge=1, le=MAX_CHOICES)
    stream: bool = False
    stream_options: StreamOptions | None = None
    grammar: str | None = None
    lora: list[LoraChoice] | None = None


class ChatCompletionBody(SamplingFields):
    """``POST /v1/chat/completions``."""

    model_config = ConfigDict(extra="allow")  # undeclared fields, for field_policy to judge

    messages: list[dict[str, Any]] = Field(min_length=1)
    max_completion_tokens: int | None = Field(default=None, ge=1)
    tools: list[dict[str, Any]] | None = None
    tool_choice: str | dict[str, Any] | None = None
    parallel_tool_calls: bool | None = None
    response_format: dict[str, Any] | None = None
    logprobs: bool | None = None
    top_logprobs: int | None = Field(default=None, ge=0, le=20)
    reasoning: bool | None = None
    reasoning_budget: int | None = Field(default=None, ge=0)
    reasoning_effort: ReasoningEffort | None = None  # what each does: see ``reasoning``
    chat_template_kwargs: dict[str, Any] | None = None


class CompletionBody(SamplingFields):
    """``POST /v1/completions`` (OpenAI's legacy completions)."""

    model_config = ConfigDict(extra="allow")  # undeclared fields, for field_policy to judge

    prompt: str | list[str] | list[int]
    max_tokens: int | None = Field(default=16, ge=1)
    logprobs: int | None = Field(default=None, ge=0, le=20)
    echo: bool = False
    suffix: str | None = None


class EmbeddingBody(BaseModel):
    """``POST /v1/embeddings``."""

    model_config = ConfigDict(extra="ignore")

    model: str | None = None
    input: str | list[str] | list[int] | list[list[int]]
    encoding_format: Literal["float", "base64"] = "float"
    dimensions: int | None = None
