"""Room for a forced answer after a reasoning model's thinking.

A call the caller requires (a named tool, ``tool_choice="any"``, a structured answer) comes
after the thinking. A model that thinks until ``max_tokens`` never begins it; small models and
templates that cannot switch thinking off do exactly that. So when the caller forces the answer,
thinking is given a budget that leaves room for it: ``forced_answer_budget``.

The room kept is the larger of what the answer's schema needs (``schema_tokens``: a rough count
of a typical instance, keys and punctuation included, doubled for longer values) and part of
``max_tokens`` (half, at most ``ANSWER_SHARE_CAP``): a short limit splits evenly between
thinking and answer, and a long one still leaves a reasoning model most of it to think in.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

__all__ = ["ANSWER_SHARE_CAP", "answer_room", "forced_answer_budget", "schema_tokens"]

ANSWER_SHARE_CAP = 256
"""The most of ``max_tokens`` kept for a forced answer beyond what its schema needs."""

_CALL_FRAMING = 16  # a call's markers, the tool's name key and the braces around it
_FREE_STRING = 8  # a typical short string value
_MAX_DEPTH = 6  # deeper parts of a schema count as one free value: the count is a guess anyway
_ARRAY_ITEMS = 2


def schema_tokens(schema: Mapping[str, Any] | None, *, depth: int = 0) -> int:
    """Roughly how many tokens a typical JSON value for ``schema`` takes (``None``: any
    object, counted as a small one)."""
    if schema is None or depth > _MAX_DEPTH:
        return _FREE_STRING * 2
    if "const" in schema:
        return len(str(schema["const"])) // 3 + 2
    if isinstance(schema.get("enum"), list) and schema["enum"]:
        return max(len(str(value)) for value in schema["enum"]) // 3 + 2
    for key in ("anyOf", "oneOf"):
        options = schema.get(key)
        if isinstance(options, list) and options:
            return max(schema_tokens(o, depth=depth + 1) for o in options if isinstance(o, Mapping))
    kind = schema.get("type")
    if isinstance(kind, list):
        kind = next((k for k in kind if k != "null"), "null")
    properties = schema.get("properties")
    if kind == "object" or isinstance(properties, Mapping):
        if not isinstance(properties, Mapping):
            return _FREE_STRING * 2
        return 2 + sum(
            len(name) // 3 + 3 + schema_tokens(value, depth=depth + 1)
            for name, value in properties.items()
            if isinstance(value, Mapping)
        )
    if kind == "array":
        items = schema.get("items")
        item = schema_tokens(items if isinstance(items, Mapping) else None, depth=depth + 1)
        return 2 + _ARRAY_ITEMS * (item + 1)
    if kind in ("integer", "number"):
        return 3
    if kind in ("boolean", "null"):
        return 1
    return _FREE_STRING  # strings, and anything else (``$ref``s and the like) as one value


def answer_room(schemas: Iterable[Mapping[str, Any] | None], max_tokens: int) -> int:
    """Tokens kept for a forced answer that is one of ``schemas`` (a tool's arguments with its
    call's framing, or a structured answer's schema), within ``max_tokens``."""
    needed = max((2 * schema_tokens(schema) + _CALL_FRAMING for schema in schemas), default=0)
    share = min(max_tokens // 2, ANSWER_SHARE_CAP)
    return min(max_tokens, max(needed, share))


def forced_answer_budget(
    schemas: Iterable[Mapping[str, Any] | None], max_tokens: int | None
) -> int | None:
    """The thinking budget that leaves a forced answer its room (``None`` without
    ``max_tokens``: no limit to divide)."""
    if max_tokens is None:
        return None
    return max(0, max_tokens - answer_room(schemas, max_tokens))
