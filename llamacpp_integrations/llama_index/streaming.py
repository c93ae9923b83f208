"""Streams of ``LlamaCpp``: engine chunks folded into LlamaIndex responses, partial structured
objects, and closing a stream's generator (which cancels its request) however its user stops."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager
from typing import Any

from llama_index.core.base.llms.types import ChatResponse
from llama_index.core.bridge.pydantic import BaseModel, ValidationError

from ..engine import StreamChunk
from ..errors import OutputTruncatedError
from ..tools import ToolStreamChunk, new_tool_call_id
from .messages import (
    PartialToolCall,
    assistant_message,
    parse_partial_json,
    response_raw,
    to_logprobs,
    usage_kwargs,
)

__all__ = ["ChatStream", "PartialObjects", "aclosed", "closed"]


@contextmanager
def closed(iterator: object) -> Iterator[None]:
    """Close a generator when the code using it ends, early or not (cancels its request)."""
    try:
        yield
    finally:
        close = getattr(iterator, "close", None)
        if callable(close):
            close()


@asynccontextmanager
async def aclosed(iterator: object) -> AsyncIterator[None]:
    """Async :func:`closed`."""
    try:
        yield
    finally:
        aclose = getattr(iterator, "aclose", None)
        if callable(aclose):
            await aclose()


class ChatStream:
    """Engine chunks -> cumulative ``ChatResponse`` s (text so far, tool calls so far)."""

    def __init__(self, model: str) -> None:
        self._model = model
        self._text = ""
        self._calls: dict[int, PartialToolCall] = {}
        self.finish_reason: str | None = None

    def _response(
        self, chunk: StreamChunk | ToolStreamChunk, finish_reason: str | None
    ) -> ChatResponse:
        return ChatResponse(
            message=assistant_message(self._text, list(self._calls.values())),
            delta=chunk.text,
            raw=response_raw(
                chunk.request_id, self._model, finish_reason, chunk.usage, chunk.timings
            ),
            additional_kwargs=usage_kwargs(chunk.usage),
            logprobs=to_logprobs(chunk.logprobs),
        )

    def text(self, chunk: StreamChunk) -> ChatResponse | None:
        self._text += chunk.text
        self.finish_reason = chunk.finish_reason
        if not chunk.text and not chunk.logprobs and chunk.finish_reason is None:
            return None
        return self._response(chunk, chunk.finish_reason)

    def tools(self, chunk: ToolStreamChunk) -> ChatResponse | None:
        self._text += chunk.text
        self.finish_reason = chunk.finish_reason
        for delta in chunk.tool_call_deltas:
            call = self._calls.get(delta.index)
            if call is None:
                call = PartialToolCall(delta.id or new_tool_call_id(), delta.name or "")
                self._calls[delta.index] = call
            call.arguments += delta.arguments
        if chunk.finish_reason is not None and chunk.tool_calls:
            self._calls = {i: PartialToolCall.of(c) for i, c in enumerate(chunk.tool_calls)}
        if not (chunk.text or chunk.tool_call_deltas or chunk.logprobs or chunk.finish_reason):
            return None
        return self._response(chunk, chunk.finish_reason)

    def check_structured(self, request_id: str | None = None) -> None:
        if self.finish_reason == "length":
            raise OutputTruncatedError(
                "max_tokens ended the JSON answer early",
                request_id=request_id,
                partial_text=self._text,
            )


class PartialObjects:
    """Structured output as it streams: the model when what came validates, else a
    ``FlexibleModel`` with the fields so far; only changes are reported."""

    def __init__(self, output_cls: type[BaseModel]) -> None:
        from llama_index.core.program.utils import create_flexible_model

        self._cls = output_cls
        self._flexible = create_flexible_model(output_cls)
        self._last: Any = None
        self.latest: BaseModel | None = None

    def update(self, text: str) -> BaseModel | None:
        try:
            value = parse_partial_json(text)
        except ValueError:
            return None
        if not isinstance(value, dict) or value == self._last:
            return None
        self._last = value
        try:
            self.latest = self._cls.model_validate(value)
        except ValidationError:
            self.latest = self._flexible.model_validate(value)
        return self.latest
