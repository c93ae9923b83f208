"""The request bodies the server reads, as pydantic models (OpenAI's field names).

Fields OpenAI defines that change nothing here (``user``, ``store``, ``metadata``...) are
accepted and ignored, as clients send them unasked; fields whose values cannot be honoured
(``n`` above 1, ``echo``, ``suffix``, ``dimensions`` other than the model's width) are refused
by the translation with a 400 naming them. ``top_k``, ``min_p``, ``repeat_penalty``, ``grammar``,
``reasoning`` and ``reasoning_budget`` are extensions, as llama-server has some of them.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

__all__ = [
    "ChatCompletionBody",
    "CompletionBody",
    "EmbeddingBody",
    "SamplingFields",
    "StreamOptions",
]


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
    n: int | None = None
    stream: bool = False
    stream_options: StreamOptions | None = None
    grammar: str | None = None


class ChatCompletionBody(SamplingFields):
    """``POST /v1/chat/completions``."""

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


class CompletionBody(SamplingFields):
    """``POST /v1/completions`` (OpenAI's legacy completions)."""

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
