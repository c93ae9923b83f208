"""Streams of ``LlamaCpp``: answer pieces folded into cumulative LlamaIndex responses, and
partial structured objects with their instrumentation events. (A stream's generator is closed,
which cancels its request, by ``contextlib.closing`` / ``aclosing`` however its user stops.)"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import llama_index.core.instrumentation as instrument
from llama_index.core.base.llms.types import ChatResponse, CompletionResponse
from llama_index.core.bridge.pydantic import BaseModel, ValidationError
from llama_index.core.instrumentation.events.llm import (
    LLMStructuredPredictEndEvent,
    LLMStructuredPredictInProgressEvent,
    LLMStructuredPredictStartEvent,
)

from ..tools import ToolStreamChunk, new_tool_call_id, parse_partial_json
from .responses import (
    PartialToolCall,
    assistant_message,
    guard_report,
    response_raw,
    to_logprobs,
    usage_kwargs,
)

__all__ = ["ChatStream", "CompletionStream", "StructuredPrediction"]

dispatcher = instrument.get_dispatcher(__name__)  # type: ignore[attr-defined]  # re-exported


def _is_news(piece: ToolStreamChunk) -> bool:
    return bool(
        piece.text
        or piece.reasoning
        or piece.tool_call_deltas
        or piece.logprobs
        or piece.finish_reason
    )


def _additional(piece: ToolStreamChunk) -> dict[str, Any]:
    # ``thinking_delta`` is where LlamaIndex's agents read streamed thinking (AgentStream).
    additional: dict[str, Any] = dict(usage_kwargs(piece.usage))
    if piece.reasoning:
        additional["thinking_delta"] = piece.reasoning
    return additional


def _raw(piece: ToolStreamChunk, model: str) -> dict[str, Any]:
    raw = response_raw(piece.request_id, model, piece.finish_reason, piece.usage, piece.timings)
    return {**raw, **guard_report(piece.invalid_calls, piece.repeats_prevented)}


class ChatStream:
    """Answer pieces -> cumulative ``ChatResponse`` s (text so far, tool calls so far)."""

    def __init__(self, model: str) -> None:
        self._model = model
        self._text = ""
        self._reasoning = ""
        self._calls: dict[int, PartialToolCall] = {}

    def read(self, piece: ToolStreamChunk) -> ChatResponse | None:
        """The response after ``piece`` (``None`` when it adds nothing)."""
        self._text += piece.text
        self._reasoning += piece.reasoning
        for delta in piece.tool_call_deltas:
            call = self._calls.get(delta.index)
            if call is None:
                call = PartialToolCall(delta.id or new_tool_call_id(), delta.name or "")
                self._calls[delta.index] = call
            call.arguments += delta.arguments
        if piece.finish_reason is not None:
            # The last response holds the finished calls only: not a call max_tokens cut.
            self._calls = {i: PartialToolCall.of(c) for i, c in enumerate(piece.tool_calls)}
        if not _is_news(piece):
            return None
        message = assistant_message(
            self._text,
            list(self._calls.values()),
            reasoning=self._reasoning,
            reasoning_tokens=None if piece.usage is None else piece.usage.reasoning_tokens,
        )
        return ChatResponse(
            message=message,
            delta=piece.text,
            raw=_raw(piece, self._model),
            additional_kwargs=_additional(piece),
            logprobs=to_logprobs(piece.logprobs),
        )


class CompletionStream:
    """Answer pieces -> cumulative ``CompletionResponse`` s."""

    def __init__(self, model: str) -> None:
        self._model = model
        self._text = ""

    def read(self, piece: ToolStreamChunk) -> CompletionResponse | None:
        """The response after ``piece`` (``None`` when it adds nothing)."""
        self._text += piece.text
        if not _is_news(piece):
            return None
        return CompletionResponse(
            text=self._text,
            delta=piece.text,
            raw=_raw(piece, self._model),
            additional_kwargs=_additional(piece),
            logprobs=to_logprobs(piece.logprobs),
        )


class StructuredPrediction:
    """One structured prediction and LlamaIndex's events for it. Streamed, each update is the
    model when what came validates, else a ``FlexibleModel`` with the fields so far; only
    changes are reported, and the complete object last."""

    def __init__(self, output_cls: type[BaseModel], prompt: Any, prompt_args: Any) -> None:
        from llama_index.core.program.utils import create_flexible_model

        self._cls = output_cls
        self._flexible = create_flexible_model(output_cls)
        self._start = LLMStructuredPredictStartEvent(
            output_cls=output_cls, template=prompt, template_args=prompt_args
        )
        self._last: Any = None
        self._text = ""
        self.latest: BaseModel | None = None

    def start(self) -> None:
        dispatcher.event(self._start)

    def updates(self, response: ChatResponse) -> Iterator[BaseModel]:
        """The object after ``response``, if it changed (nothing otherwise)."""
        self._text = response.message.content or ""
        try:
            value = parse_partial_json(self._text)
        except ValueError:
            return
        if not isinstance(value, dict) or value == self._last:
            return
        self._last = value
        try:
            self.latest = self._cls.model_validate(value)
        except ValidationError:
            self.latest = self._flexible.model_validate(value)
        dispatcher.event(LLMStructuredPredictInProgressEvent(output=self.latest))
        yield self.latest

    def whole(self, response: ChatResponse) -> BaseModel:
        """The object of a whole answer."""
        self._output = self._cls.model_validate_json(response.message.content or "")
        self.end()
        return self._output

    def finished(self) -> Iterator[BaseModel]:
        """At the end of a stream: the complete object, if the last update did not already
        report it; then the end event, once it was taken."""
        self._output = self._cls.model_validate_json(self._text)
        if self.latest != self._output:
            yield self._output
        self.end()

    def end(self) -> None:
        dispatcher.event(LLMStructuredPredictEndEvent(output=self._output))
