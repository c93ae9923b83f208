"""What the schema converter knows about JSON Schema keywords and JSON values.

The keyword tables say which keywords bear on which JSON type, which are never honoured, and
which can invalidate an instance at all; the helpers classify, compare and print JSON values.
Shared by ``json_grammar`` (the converter) and kept apart so the converter reads as rules only.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from decimal import Decimal
from typing import Any

from .gbnf import _fail, _pointer

_TYPES = ("object", "array", "string", "integer", "number", "boolean", "null")

# Keywords that constrain one JSON type only (a validator skips them for other types), grouped
# by the type they bear on; used to infer the type of a schema that names none.
_OBJECT_KEYWORDS = frozenset(
    {
        "properties",
        "required",
        "additionalProperties",
        "minProperties",
        "maxProperties",
        "patternProperties",
        "propertyNames",
        "dependentRequired",
        "dependentSchemas",
        "dependencies",
        "unevaluatedProperties",
    }
)
_ARRAY_KEYWORDS = frozenset(
    {
        "items",
        "prefixItems",
        "additionalItems",
        "minItems",
        "maxItems",
        "uniqueItems",
        "contains",
        "minContains",
        "maxContains",
        "unevaluatedItems",
    }
)
_STRING_KEYWORDS = frozenset({"minLength", "maxLength", "pattern", "format"})
_NUMBER_KEYWORDS = frozenset(
    {"minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum", "multipleOf"}
)
# Keywords this converter never honours, wherever they are.
_UNSUPPORTED = frozenset(
    {
        "not",
        "if",
        "then",
        "else",
        "$dynamicRef",
        "$recursiveRef",
        "patternProperties",
        "propertyNames",
        "dependentRequired",
        "dependentSchemas",
        "dependencies",
        "unevaluatedProperties",
        "unevaluatedItems",
        "contains",
        "minContains",
        "maxContains",
    }
)
# Every keyword that can make an instance invalid (anything else is an annotation).
_VALIDATION = (
    _OBJECT_KEYWORDS
    | _ARRAY_KEYWORDS
    | _STRING_KEYWORDS
    | _NUMBER_KEYWORDS
    | _UNSUPPORTED
    | {"type", "enum", "const", "anyOf", "oneOf", "allOf", "$ref"}
)
_TRIVIAL_PATTERNS = frozenset({"", ".*", "^.*"})

# -- JSON values ---------------------------------------------------------------------------------


def _json_kind(value: Any) -> str:
    """JSON type of a value; integers and numbers are one kind ("number")."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int | float):
        return "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, Mapping):
        return "object"
    if isinstance(value, list | tuple):
        return "array"
    return "unknown"


def _has_type(value: Any, type_name: str) -> bool:
    kind = _json_kind(value)
    if type_name == "integer":
        return kind == "number" and (isinstance(value, int) or float(value).is_integer())
    return kind == type_name


def _canonical(value: Any) -> Any:
    """A hashable key equal for JSON-equal values (1 == 1.0, but true != 1)."""
    kind = _json_kind(value)
    if kind == "number":
        return ("number", Decimal(repr(value)) if isinstance(value, float) else Decimal(value))
    if kind == "object":
        return ("object", frozenset((k, _canonical(v)) for k, v in value.items()))
    if kind == "array":
        return ("array", tuple(_canonical(v) for v in value))
    return (kind, value)


def _dump(value: Any, path: str) -> str:
    if _json_kind(value) == "unknown":
        raise _fail(f"{type(value).__name__} is not a JSON value", path)
    try:
        return json.dumps(value, ensure_ascii=False, separators=(",", ":"), allow_nan=False)
    except (TypeError, ValueError) as error:
        raise _fail(f"not a JSON value ({error})", path) from error


def _non_negative_int(schema: Mapping[str, Any], key: str, path: str) -> int | None:
    if key not in schema:
        return None
    value = schema[key]
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise _fail(f"'{key}' must be a non-negative integer", _pointer(path, key))
    return value
