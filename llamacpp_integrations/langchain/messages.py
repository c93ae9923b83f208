"""LangChain messages to engine chat messages, and engine answers back to LangChain messages.

Content blocks are read in every form LangChain 1.x produces: plain strings, v0 OpenAI-style
parts (``{"type": "text"}``, ``{"type": "image_url"}``), v0 standard data blocks
(``{"type": "image", "source_type": "base64", ...}``) and v1 standard blocks
(``{"type": "image", "base64": ...}``, ``{"type": "tool_call", ...}``). Text is flattened into
one string, because most GGUF chat templates print ``message.content`` as it is; a message with
images becomes text and image parts in their order. Images are read by the ``ImageReader`` the
chat model gives (its ``ImagePolicy`` applied); without one, an image is refused before anything
is fetched. Audio blocks (v1 ``{"type": "audio", "base64": ...}`` or ``"url"``, v0
``source_type`` forms, OpenAI's ``input_audio``) are read by the same reader's ``audio``
(``multimodal.read_audio``): the same policy, a model with an audio projector.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import asdict
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
from langchain_core.messages import InvalidToolCall as LCInvalidToolCall
from langchain_core.messages.ai import InputTokenDetails, OutputTokenDetails, UsageMetadata
from langchain_core.messages.tool import ToolCall as LCToolCall
from langchain_core.messages.tool import ToolCallChunk

from ..client import openai_logprobs
from ..client.content import template_content
from ..engine import ImageInput, Timings, TokenLogprob, Usage
from ..errors import ImageInputNotSupportedError, InvalidRequestError, UnsupportedContentError
from ..multimodal import input_audio_source, read_audio
from ..tools import InvalidToolCall, ToolCall, ToolCallDelta

__all__ = [
    "PROVIDER",
    "ImageReader",
    "has_image_blocks",
    "invalid_tool_calls",
    "openai_tool_calls",
    "response_metadata",
    "to_engine_messages",
    "tool_call_chunks",
    "tool_calls_to_langchain",
    "usage_metadata",
]

PROVIDER = "llamacpp"

_IMAGE_TYPES = {"image", "image_url", "input_image"}
_AUDIO_TYPES = {"audio", "input_audio"}
_SKIPPED_ANY_TYPES = {"non_standard"}

ImageReader = Callable[[str], ImageInput]
"""Turns an image source (data URI, bare base64, URL or path) into checked, decoded pixels."""

_ROLES: dict[type[BaseMessage], str] = {
    SystemMessage: "system",
    HumanMessage: "user",
    AIMessage: "assistant",
    ToolMessage: "tool",
    FunctionMessage: "tool",
}


def has_image_blocks(messages: Sequence[BaseMessage]) -> bool:
    """Whether any message carries an image block (reading them may mean a fetch)."""
    return any(
        isinstance(part, dict) and part.get("type") in _IMAGE_TYPES
        for message in messages
        if not isinstance(message.content, str)
        for part in message.content
    )


def _image_source(part: dict[str, Any]) -> str:
    """The data URI, base64 or URL an image block points at, in any of LangChain's forms."""
    kind = part.get("type")
    if kind in ("image_url", "input_image"):
        url = part.get("image_url")
        url = url.get("url") if isinstance(url, dict) else url
        if isinstance(url, str) and url:
            return url
    elif kind == "image":
        source = _standard_block_source(part, "image", "the image")
        if source is not None:
            return source
    raise UnsupportedContentError(f"this {kind!r} block names no image data or URL")


def _audio_source(part: dict[str, Any]) -> str:
    """The data URI, base64, URL or path an audio block points at, in any of LangChain's forms."""
    if part.get("type") == "input_audio":
        return input_audio_source(part.get("input_audio"), "the input_audio block")
    source = _standard_block_source(part, "audio", "the clip")
    if source is None:
        raise UnsupportedContentError("this audio block names no data or URL")
    return source


def _standard_block_source(part: dict[str, Any], kind: str, what: str) -> str | None:
    """A standard media block's base64 data (a data URI when it names its MIME type) or URL,
    in the v1 form or v0's ``source_type`` form; ``None`` when it names neither."""
    mime = part.get("mime_type")
    data = part.get("base64")  # v1
    if data is None and part.get("source_type") == "base64":  # v0 standard
        data = part.get("data")
    if isinstance(data, str) and data:
        return f"data:{mime};base64,{data}" if isinstance(mime, str) and mime else data
    url = part.get("url")
    if url is None and part.get("source_type") == "url":
        url = part.get("data")
    if isinstance(url, str) and url:
        return url
    if part.get("file_id") or part.get("source_type") == "id":
        raise UnsupportedContentError(
            f"{kind} blocks that name a provider's file id cannot be read here: pass {what} as "
            "base64 data or a URL"
        )
    return None


