"""OpenAI-style chat messages to the engine's template shape, images read under the server's
policy.

The template shape is OpenAI's own (roles, ``tool_calls``, ``tool_call_id``), so this is a check
and a copy: ``developer`` becomes ``system`` and ``function`` becomes ``tool``, an earlier
answer's calls are read by ``tools.read_tool_calls``, its ``reasoning_content`` kept for the
templates that render it, and ``image_url`` and ``input_audio`` parts in user messages read by
the reader the client core gives. Chat completions, ``/apply-template`` and the Responses API
(whose input items are first turned into such messages) all read their conversations here.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from ..client.content import template_content
from ..client.plan import ImageReader
from ..errors import ImageInputNotSupportedError, InvalidRequestError, UnsupportedContentError
from ..multimodal import input_audio_source, read_audio
from ..tools import read_tool_calls
from .errors import invalid_request

__all__ = ["messages_reader"]

_ROLES = {"system": "system", "developer": "system", "user": "user", "assistant": "assistant"}
_ROLES |= {"tool": "tool", "function": "tool"}


def messages_reader(
    messages: Sequence[Mapping[str, Any]],
) -> Callable[[ImageReader | None], list[dict[str, Any]]]:
    """What translates OpenAI messages into the engine's template shape, reading images with
    the reader the client core gives (``None``: the model takes no images)."""

    def read(read_image: ImageReader | None) -> list[dict[str, Any]]:
        return [_message(m, i, read_image) for i, m in enumerate(messages)]

    return read


def _message(
    message: Mapping[str, Any], index: int, read_image: ImageReader | None
) -> dict[str, Any]:
    param = f"messages[{index}]"
    role = _ROLES.get(str(message.get("role")))
    if role is None:
        raise invalid_request(
            f"{param}.role {message.get('role')!r} is not a chat role", f"{param}.role"
        )
    item: dict[str, Any] = {
        "role": role,
        "content": _content(message.get("content"), role, param, read_image),
    }
    name = message.get("name")
    if isinstance(name, str) and name:
        item["name"] = name
    reasoning = message.get("reasoning_content")
    if role == "assistant" and isinstance(reasoning, str) and reasoning:
        item["reasoning_content"] = reasoning
    calls = message.get("tool_calls")
    if role == "assistant" and calls:
        # Earlier answers' calls, arguments as objects (templates print them so).
        given = read_tool_calls(calls, where=f"{param}.tool_calls")
        item["tool_calls"] = [call.to_template() for call in given]
    if role == "tool":
        call_id = message.get("tool_call_id")
        if isinstance(call_id, str):
            item["tool_call_id"] = call_id
    return item


def _content(
    content: object, role: str, param: str, read_image: ImageReader | None
) -> str | list[dict[str, Any]]:
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if not isinstance(content, list):
        raise invalid_request(
            f"{param}.content must be a string or a list of parts", f"{param}.content"
        )
    parts: list[dict[str, Any]] = []
    for i, part in enumerate(content):
        kind = part.get("type") if isinstance(part, Mapping) else None
        if kind == "text":
            parts.append({"type": "text", "text": str(part.get("text", ""))})
        elif kind == "image_url" and role == "user":
            url = part.get("image_url")
            url = url.get("url") if isinstance(url, Mapping) else url
            if not isinstance(url, str) or not url:
                raise invalid_request(
                    f"{param}.content[{i}] names no image URL", f"{param}.content"
                )
            if read_image is None:
                raise ImageInputNotSupportedError(
                    "this model has no image projector (mmproj), so it cannot take image inputs"
                )
            parts.append({"type": "image", "image": read_image(url)})
        elif kind == "input_audio" and role == "user":
            source = input_audio_source(part.get("input_audio"), f"{param}.content[{i}]")
            parts.append({"type": "audio", "audio": read_audio(read_image, source)})
        elif kind == "refusal" and role == "assistant":
            continue
        elif kind is None:
            raise InvalidRequestError(f"{param}.content[{i}] has no type")
        else:
            raise UnsupportedContentError(
                f"{param}.content[{i}]: parts of type {kind!r} are not supported (text, and "
                "image_url and input_audio in user messages, are)"
            )
    return template_content(parts)
