"""Responses API ``input`` items as the chat messages the chat endpoint reads.

``input`` is turned into chat-completions messages, read by ``chat_messages.messages_reader``
as the chat endpoint reads its own, so images, earlier calls and reasoning reach the template
exactly as they do from ``/v1/chat/completions``; what the Responses API spreads over several
items of one answer (its reasoning, its message, its function calls) becomes one assistant
message. Every item is checked here first, so a mistake is answered naming the item
(``input[3].arguments``), not the chat message it would have become.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from ...client.plan import ImageReader
from ...tools import parse_partial_json
from ..chat_messages import messages_reader
from ..errors import invalid_request
from .schemas import ResponsesBody

__all__ = ["chat_messages", "responses_messages_reader"]

_INPUT_ROLES = frozenset({"user", "system", "developer"})


def _text(value: object, param: str) -> str:
    if not isinstance(value, str):
        raise invalid_request(f"{param} must be a string", param)
    return value


def _input_content(content: object, role: str, param: str) -> str | list[dict[str, Any]]:
    """A user, system or developer message's content as chat parts (text, images)."""
    if isinstance(content, str):
        return content
    if not isinstance(content, list):
        raise invalid_request(f"{param} must be a string or a list of parts", param)
    parts: list[dict[str, Any]] = []
    for j, part in enumerate(content):
        where = f"{param}[{j}]"
        kind = part.get("type") if isinstance(part, Mapping) else None
        if kind == "input_text":
            parts.append({"type": "text", "text": _text(part.get("text"), f"{where}.text")})
        elif kind == "input_image" and role == "user":
            url = part.get("image_url")
            if part.get("file_id") is not None and url is None:
                raise invalid_request(
                    "file_id needs OpenAI's Files API: send the image as image_url (a data: URI)",
                    f"{where}.file_id",
                )
            if not isinstance(url, str) or not url:
                raise invalid_request(f"{where} names no image_url", f"{where}.image_url")
            parts.append({"type": "image_url", "image_url": {"url": url}})
        elif kind == "input_audio" and role == "user":
            # The chat completions' shape ({"data": base64, "format": "wav"}), read there.
            parts.append({"type": "input_audio", "input_audio": part.get("input_audio")})
        else:
            allowed = "input_text, input_image and input_audio" if role == "user" else "input_text"
            raise invalid_request(
                f"{where}: parts of type {kind!r} are not supported ({allowed} are)", where
            )
    return parts


def _output_text(content: object, param: str) -> str:
    """An assistant message's text: a string, or its ``output_text`` parts (refusals are
    left out, as the chat endpoint leaves them out)."""
    if isinstance(content, str):
        return content
    if not isinstance(content, list):
        raise invalid_request(f"{param} must be a string or a list of parts", param)
    texts = []
    for j, part in enumerate(content):
        kind = part.get("type") if isinstance(part, Mapping) else None
        if kind in ("output_text", "input_text"):
            texts.append(_text(part.get("text"), f"{param}[{j}].text"))
        elif kind != "refusal":
            raise invalid_request(
                f"{param}[{j}]: parts of type {kind!r} are not supported", f"{param}[{j}]"
            )
    return "".join(texts)


def _reasoning_text(item: Mapping[str, Any], param: str) -> str:
    """An earlier answer's reasoning: its text, else its summary (what OpenAI gives back)."""
    for key in ("content", "summary"):
        parts = item.get(key)
        if isinstance(parts, list) and parts:
            return "".join(
                _text(p.get("text") if isinstance(p, Mapping) else None, f"{param}.{key}[{j}].text")
                for j, p in enumerate(parts)
            )
    return ""


def _call(item: Mapping[str, Any], param: str) -> dict[str, Any]:
    """An earlier ``function_call`` item as a chat tool call (arguments read leniently, as a
    call cut by ``max_output_tokens`` may come back)."""
    call_id = _text(item.get("call_id"), f"{param}.call_id")
    name = _text(item.get("name"), f"{param}.name")
    if not name:
        raise invalid_request(f"{param}.name is empty", f"{param}.name")
    arguments = _text(item.get("arguments", ""), f"{param}.arguments")
    try:
        value = parse_partial_json(arguments) if arguments.strip() else {}
    except ValueError:
        raise invalid_request(f"{param}.arguments is not JSON", f"{param}.arguments") from None
    if not isinstance(value, Mapping):
        raise invalid_request(f"{param}.arguments must be a JSON object", f"{param}.arguments")
    return {"id": call_id, "type": "function", "function": {"name": name, "arguments": value}}


