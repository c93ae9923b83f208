"""Reading one tool call from the text of an answer, as far as the text goes.

A call is read into a :class:`PartialCall` while the answer streams in: its name once complete,
its argument text as it grows, its end once the call's text is whole. Two shapes are read: a
JSON call object (``{"name": ..., "arguments": {...}}``) and Mistral v11's
``name[ARGS]{...}``. The JSON scanning tracks only nesting and strings; ``json.loads`` judges
the content of each complete value.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any

from ..errors import ToolCallParseError

__all__ = ["PartialCall", "load_json", "scan_call_object", "scan_named_call", "skip_json_ws"]

_ARGUMENT_KEYS = ("arguments", "parameters")
_NAME = re.compile(r"[A-Za-z0-9_.\-]+")
_ARGS_MARK = "[ARGS]"
_JSON_WS = " \t\n\r"


@dataclass
class PartialCall:
    """What is known of one call so far."""

    start: int
    name: str | None = None
    arguments: str = ""  # the argument text known so far (always a prefix of the final one)
    arguments_done: bool = False
    end: int | None = None  # set when the call's text is complete
    raw_arguments_string: bool = False  # arguments came as a JSON string holding JSON
    raw: str = ""  # the whole call object, once complete (JSON-object syntaxes)


def skip_json_ws(text: str, pos: int) -> int:
    """The first position at or after ``pos`` that is not JSON whitespace."""
    # JSON's four whitespace characters only: the grammars allow these and no others, so
    # anything else (U+2028, form feed...) is part of a reply and must not be eaten.
    while pos < len(text) and text[pos] in _JSON_WS:
        pos += 1
    return pos


def _json_string_end(text: str, start: int) -> int | None:
    """Index after the string starting at ``text[start] == '"'``, or None if it is unfinished."""
    escaped = False
    for i in range(start + 1, len(text)):
        char = text[i]
        if escaped:
            escaped = False
        elif char == "\\":
            escaped = True
        elif char == '"':
            return i + 1
    return None


def _value_end(text: str, start: int) -> tuple[int | None, int]:
    """Index after the JSON value starting at ``start`` (None if unfinished), and how far the
    scan got. Only the nesting is tracked; ``json.loads`` judges the content later."""
    char = text[start]
    if char == '"':
        end = _json_string_end(text, start)
        return end, len(text) if end is None else end
    if char in "{[":
        depth, i = 0, start
        while i < len(text):
            char = text[i]
            if char == '"':
                string_end = _json_string_end(text, i)
                if string_end is None:
                    return None, len(text)
                i = string_end
                continue
            if char in "{[":
                depth += 1
            elif char in "}]":
                depth -= 1
                if depth == 0:
                    return i + 1, i + 1
            i += 1
        return None, len(text)
    match = re.compile(r"[^,}\]\s]*").match(text, start)
    assert match is not None  # the pattern matches the empty string
    end = match.end()
    return (end, end) if end < len(text) else (None, end)


def scan_call_object(text: str, start: int, call: PartialCall) -> None:
    """Fill ``call`` from the object at ``text[start] == '{'`` as far as the text goes."""
    pos = skip_json_ws(text, start + 1)
    while pos < len(text):
        if text[pos] == "}":
            call.end = pos + 1
            return
        if text[pos] == ",":
            pos = skip_json_ws(text, pos + 1)
            continue
        if text[pos] != '"':
            raise ToolCallParseError("expected a key in the call object", position=pos)
        key_end = _json_string_end(text, pos)
        if key_end is None:
            return
        key = load_json(text[pos:key_end], pos)
        pos = skip_json_ws(text, key_end)
        if pos >= len(text):
            return
        if text[pos] != ":":
            raise ToolCallParseError("expected ':' after a key in the call object", position=pos)
        pos = skip_json_ws(text, pos + 1)
        if pos >= len(text):
            return
        value_end, reached = _value_end(text, pos)
        if key == "name":
            if value_end is not None:
                name = load_json(text[pos:value_end], pos)
                if not isinstance(name, str):
                    raise ToolCallParseError("the call's name is not a string", position=pos)
                call.name = name
        elif key in _ARGUMENT_KEYS:
            _read_arguments(text, pos, value_end, reached, call)
        if value_end is None:
            return
        pos = skip_json_ws(text, value_end)


def _read_arguments(text: str, pos: int, end: int | None, reached: int, call: PartialCall) -> None:
    if text[pos] == "{":
        call.arguments = text[pos : end if end is not None else reached]
        call.arguments_done = end is not None
    elif end is not None:  # a string holding JSON, or something that is not arguments at all
        value = load_json(text[pos:end], pos)
        if not isinstance(value, str):
            raise ToolCallParseError("the call's arguments are not an object", position=pos)
        call.arguments, call.arguments_done = value, True
        call.raw_arguments_string = True


def load_json(text: str, position: int) -> Any:
    """``json.loads``, raising :class:`ToolCallParseError` at ``position`` on bad JSON."""
    try:
        return json.loads(text)
    except json.JSONDecodeError as error:
        raise ToolCallParseError(f"invalid JSON ({error.msg})", position=position) from None


def scan_named_call(text: str, start: int, call: PartialCall) -> None:
    """``name[ARGS]{...}`` (Mistral v11)."""
    match = _NAME.match(text, start)
    name_end = match.end() if match else start
    if name_end == len(text):
        return
    if name_end == start:
        raise ToolCallParseError("expected a tool name after the call marker", position=start)
    rest = text[name_end : name_end + len(_ARGS_MARK)]
    if not _ARGS_MARK.startswith(rest):
        raise ToolCallParseError("expected [ARGS] after the tool name", position=name_end)
    if len(rest) < len(_ARGS_MARK):
        return
    call.name = text[start:name_end]
    pos = skip_json_ws(text, name_end + len(_ARGS_MARK))
    if pos >= len(text):
        return
    if text[pos] != "{":
        raise ToolCallParseError("the call's arguments are not an object", position=pos)
    end, reached = _value_end(text, pos)
    _read_arguments(text, pos, end, reached, call)
    call.end = end
