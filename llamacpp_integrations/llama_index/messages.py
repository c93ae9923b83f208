"""LlamaIndex chat messages and tools, translated into the engine's framework-neutral ones.

* roles: ``system`` / ``developer`` -> ``system``; ``user`` -> ``user``; ``assistant`` /
  ``chatbot`` / ``model`` -> ``assistant``; ``tool`` / ``function`` -> ``tool``;
* blocks: ``TextBlock`` -> text (several are joined with a newline, as ``ChatMessage.content``
  joins them); ``ToolCallBlock`` on an assistant message -> an OpenAI-style tool call;
  ``ThinkingBlock`` on an assistant message -> its reasoning (the engine gives it to templates
  that render earlier reasoning, and leaves it out elsewhere); ``CachePoint`` (a provider's
  cache hint: the engine reuses cached prompt prefixes by itself) is left out; ``ImageBlock``
  (its data, path or URL) is read with the LLM's image reader, which holds it to the
  ``ImagePolicy`` and decodes it, and the message then
  carries text and image parts in their order (``ImageInputNotSupportedError`` when the model
  has no projector, before anything is read); ``AudioBlock`` (its data, path or URL) is read
  the same way by the reader's ``audio`` (``multimodal.read_audio``: the same policy, and
  ``AudioInputNotSupportedError`` without an audio projector); any other block raises
  ``UnsupportedContentError`` naming it;
* tool calls of an assistant message come from its ``ToolCallBlock`` s or, when it has none,
  from ``additional_kwargs["tool_calls"]`` (OpenAI dicts or objects), read by
  ``tools.read_tool_calls`` (a malformed call raises ``InvalidRequestError``); a tool result is
  a ``tool`` message whose ``additional_kwargs["tool_call_id"]`` names the call it answers.

The way back (engine answers to LlamaIndex responses) is ``responses.py``.
"""

from __future__ import annotations

import base64
import binascii
from collections.abc import Callable, Mapping, Sequence
from io import IOBase
from pathlib import Path
from typing import Any, cast

from llama_index.core.base.llms.types import (
    AudioBlock,
    CachePoint,
    ImageBlock,
    MessageRole,
    TextBlock,
    ThinkingBlock,
    ToolCallBlock,
)
from llama_index.core.base.llms.types import ChatMessage as LIChatMessage
from llama_index.core.tools.types import BaseTool

from ..engine import ChatMessage, ImageInput
from ..errors import (
    AudioInputNotSupportedError,
    ImageInputNotSupportedError,
    InvalidRequestError,
    UnsupportedContentError,
)
from ..multimodal import AudioSource, ImageSource, read_audio
from ..tools import read_tool_calls

__all__ = [
    "ImageReader",
    "has_image_blocks",
    "to_engine_message",
    "to_engine_messages",
    "tools_to_openai",
]

_ROLES: dict[MessageRole, str] = {
    MessageRole.SYSTEM: "system",
    MessageRole.DEVELOPER: "system",
    MessageRole.USER: "user",
    MessageRole.ASSISTANT: "assistant",
    MessageRole.CHATBOT: "assistant",
    MessageRole.MODEL: "assistant",
    MessageRole.TOOL: "tool",
    MessageRole.FUNCTION: "tool",
}

_IMAGE_MESSAGE = (
    "image input needs a model with an image projector: pass mmproj= (the model's mmproj GGUF)"
)

ImageReader = Callable[[ImageSource], ImageInput]
"""Turns an image source (bytes, data URI, URL or path) into checked, decoded pixels."""


# -- LlamaIndex -> engine ------------------------------------------------------------------------


def has_image_blocks(messages: Sequence[LIChatMessage]) -> bool:
    """Whether any message carries an ``ImageBlock`` (reading it may mean a fetch)."""
    return any(isinstance(block, ImageBlock) for message in messages for block in message.blocks)


def _image_source(block: ImageBlock | AudioBlock, where: str) -> ImageSource:
    """What an ``ImageBlock`` (or ``AudioBlock``) holds: its bytes (LlamaIndex keeps them
    base64), path or URL.

    ``ImageBlock.resolve_image`` (``AudioBlock.resolve_audio``) is not used: it would fetch any
    URL, unchecked.
    """
    name = type(block).__name__
    data = block.image if isinstance(block, ImageBlock) else block.audio
    if data is not None:
        if isinstance(data, IOBase):
            data.seek(0)
            data = data.read()
        if not isinstance(data, bytes):
            raise UnsupportedContentError(f"{where}: {name} data must be bytes")
        try:
            return base64.b64decode(data, validate=True)
        except (binascii.Error, ValueError):
            return data  # raw bytes put in after validation
    if block.path is not None:
        return Path(block.path)
    if block.url is not None:
        return str(block.url)
    raise UnsupportedContentError(f"{where}: the {name} has no data, path or url")