def _call_output(item: Mapping[str, Any], param: str) -> str:
    output = item.get("output")
    if isinstance(output, list):
        texts = []
        for j, part in enumerate(output):
            kind = part.get("type") if isinstance(part, Mapping) else None
            if kind != "input_text":
                raise invalid_request(
                    f"{param}.output[{j}]: only input_text parts are supported in a call's output",
                    f"{param}.output[{j}]",
                )
            texts.append(_text(part.get("text"), f"{param}.output[{j}].text"))
        return "".join(texts)
    return _text(output, f"{param}.output")


class _Conversation:
    """Chat messages built from input items; consecutive items of one answer (reasoning,
    message, function calls) make one assistant message."""

    def __init__(self) -> None:
        self.messages: list[dict[str, Any]] = []
        self._turn: dict[str, Any] | None = None
        self._names: dict[str, str] = {}  # call id -> function name, for the results

    def add(self, message: dict[str, Any]) -> None:
        self.messages.append(message)
        self._turn = None

    def turn(self, *, fresh: bool = False) -> dict[str, Any]:
        """The assistant message being built (a new one after other messages, or if
        ``fresh``)."""
        if self._turn is None or fresh:
            self._turn = {"role": "assistant", "content": ""}
            self.messages.append(self._turn)
        return self._turn

    def reasoning(self, text: str) -> None:
        # Reasoning opens an answer: after its text or calls it belongs to the next one.
        turn = self._turn
        fresh = turn is not None and bool(turn["content"] or turn.get("tool_calls"))
        turn = self.turn(fresh=fresh)
        turn["reasoning_content"] = turn.get("reasoning_content", "") + text

    def call(self, call: dict[str, Any]) -> None:
        self.turn().setdefault("tool_calls", []).append(call)
        self._names[call["id"]] = call["function"]["name"]

    def result(self, call_id: str, output: str) -> None:
        message = {"role": "tool", "tool_call_id": call_id, "content": output}
        if call_id in self._names:  # some templates print the function's name with its result
            message["name"] = self._names[call_id]
        self.add(message)


def _item(conversation: _Conversation, item: object, param: str) -> None:
    if not isinstance(item, Mapping):
        raise invalid_request(f"{param} must be an object", param)
    kind = item.get("type", "message" if "role" in item else None)
    if kind == "message":
        role = item.get("role")
        content = item.get("content")
        if role == "assistant":
            turn = conversation.turn()
            turn["content"] += _output_text(content, f"{param}.content")
        elif role in _INPUT_ROLES:
            message = {"role": role, "content": _input_content(content, role, f"{param}.content")}
            conversation.add(message)
        else:
            raise invalid_request(f"{param}.role {role!r} is not a message role", f"{param}.role")
    elif kind == "function_call":
        conversation.call(_call(item, param))
    elif kind == "function_call_output":
        call_id = _text(item.get("call_id"), f"{param}.call_id")
        conversation.result(call_id, _call_output(item, param))
    elif kind == "reasoning":
        conversation.reasoning(_reasoning_text(item, param))
    elif kind == "item_reference":
        raise invalid_request(
            "item_reference needs stored responses: this server keeps none", param
        )
    else:
        raise invalid_request(
            f"{param}: items of type {kind!r} are not supported (message, function_call, "
            "function_call_output and reasoning are)",
            f"{param}.type",
        )


def chat_messages(instructions: str | None, given: object) -> list[dict[str, Any]]:
    """``instructions`` and ``input`` as chat-completions messages.

    Raises:
        ApiError: an item or part that is malformed or not supported, named by its path.
    """
    conversation = _Conversation()
    if instructions:
        conversation.add({"role": "system", "content": instructions})
    if isinstance(given, str):
        conversation.add({"role": "user", "content": given})
    elif isinstance(given, list) and given:
        for i, item in enumerate(given):
            _item(conversation, item, f"input[{i}]")
    else:
        raise invalid_request("input must be a string or a non-empty list of items", "input")
    return conversation.messages


def responses_messages_reader(
    body: ResponsesBody,
) -> Callable[[ImageReader | None], list[dict[str, Any]]]:
    """What gives the engine the request's messages, reading images with the reader the
    client core gives (``chat_messages.messages_reader``, after ``chat_messages``).

    Raises:
        ApiError: a malformed or unsupported item (checked now, before any work).
    """
    return messages_reader(chat_messages(body.instructions, body.input))
