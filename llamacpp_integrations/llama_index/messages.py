"""Translation between LlamaIndex chat objects and the engine's framework-neutral ones.

LlamaIndex -> engine:

* roles: ``system`` / ``developer`` -> ``system``; ``user`` -> ``user``; ``assistant`` /
  ``chatbot`` / ``model`` -> ``assistant``; ``tool`` / ``function`` -> ``tool``;
* blocks: ``TextBlock`` -> text (several are joined with a newline, as ``ChatMessage.content``
  joins them); ``ToolCallBlock`` on an assistant message -> an OpenAI-style tool call;
  ``ThinkingBlock`` (an earlier answer's reasoning, which chat templates leave out of the
  history anyway) and ``CachePoint`` (a provider's cache hint: the engine reuses cached prompt
  prefixes by itself) are left out; ``ImageBlock`` (its data, path or URL) is read with the
  LLM's image reader, which holds it to the ``ImagePolicy`` and decodes it, and the message then
  carries text and image parts in their order (``ImageInputNotSupportedError`` when the model
  has no projector, before anything is read); any other block raises
  ``UnsupportedContentError`` naming it;
* tool calls of an assistant message come from its ``ToolCallBlock`` s or, when it has none,
  from ``additional_kwargs["tool_calls"]`` (OpenAI dicts or objects); a tool result is a
  ``tool`` message whose ``additional_kwargs["tool_call_id"]`` names the call it answers.

Engine -> LlamaIndex: an assistant ``ChatMessage`` whose blocks are the reply text and one
``ToolCallBlock`` per call, with the same calls in ``additional_kwargs["tool_calls"]`` in the
OpenAI shape (``arguments`` as a JSON string) that llama-index-llms-openai users read.
"""

from __future__ import annotations

import base64
import binascii
import json
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict
from io import IOBase
from pathlib import Path
from typing import Any

from llama_index.core.base.llms.types import (
    CachePoint,
    ImageBlock,
    LogProb,
    MessageRole,
    TextBlock,
    ThinkingBlock,
    ToolCallBlock,
)
from llama_index.core.base.llms.types import ChatMessage as LIChatMessage
from llama_index.core.llms.llm import ToolSelection
from llama_index.core.tools.types import BaseTool

from ..engine import ChatMessage, Completion, ImageInput, Timings, TokenLogprob, Usage
from ..errors import ImageInputNotSupportedError, InvalidRequestError, UnsupportedContentError
from ..multimodal import ImageSource
from ..tools import ToolCall

