"""Lenient JSON: the value a JSON text begins with, while the text is still streaming in.

Streamed tool-call arguments and structured answers arrive a token at a time; showing what has
arrived so far (a partial object, a string as far as it goes) needs a parser that accepts any
prefix of a JSON document.
"""

from __future__ import annotations

import json
import re
from typing import Any

__all__ = ["parse_partial_json"]

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