def _block_part(
    block: object, index: int, role: str, read_image: ImageReader | None
) -> dict[str, Any] | None:
    """The content part a block contributes; ``None`` for blocks that contribute nothing."""
    if isinstance(block, TextBlock):
        return {"type": "text", "text": block.text}
    if isinstance(block, ThinkingBlock | CachePoint):
        return None
    where = f"{role} message block {index}"
    if isinstance(block, ImageBlock):
        if read_image is None:
            raise ImageInputNotSupportedError(f"{where}: {_IMAGE_MESSAGE}")
        return {"type": "image", "image": read_image(_image_source(block, where))}
    if isinstance(block, AudioBlock):
        try:
            clip = read_audio(read_image, cast(AudioSource, _image_source(block, where)))
        except AudioInputNotSupportedError as error:
            raise AudioInputNotSupportedError(f"{where} (AudioBlock): {error}") from None
        return {"type": "audio", "audio": clip}
    kind = getattr(block, "block_type", None)
    raise UnsupportedContentError(
        f"{where} is a {type(block).__name__}"
        + (f" (block_type {kind!r})" if kind else "")
        + ", which this model cannot take: only text, image and audio content (and tool calls on "
        "assistant messages) is passed on"
    )


def _joined(parts: list[dict[str, Any]]) -> str | list[dict[str, Any]]:
    """One string when the message is all text (joined by newlines, as LlamaIndex joins
    ``ChatMessage.content``), else the parts, adjacent text parts joined the same way."""
    if all(part["type"] == "text" for part in parts):
        return "\n".join(part["text"] for part in parts)
    merged: list[dict[str, Any]] = []
    for part in parts:
        if part["type"] == "text" and merged and merged[-1]["type"] == "text":
            merged[-1] = {"type": "text", "text": merged[-1]["text"] + "\n" + part["text"]}
        else:
            merged.append(part)
    return merged


def _history_calls(
    blocks: Sequence[ToolCallBlock], kwargs: Mapping[str, Any]
) -> list[dict[str, Any]]:
    """An assistant message's calls as templates read them: its ``ToolCallBlock`` s, else its
    ``additional_kwargs["tool_calls"]``, both read by ``read_tool_calls``."""
    if blocks:
        given: list[dict[str, Any]] = [
            {
                "id": block.tool_call_id,
                "function": {"name": block.tool_name, "arguments": block.tool_kwargs},
            }
            for block in blocks
        ]
        calls = read_tool_calls(given, where="ToolCallBlocks")
    elif kwargs.get("tool_calls"):
        calls = read_tool_calls(kwargs["tool_calls"], where="additional_kwargs['tool_calls']")
    else:
        return []
    return [call.to_template() for call in calls]


def to_engine_message(message: LIChatMessage, read_image: ImageReader | None = None) -> ChatMessage:
    """One LlamaIndex message as an engine message (see the module docstring for the rules).

    Raises:
        ImageInputNotSupportedError: the message holds an image and ``read_image`` is ``None``.
        ImageLoadError: ``read_image`` refused or could not decode an image.
        UnsupportedContentError: the message holds audio, video, a document or another block
            a text model cannot take.
    """
    role = _ROLES.get(MessageRole(message.role))
    if role is None:  # pragma: no cover - MessageRole is a closed enum
        raise InvalidRequestError(f"message role {message.role!r} is not supported")
    parts: list[dict[str, Any]] = []
    call_blocks: list[ToolCallBlock] = []
    thoughts = [b.content for b in message.blocks if isinstance(b, ThinkingBlock) and b.content]
    for index, block in enumerate(message.blocks):
        if isinstance(block, ToolCallBlock):
            if role != "assistant":
                raise UnsupportedContentError(
                    f"{role} message block {index} is a ToolCallBlock: only assistant messages "
                    "carry tool calls"
                )
            call_blocks.append(block)
            continue
        part = _block_part(block, index, role, read_image)
        if part is not None:
            parts.append(part)
    content = _joined(parts)
    kwargs = message.additional_kwargs
    if role == "assistant":
        calls = _history_calls(call_blocks, kwargs)
        reasoning = "".join(thoughts) or None
        return ChatMessage(
            role=role, content=content, tool_calls=calls or None, reasoning=reasoning
        )
    if role == "tool":
        call_id = kwargs.get("tool_call_id")
        name = kwargs.get("name") or kwargs.get("tool_name")
        return ChatMessage(
            role=role,
            content=content,
            tool_call_id=None if call_id is None else str(call_id),
            name=None if name is None else str(name),
        )
    return ChatMessage(role=role, content=content)


def to_engine_messages(
    messages: Sequence[LIChatMessage], read_image: ImageReader | None = None
) -> list[ChatMessage]:
    """Every message translated with :func:`to_engine_message`."""
    return [to_engine_message(message, read_image) for message in messages]


def tools_to_openai(tools: Sequence[BaseTool]) -> list[dict[str, Any]]:
    """LlamaIndex tools as OpenAI ``{"type": "function", ...}`` specs (no description length
    limit: that is an OpenAI API rule, not a local model's)."""
    return [tool.metadata.to_openai_tool(skip_length_check=True) for tool in tools]