__all__ = [
    "ImageReader",
    "PartialToolCall",
    "assistant_message",
    "has_image_blocks",
    "openai_tool_call",
    "parse_partial_json",
    "response_raw",
    "to_engine_message",
    "to_engine_messages",
    "to_logprobs",
    "tool_selections",
    "tools_to_openai",
    "usage_kwargs",
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


def _image_source(block: ImageBlock, where: str) -> ImageSource:
    """What an ``ImageBlock`` holds: its bytes (LlamaIndex keeps them base64), path or URL.

    ``ImageBlock.resolve_image`` is not used: it would fetch any URL, unchecked.
    """
    if block.image is not None:
        data = block.image
        if isinstance(data, IOBase):
            data.seek(0)
            data = data.read()
        if not isinstance(data, bytes):
            raise UnsupportedContentError(f"{where}: ImageBlock.image must hold bytes")
        try:
            return base64.b64decode(data, validate=True)
        except (binascii.Error, ValueError):
            return data  # raw bytes put in after validation
    if block.path is not None:
        return Path(block.path)
    if block.url is not None:
        return str(block.url)
    raise UnsupportedContentError(f"{where}: the ImageBlock has no image, path or url")


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
    kind = getattr(block, "block_type", None)
    raise UnsupportedContentError(
        f"{where} is a {type(block).__name__}"
        + (f" (block_type {kind!r})" if kind else "")
        + ", which this model cannot take: only text and image content (and tool calls on "
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


def _arguments_object(value: Any) -> Any:
    """Call arguments as an object when they are (or hold) JSON, else as given."""
    if isinstance(value, str):
        try:
            return json.loads(value) if value.strip() else {}
        except json.JSONDecodeError:
            return value
    return value


def _as_mapping(call: object) -> Mapping[str, Any]:
    if isinstance(call, Mapping):
        return call
    dump = getattr(call, "model_dump", None)  # OpenAI SDK objects and other pydantic models
    if callable(dump):
        dumped = dump()
        if isinstance(dumped, Mapping):
            return dumped
    raise InvalidRequestError(
        f"additional_kwargs['tool_calls'] holds a {type(call).__name__}, not a tool call"
    )


def _calls_from_kwargs(calls: object) -> list[dict[str, Any]]:
    if not isinstance(calls, Sequence) or isinstance(calls, str | bytes):
        raise InvalidRequestError("additional_kwargs['tool_calls'] must be a list of tool calls")
    out: list[dict[str, Any]] = []
    for i, raw in enumerate(calls):
        call = _as_mapping(raw)
        function = call.get("function", call)
        name = function.get("name") if isinstance(function, Mapping) else None
        if not isinstance(name, str) or not name:
            raise InvalidRequestError(f"additional_kwargs['tool_calls'][{i}] has no name")
        arguments = function.get("arguments", function.get("args", {}))
        entry: dict[str, Any] = {
            "type": "function",
            "function": {"name": name, "arguments": _arguments_object(arguments)},
        }
        if call.get("id"):
            entry["id"] = str(call["id"])
        out.append(entry)
    return out


def _calls_from_blocks(blocks: Sequence[ToolCallBlock]) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for block in blocks:
        entry: dict[str, Any] = {
            "type": "function",
            "function": {
                "name": block.tool_name,
                "arguments": _arguments_object(block.tool_kwargs),
            },
        }
        if block.tool_call_id:
            entry["id"] = block.tool_call_id
        out.append(entry)
    return out


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
        calls = _calls_from_blocks(call_blocks)
        if not calls and kwargs.get("tool_calls"):
            calls = _calls_from_kwargs(kwargs["tool_calls"])
        return ChatMessage(role=role, content=content, tool_calls=calls or None)
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


# -- engine -> LlamaIndex ------------------------------------------------------------------------


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


def openai_tool_call(call_id: str, name: str, arguments_json: str) -> dict[str, Any]:
    """A call in the OpenAI chat-completions shape (``arguments`` is a JSON string)."""
    return {
        "id": call_id,
        "type": "function",
        "function": {"name": name, "arguments": arguments_json},
    }


def assistant_message(
    content: str, tool_calls: Sequence[ToolCall | PartialToolCall] = ()
) -> LIChatMessage:
    """The assistant message of an answer: its text, then one ``ToolCallBlock`` per call; the
    calls are also in ``additional_kwargs["tool_calls"]`` (OpenAI shape)."""
    partial = [c if isinstance(c, PartialToolCall) else PartialToolCall.of(c) for c in tool_calls]
    blocks: list[Any] = [TextBlock(text=content)]
    blocks += [
        ToolCallBlock(tool_call_id=call.id, tool_name=call.name, tool_kwargs=call.kwargs())
        for call in partial
    ]
    additional: dict[str, Any] = {}
    if partial:
        additional["tool_calls"] = [
            openai_tool_call(call.id, call.name, call.arguments) for call in partial
        ]
    return LIChatMessage(role=MessageRole.ASSISTANT, blocks=blocks, additional_kwargs=additional)


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


def tool_selections(message: LIChatMessage) -> list[ToolSelection]:
    """The calls of an assistant message: its ``ToolCallBlock`` s, else the OpenAI-style
    ``additional_kwargs["tool_calls"]``; argument strings (streamed ones may be cut short) are
    parsed leniently."""
    blocks = [block for block in message.blocks if isinstance(block, ToolCallBlock)]
    if blocks:
        return [
            _selection(block.tool_call_id, block.tool_name, block.tool_kwargs, i)
            for i, block in enumerate(blocks)
        ]
    calls = message.additional_kwargs.get("tool_calls") or []
    selections = []
    for i, raw in enumerate(calls if isinstance(calls, Sequence) else ()):
        call = _as_mapping(raw)
        function = call.get("function", call)
        if not isinstance(function, Mapping) or not isinstance(function.get("name"), str):
            continue
        arguments = function.get("arguments", function.get("args", {}))
        selections.append(_selection(call.get("id"), function["name"], arguments, i))
    return selections


# -- lenient JSON ---------------------------------------------------------------------------------

_MISSING: Any = object()
_NUMBER = re.compile(r"-?(?:0|[1-9]\d*)(?:\.\d+)?(?:[eE][+-]?\d+)?")
_CUT_ESCAPE = re.compile(r"(\\+)(?:u[0-9a-fA-F]{0,3})?$")
_NUMBER_CUT = re.compile(r"\.|[eE][+-]?")
_WS = " \t\n\r"
_LITERALS = {"true": True, "false": False, "null": None}


def parse_partial_json(text: str) -> Any:
    """The value a JSON text begins with, when the text may be cut off anywhere.

    What has arrived is kept (a string cut in the middle is kept as far as it goes, a number as
    far as it parses); what cannot be known yet is left out (a key without its value, a literal
    cut in the middle). Complete JSON parses exactly as ``json.loads`` would.

    Raises:
        ValueError: the text is not the beginning of a JSON document, or holds no value yet.
    """
    value, end, _ = _value(text, 0)
    if value is _MISSING:
        raise ValueError("no JSON value yet")
    if text[end:].strip(_WS):
        raise ValueError(f"unexpected text after the JSON value at character {end}")
    return value


def _skip(text: str, i: int) -> int:
    while i < len(text) and text[i] in _WS:
        i += 1
    return i


def _value(text: str, i: int) -> tuple[Any, int, bool]:
    """(value or ``_MISSING``, next index, whether the value is complete)."""
    i = _skip(text, i)
    if i >= len(text):
        return _MISSING, i, False
    char = text[i]
    if char == "{":
        return _object(text, i + 1)
    if char == "[":
        return _array(text, i + 1)
    if char == '"':
        return _string(text, i + 1)
    match = _NUMBER.match(text, i)
    if match:
        end, number = match.end(), json.loads(match.group())
        rest = text[end:]
        if not rest:  # more digits may follow
            return number, end, False
        if _NUMBER_CUT.fullmatch(rest):  # "1." or "1e-" at the end: a fraction or exponent to come
            return number, len(text), False
        return number, end, True
    for word, value in _LITERALS.items():
        if text.startswith(word, i):
            return value, i + len(word), True
        if word.startswith(text[i:]):  # cut in the middle of the literal
            return _MISSING, len(text), False
    if char == "-" and i + 1 == len(text):
        return _MISSING, len(text), False
    raise ValueError(f"unexpected character {char!r} at character {i}")


def _string(text: str, i: int) -> tuple[Any, int, bool]:
    j = i
    while j < len(text):
        char = text[j]
        if char == "\\":
            j += 2
            continue
        if char == '"':
            return json.loads(text[i - 1 : j + 1]), j + 1, True
        j += 1
    body = text[i:]
    cut = _CUT_ESCAPE.search(body)
    if cut and len(cut.group(1)) % 2 == 1:  # an escape cut in the middle: leave it out
        body = body[: cut.end(1) - 1]
    try:
        return json.loads(f'"{body}"'), len(text), False
    except json.JSONDecodeError as error:
        raise ValueError(f"malformed string at character {i - 1}") from error


def _object(text: str, i: int) -> tuple[Any, int, bool]:
    out: dict[str, Any] = {}
    i = _skip(text, i)
    if i < len(text) and text[i] == "}":
        return out, i + 1, True
    while True:
        i = _skip(text, i)
        if i >= len(text):
            return out, i, False
        if text[i] != '"':
            raise ValueError(f"expected a key at character {i}")
        key, i, complete = _string(text, i + 1)
        if not complete:
            return out, i, False
        i = _skip(text, i)
        if i >= len(text):
            return out, i, False
        if text[i] != ":":
            raise ValueError(f"expected ':' at character {i}")
        value, i, complete = _value(text, i + 1)
        if value is _MISSING:
            return out, i, False
        out[key] = value
        if not complete:
            return out, i, False
        i = _skip(text, i)
        if i >= len(text):
            return out, i, False
        if text[i] == "}":
            return out, i + 1, True
        if text[i] != ",":
            raise ValueError(f"expected ',' or '}}' at character {i}")
        i += 1


def _array(text: str, i: int) -> tuple[Any, int, bool]:
    out: list[Any] = []
    i = _skip(text, i)
    if i < len(text) and text[i] == "]":
        return out, i + 1, True
    while True:
        value, i, complete = _value(text, i)
        if value is _MISSING:
            return out, i, False
        out.append(value)
        if not complete:
            return out, i, False
        i = _skip(text, i)
        if i >= len(text):
            return out, i, False
        if text[i] == "]":
            return out, i + 1, True
        if text[i] != ",":
            raise ValueError(f"expected ',' or ']' at character {i}")
        i += 1
