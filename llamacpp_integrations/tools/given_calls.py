"""Tool calls handed to the package, read in every loose OpenAI shape with one policy.

Earlier answers in a conversation (an OpenAI request's ``messages[i].tool_calls``, a LlamaIndex
message's ``additional_kwargs["tool_calls"]``, an engine ``ChatMessage``'s ``tool_calls``) and
a framework's response all carry calls shaped more or less like OpenAI's. ``read_tool_calls``
reads them all:

* the calls: a list (or tuple) of calls;
* a call: a mapping, or an object whose ``model_dump()`` gives one (OpenAI SDK objects and
  other pydantic models); its ``type``, when given, is ``"function"`` (or LangChain's
  ``"tool_call"``);
* its function: ``call["function"]`` when present, else the call itself (the flat
  ``{"name": ..., "arguments": ...}`` form, and LangChain's ``{"name": ..., "args": ...}``);
* ``name``: a non-empty string;
* ``arguments`` (or ``args``): a mapping, or JSON text of an object, read leniently (a
  streamed call's text may be cut short: what has arrived is read, as ``parse_partial_json``
  reads it); missing, ``None`` or blank text is ``{}``;
* ``id``: kept as text when given; ``None`` when missing or empty (the loop guard pairs a call
  without an id with any tool result).

Anything else raises ``InvalidRequestError`` naming the entry: nothing is skipped, since these
calls are the caller's input, and dropping one silently would change the conversation the
model sees (or the calls an agent runs).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ..errors import InvalidRequestError
from .partial_json import parse_partial_json

__all__ = ["GivenToolCall", "read_tool_calls"]

_CALL_TYPES = (None, "function", "tool_call")


@dataclass(frozen=True)
class GivenToolCall:
    """One call as read: its id (``None`` when it has none), the tool's name, its arguments."""

    id: str | None
    name: str
    arguments: dict[str, Any]

    def to_template(self) -> dict[str, Any]:
        """The OpenAI shape chat templates read, arguments as an object (the id only when
        the call has one)."""
        call: dict[str, Any] = {
            "type": "function",
            "function": {"name": self.name, "arguments": self.arguments},
        }
        if self.id is not None:
            call["id"] = self.id
        return call


def read_tool_calls(calls: object, *, where: str) -> list[GivenToolCall]:
    """The calls in ``calls``, each read per the module docstring; ``where`` names the list in
    errors (``"messages[2].tool_calls"``).

    Raises:
        InvalidRequestError: the list, or one of its calls, is not in a shape above.
    """
    if not isinstance(calls, Sequence) or isinstance(calls, str | bytes):
        raise InvalidRequestError(f"{where} must be a list of tool calls")
    return [_read(call, f"{where}[{i}]") for i, call in enumerate(calls)]


def _mapping(call: object, where: str) -> Mapping[str, Any]:
    if isinstance(call, Mapping):
        return call
    dump = getattr(call, "model_dump", None)  # OpenAI SDK objects and other pydantic models
    dumped = dump() if callable(dump) else None
    if isinstance(dumped, Mapping):
        return dumped
    raise InvalidRequestError(
        f"{where} must be a mapping (or an object with model_dump()), not a {type(call).__name__}"
    )


def _read(raw: object, where: str) -> GivenToolCall:
    call = _mapping(raw, where)
    if call.get("type") not in _CALL_TYPES:
        raise InvalidRequestError(
            f"{where} is a {call.get('type')!r} call: only function calls are read"
        )
    function = call.get("function", call)
    if not isinstance(function, Mapping):
        raise InvalidRequestError(f"{where}.function must be {{'name': ..., 'arguments': ...}}")
    name = function.get("name")
    if not isinstance(name, str) or not name:
        raise InvalidRequestError(f"{where} has no name (a non-empty string)")
    arguments = function.get("arguments", function.get("args"))
    call_id = call.get("id")
    return GivenToolCall(
        None if call_id is None or call_id == "" else str(call_id),
        name,
        _arguments(arguments, f"{where}.function.arguments"),
    )


def _arguments(value: object, where: str) -> dict[str, Any]:
    if value is None:
        return {}
    if isinstance(value, str):
        if not value.strip():
            return {}
        try:
            value = parse_partial_json(value)
        except ValueError:
            raise InvalidRequestError(f"{where} is not JSON") from None
    if not isinstance(value, Mapping):
        raise InvalidRequestError(f"{where} must be a JSON object")
    return dict(value)
