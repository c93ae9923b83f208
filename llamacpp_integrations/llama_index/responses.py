"""Engine answers translated into LlamaIndex responses.

An answer becomes an assistant ``ChatMessage`` whose blocks are a reasoning model's thinking
(a ``ThinkingBlock`` with its token count), the reply text and one ``ToolCallBlock`` per call,
with the same calls in ``additional_kwargs["tool_calls"]`` in the OpenAI shape (``arguments``
as a JSON string) that llama-index-llms-openai users read. ``raw`` holds what the engine
reported (id, model, finish reason, usage with cached and reasoning tokens, timings),
``additional_kwargs`` the token counts, ``logprobs`` each token first and then its step's most
likely tokens.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict
from typing import Any

from llama_index.core.base.llms.types import (
    ChatMessage,
    ChatResponse,
    CompletionResponse,
    LogProb,
    MessageRole,
    TextBlock,
    ThinkingBlock,
    ToolCallBlock,
)
from llama_index.core.llms.llm import ToolSelection

from ..client import CallResult
from ..engine import Completion, Timings, TokenLogprob, Usage
from ..tools import (
    InvalidToolCall,
    ToolCall,
    openai_tool_call,
    parse_partial_json,
    read_tool_calls,
)

__all__ = [
    "PartialToolCall",
    "assistant_message",
    "chat_response",
    "completion_raw",
    "completion_response",
    "guard_report",
    "response_raw",
    "to_logprobs",
    "tool_selections",
    "usage_kwargs",
]


class PartialToolCall:
    """A tool call as far as it has streamed: id and name, and the argument text so far."""

    def __init__(self, call_id: str, name: str, arguments: str = "") -> None:
        self.id = call_id
        self.name = name
        self.arguments = arguments

    @classmethod
    def of(cls, call: ToolCall) -> PartialToolCall:
        return cls(call.id, call.name, call.arguments_json)

    def kwargs(self) -> dict[str, Any]:
        """The arguments parsed leniently: what has fully or partly arrived."""
        try:
            value = parse_partial_json(self.arguments)
        except ValueError:
            return {}
        return value if isinstance(value, dict) else {}


def assistant_message(
    content: str,
    tool_calls: Sequence[ToolCall | PartialToolCall] = (),
    *,
    reasoning: str = "",
    reasoning_tokens: int | None = None,
) -> ChatMessage:
    """The assistant message of an answer: a reasoning model's thinking (a ``ThinkingBlock``),
    its text, then one ``ToolCallBlock`` per call; the calls are also in
    ``additional_kwargs["tool_calls"]`` (OpenAI shape)."""
    partial = [c if isinstance(c, PartialToolCall) else PartialToolCall.of(c) for c in tool_calls]
    blocks: list[Any] = []
    if reasoning:
        blocks.append(ThinkingBlock(content=reasoning, num_tokens=reasoning_tokens))
    blocks.append(TextBlock(text=content))
    blocks += [
        ToolCallBlock(tool_call_id=call.id, tool_name=call.name, tool_kwargs=call.kwargs())
        for call in partial
    ]
    additional: dict[str, Any] = {}
    if partial:
        additional["tool_calls"] = [
            openai_tool_call(call.id, call.name, call.arguments) for call in partial
        ]
    return ChatMessage(role=MessageRole.ASSISTANT, blocks=blocks, additional_kwargs=additional)


def to_logprobs(entries: Sequence[TokenLogprob] | None) -> list[list[LogProb]] | None:
    """``ChatResponse.logprobs``: for each generated token, the token itself first, then the
    most likely tokens at its step (as many as were asked for); ``None`` when none were."""
    if not entries:
        return None
    return [
        [
            LogProb(token=entry.token, logprob=entry.logprob, bytes=list(entry.bytes)),
            *(LogProb(token=t.token, logprob=t.logprob, bytes=list(t.bytes)) for t in entry.top),
        ]
        for entry in entries
    ]


def usage_kwargs(usage: Usage | None) -> dict[str, int]:
    """Token counts in the ``ChatResponse.additional_kwargs`` shape of llama-index-llms-openai."""
    if usage is None:
        return {}
    return {
        "prompt_tokens": usage.prompt_tokens,
        "completion_tokens": usage.completion_tokens,
        "total_tokens": usage.total_tokens,
    }


def response_raw(
    request_id: str,
    model: str,
    finish_reason: str | None,
    usage: Usage | None,
    timings: Timings | None,
) -> dict[str, Any]:
    """``ChatResponse.raw`` / ``CompletionResponse.raw``: what the engine reported."""
    return {
        "id": request_id,
        "model": model,
        "finish_reason": finish_reason,
        "usage": None
        if usage is None
        else {
            **usage_kwargs(usage),
            "cached_prompt_tokens": usage.cached_prompt_tokens,
            "reasoning_tokens": usage.reasoning_tokens,
        },
        "timings": None if timings is None else asdict(timings),
    }


def completion_raw(completion: Completion, model: str, finish_reason: str | None = None) -> Any:
    """:func:`response_raw` of a finished completion."""
    return response_raw(
        completion.request_id,
        model,
        finish_reason or completion.finish_reason,
        completion.usage,
        completion.timings,
    )


def _selection(call_id: str | None, name: str, arguments: Any, index: int) -> ToolSelection:
    if isinstance(arguments, str):
        try:
            arguments = parse_partial_json(arguments) if arguments.strip() else {}
        except ValueError:
            arguments = {}
    return ToolSelection(
        tool_id=call_id or f"call_{index}",
        tool_name=name,
        tool_kwargs=arguments if isinstance(arguments, dict) else {},
    )


def tool_selections(message: ChatMessage) -> list[ToolSelection]:
    """The calls of an assistant message: its ``ToolCallBlock`` s (argument strings, which
    streamed ones may have cut short, parsed leniently), else the OpenAI-style
    ``additional_kwargs["tool_calls"]`` read by ``tools.read_tool_calls``.

    Raises:
        InvalidRequestError: a call in ``additional_kwargs["tool_calls"]`` is malformed.
    """
    blocks = [block for block in message.blocks if isinstance(block, ToolCallBlock)]
    if blocks:
        return [
            _selection(block.tool_call_id, block.tool_name, block.tool_kwargs, i)
            for i, block in enumerate(blocks)
        ]
    given = message.additional_kwargs.get("tool_calls") or []
    calls = read_tool_calls(given, where="additional_kwargs['tool_calls']")
    return [_selection(call.id, call.name, call.arguments, i) for i, call in enumerate(calls)]


def guard_report(invalid: Sequence[InvalidToolCall], repeats_prevented: int) -> dict[str, Any]:
    """What an answer's calls did not become: calls ``max_tokens`` cut short (OpenAI-shaped,
    their arguments as far as they came) and repeats the loop guard kept out. LlamaIndex has
    no place for invalid calls: ``get_tool_calls_from_response`` sees only whole calls, so an
    agent takes an answer whose only call was cut as a reply (``raw["finish_reason"]`` is
    ``"length"``)."""
    report: dict[str, Any] = {}
    if invalid:
        report["invalid_tool_calls"] = [
            {**openai_tool_call(c.id, c.name or "", c.arguments), "error": c.error} for c in invalid
        ]
    if repeats_prevented:
        report["repeated_calls_prevented"] = repeats_prevented
    return report


def chat_response(result: CallResult, model: str) -> ChatResponse:
    """A whole answer as a ``ChatResponse`` (text and tool calls in its message)."""
    completion = result.completion
    raw = completion_raw(completion, model, result.finish_reason)
    message = assistant_message(
        result.content,
        result.tool_calls,
        reasoning=result.reasoning,
        reasoning_tokens=result.reasoning_tokens,
    )
    return ChatResponse(
        message=message,
        raw={**raw, **guard_report(result.invalid_calls, result.repeats_prevented)},
        additional_kwargs=usage_kwargs(completion.usage),
        logprobs=to_logprobs(completion.logprobs),
    )


def completion_response(result: CallResult, model: str) -> CompletionResponse:
    """A whole answer as a ``CompletionResponse`` (a reasoning model's thinking in
    ``additional_kwargs["thinking"]``)."""
    completion = result.completion
    additional: dict[str, Any] = dict(usage_kwargs(completion.usage))
    if result.reasoning:
        additional["thinking"] = result.reasoning
    return CompletionResponse(
        text=result.content,
        raw=completion_raw(completion, model, result.finish_reason),
        additional_kwargs=additional,
        logprobs=to_logprobs(completion.logprobs),
    )