def _content(
    content: str | list[str | dict[str, Any]], role: str, read_image: ImageReader | None
) -> str | list[dict[str, Any]]:
    """The message text, or text and image parts in order when it has images."""
    if isinstance(content, str):
        return content
    parts: list[dict[str, Any]] = []
    for part in content:
        if isinstance(part, str):
            parts.append({"type": "text", "text": part})
            continue
        kind = part.get("type")
        if kind == "text":
            parts.append({"type": "text", "text": str(part.get("text", ""))})
        elif kind in _IMAGE_TYPES and role != "assistant":
            if read_image is None:
                raise ImageInputNotSupportedError(
                    "this model has no image projector (mmproj), so it cannot take image inputs"
                )
            parts.append({"type": "image", "image": read_image(_image_source(part))})
        elif kind in _AUDIO_TYPES and role != "assistant":
            parts.append({"type": "audio", "audio": read_audio(read_image, _audio_source(part))})
        elif kind in _SKIPPED_ANY_TYPES or role == "assistant":
            # An earlier answer may carry other providers' blocks (tool_use, thinking...):
            # its calls are read from AIMessage.tool_calls, the rest is not prompt text.
            continue
        else:
            raise UnsupportedContentError(
                f"content blocks of type {kind!r} are not supported (text, images and audio are)"
            )
    return template_content(parts)


def _role(message: BaseMessage) -> str:
    if isinstance(message, ChatMessage):
        return {"human": "user", "ai": "assistant"}.get(message.role, message.role)
    for cls, role in _ROLES.items():
        if isinstance(message, cls):
            return role
    raise InvalidRequestError(f"messages of type {type(message).__name__} are not supported")


def to_engine_messages(
    messages: Sequence[BaseMessage], read_image: ImageReader | None = None
) -> list[dict[str, Any]]:
    """Messages in the template shape the engine renders (OpenAI style tool calls).

    Image blocks are read with ``read_image``; without it they raise
    ``ImageInputNotSupportedError``.
    """
    out: list[dict[str, Any]] = []
    for message in messages:
        role = _role(message)
        item: dict[str, Any] = {
            "role": role,
            "content": _content(message.content, role, read_image),
        }
        if message.name and role in ("user", "assistant", "system"):
            item["name"] = message.name
        if isinstance(message, AIMessage) and (reasoning := _reasoning_of(message)):
            # ``reasoning_content`` is the engine's field for it: the engine gives it to
            # templates that render earlier reasoning, under the name they read.
            item["reasoning_content"] = reasoning
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
                item["content"] = _prefixed("Error: ", item["content"])
        elif isinstance(message, FunctionMessage):
            item["name"] = message.name
        out.append(item)
    return out


def _reasoning_of(message: AIMessage) -> str:
    """An earlier answer's reasoning: ``additional_kwargs["reasoning_content"]`` (how this
    and other local integrations return it), or reasoning / thinking blocks in its content."""
    given = message.additional_kwargs.get("reasoning_content")
    if isinstance(given, str):
        return given
    if isinstance(message.content, str):
        return ""
    texts = []
    for block in message.content:
        if isinstance(block, dict) and block.get("type") in ("reasoning", "thinking"):
            text = block.get("reasoning", block.get("thinking"))
            if isinstance(text, str):
                texts.append(text)
    return "".join(texts)


def _prefixed(prefix: str, content: str | list[dict[str, Any]]) -> str | list[dict[str, Any]]:
    if isinstance(content, str):
        return prefix + content
    return [{"type": "text", "text": prefix}, *content]


def tool_calls_to_langchain(calls: Sequence[ToolCall]) -> list[LCToolCall]:
    return [
        LCToolCall(name=call.name, args=call.arguments, id=call.id, type="tool_call")
        for call in calls
    ]


def invalid_tool_calls(calls: Sequence[InvalidToolCall]) -> list[LCInvalidToolCall]:
    """Calls cut short (or unreadable) as ``AIMessage.invalid_tool_calls``."""
    return [
        LCInvalidToolCall(
            name=call.name,
            args=call.arguments,
            id=call.id,
            error=call.error,
            type="invalid_tool_call",
        )
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
    """Token counts, with a reasoning model's thinking tokens among the output's details."""
    metadata = UsageMetadata(
        input_tokens=usage.prompt_tokens,
        output_tokens=usage.completion_tokens,
        total_tokens=usage.total_tokens,
        input_token_details=InputTokenDetails(cache_read=usage.cached_prompt_tokens),
    )
    if usage.reasoning_tokens:
        metadata["output_token_details"] = OutputTokenDetails(reasoning=usage.reasoning_tokens)
    return metadata


def openai_tool_calls(calls: Sequence[ToolCall]) -> list[dict[str, Any]]:
    """The calls as OpenAI puts them in ``additional_kwargs`` (arguments as JSON text)."""
    return [call.to_openai() for call in calls]


def response_metadata(
    name: str,
    finish_reason: str | None,
    timings: Timings | None,
    logprobs: Sequence[TokenLogprob] | None,
) -> dict[str, Any]:
    """``AIMessage.response_metadata``: model, provider, finish reason, timings, logprobs."""
    metadata: dict[str, Any] = {
        "model_name": name,
        "model_provider": PROVIDER,
        "finish_reason": finish_reason,
    }
    if timings is not None:
        metadata["timings"] = asdict(timings)
    if logprobs is not None:
        metadata["logprobs"] = {"content": openai_logprobs(logprobs)}
    return metadata
