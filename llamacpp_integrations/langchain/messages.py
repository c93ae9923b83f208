"""LangChain messages to engine chat messages, and engine answers back to LangChain messages.

Content blocks are read in every form LangChain 1.x produces: plain strings, v0 OpenAI-style
parts (``{"type": "text"}``, ``{"type": "image_url"}``), v0 standard data blocks
(``{"type": "image", "source_type": "base64", ...}``) and v1 standard blocks
(``{"type": "image", "base64": ...}``, ``{"type": "tool_call", ...}``). Text is flattened into
one string, because most GGUF chat templates print ``message.content`` as it is.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from langchain_core.messages import (
    AIMessage,
    BaseMessage,
    ChatMessage,
    FunctionMessage,
    HumanMessage,
    SystemMessage,
    ToolMessage,
)
from langchain_core.messages.ai import InputTokenDetails, UsageMetadata
from langchain_core.messages.tool import ToolCall as LCToolCall
from langchain_core.messages.tool import ToolCallChunk

from ..engine import Usage
from ..errors import ImageInputNotSupportedError, InvalidRequestError, UnsupportedContentError
from ..tools import ToolCall, ToolCallDelta

__all__ = [
    "openai_tool_calls",
    "to_engine_messages",
    "tool_call_chunks",
    "tool_calls_to_langchain",
    "usage_metadata",
]

_IMAGE_TYPES = {"image", "image_url", "input_image"}
_SKIPPED_ANY_TYPES = {"non_standard"}

_ROLES: dict[type[BaseMessage], str] = {
    SystemMessage: "system",
    HumanMessage: "user",
    AIMessage: "assistant",
    ToolMessage: "tool",
    FunctionMessage: "tool",
}


def _text(content: str | list[str | dict[str, Any]], role: str) -> str:
    if isinstance(content, str):
        return content
    parts: list[str] = []
    for part in content:
        if isinstance(part, str):
            parts.append(part)
            continue
        kind = part.get("type")
        if kind == "text":
            parts.append(str(part.get("text", "")))
        elif kind in _IMAGE_TYPES:
            raise ImageInputNotSupportedError(
                "this model has no image projector (mmproj), so it cannot take image inputs"
            )
        elif kind in _SKIPPED_ANY_TYPES or role == "assistant":
            # An earlier answer may carry other providers' blocks (tool_use, thinking...):
            # its calls are read from AIMessage.tool_calls, the rest is not prompt text.
            continue
        else:
            raise UnsupportedContentError(
                f"content blocks of type {kind!r} are not supported (text and images are)"
            )
    return "".join(parts)


def _role(message: BaseMessage) -> str:
    if isinstance(message, ChatMessage):
        return {"human": "user", "ai": "assistant"}.get(message.role, message.role)
    for cls, role in _ROLES.items():
        if isinstance(message, cls):
            return role
    raise InvalidRequestError(f"messages of type {type(message).__name__} are not supported")


def to_engine_messages(messages: Sequence[BaseMessage]) -> list[dict[str, Any]]:
    """Messages in the template shape the engine renders (OpenAI style tool calls)."""
    out: list[dict[str, Any]] = []
    for message in messages:
        role = _role(message)
        item: dict[str, Any] = {"role": role, "content": _text(message.content, role)}
        if message.name and role in ("user", "assistant", "system"):
            item["name"] = message.name
        if isinstance(message, AIMessage) and message.tool_calls:
            item["tool_calls"] = [
                {
                    "id": call.get("id") or f"call_{i}",
                    "type": "function",
                    "function": {"name": call["name"], "arguments": dict(call["args"])},
                }
                for i, call in enumerate(message.tool_calls)
            ]
        if isinstance(message, ToolMessage):
            item["tool_call_id"] = message.tool_call_id
            if message.name:
                item["name"] = message.name
            if message.status == "error":
                item["content"] = f"Error: {item['content']}"
        elif isinstance(message, FunctionMessage):
            item["name"] = message.name
        out.append(item)
    return out


def tool_calls_to_langchain(calls: Sequence[ToolCall]) -> list[LCToolCall]:
    return [
        LCToolCall(name=call.name, args=call.arguments, id=call.id, type="tool_call")
        for call in calls
    ]


def tool_call_chunks(deltas: Sequence[ToolCallDelta]) -> list[ToolCallChunk]:
    return [
        ToolCallChunk(
            name=delta.name,
            args=delta.arguments,
            id=delta.id,
            index=delta.index,
            type="tool_call_chunk",
        )
        for delta in deltas
    ]


def usage_metadata(usage: Usage) -> UsageMetadata:
    return UsageMetadata(
        input_tokens=usage.prompt_tokens,
        output_tokens=usage.completion_tokens,
        total_tokens=usage.total_tokens,
        input_token_details=InputTokenDetails(cache_read=usage.cached_prompt_tokens),
    )


def openai_tool_calls(calls: Sequence[ToolCall]) -> list[dict[str, Any]]:
    """The calls as OpenAI puts them in ``additional_kwargs`` (arguments as JSON text)."""
    return [
        {
            "id": call.id,
            "type": "function",
            "function": {"name": call.name, "arguments": call.arguments_json},
        }
        for call in calls
    ]
