"""What the converter knows about JSON Schema itself: keywords, JSON values, places in a schema.

The keyword tables say which keywords bear on which JSON type, which are never honoured, and
which can invalidate an instance at all; the value helpers classify, compare and print JSON
values; :func:`pointer` and :func:`not_supported` name the place in a schema an error is about.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from decimal import Decimal
from typing import Any

from ...errors import SchemaNotSupportedError

__all__ = [
    "ARRAY_KEYWORDS",
    "NUMBER_KEYWORDS",
    "OBJECT_KEYWORDS",
    "STRING_KEYWORDS",
    "TRIVIAL_PATTERNS",
    "TYPES",
    "UNSUPPORTED_KEYWORDS",
    "VALIDATION_KEYWORDS",
    "canonical",
    "dump_json",
    "has_type",
    "json_kind",
    "non_negative_int",
    "not_supported",
    "pointer",
]

# The values ``type`` may name.
TYPES = ("object", "array", "string", "integer", "number", "boolean", "null")

# Keywords that constrain one JSON type only (a validator skips them for other types), grouped
# by the type they bear on; used to infer the type of a schema that names none.
OBJECT_KEYWORDS = frozenset(
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
ARRAY_KEYWORDS = frozenset(
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
STRING_KEYWORDS = frozenset({"minLength", "maxLength", "pattern", "format"})
NUMBER_KEYWORDS = frozenset(
    {"minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum", "multipleOf"}
)
# Keywords the converter never honours, wherever they are.
UNSUPPORTED_KEYWORDS = frozenset(
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
VALIDATION_KEYWORDS = (
    OBJECT_KEYWORDS
    | ARRAY_KEYWORDS
    | STRING_KEYWORDS
    | NUMBER_KEYWORDS
    | UNSUPPORTED_KEYWORDS
    | {"type", "enum", "const", "anyOf", "oneOf", "allOf", "$ref"}
)
# Values of ``pattern`` that match every string, so honouring them needs nothing.
TRIVIAL_PATTERNS = frozenset({"", ".*", "^.*"})


# -- places in a schema --------------------------------------------------------------------------


def pointer(path: str, *segments: str | int) -> str:
    """The JSON pointer ``path`` extended by ``segments`` (escaped as RFC 6901 wants)."""
    escaped = (str(s).replace("~", "~0").replace("/", "~1") for s in segments)
    return "/".join([path, *escaped])


def not_supported(message: str, path: str) -> SchemaNotSupportedError:
    """The error to raise for the part of a schema at ``path``."""
    return SchemaNotSupportedError(message, path=path)


# -- JSON values ---------------------------------------------------------------------------------


def json_kind(value: Any) -> str:
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


def has_type(value: Any, type_name: str) -> bool:
    """Whether ``value`` is an instance of the JSON Schema type ``type_name``."""
    kind = json_kind(value)
    if type_name == "integer":
        return kind == "number" and (isinstance(value, int) or float(value).is_integer())
    return kind == type_name


def canonical(value: Any) -> Any:
    """A hashable key equal for JSON-equal values (1 == 1.0, but true != 1)."""
    kind = json_kind(value)
    if kind == "number":
        return ("number", Decimal(repr(value)) if isinstance(value, float) else Decimal(value))
    if kind == "object":
        return ("object", frozenset((k, canonical(v)) for k, v in value.items()))
    if kind == "array":
        return ("array", tuple(canonical(v) for v in value))
    return (kind, value)


def dump_json(value: Any, path: str) -> str:
    """``value`` as compact JSON text; raises the schema error at ``path`` if it is no JSON."""
    if json_kind(value) == "unknown":
        raise not_supported(f"{type(value).__name__} is not a JSON value", path)
    try:
        return json.dumps(value, ensure_ascii=False, separators=(",", ":"), allow_nan=False)
    except (TypeError, ValueError) as error:
        raise not_supported(f"not a JSON value ({error})", path) from error


def non_negative_int(schema: Mapping[str, Any], key: str, path: str) -> int | None:
    """The count keyword ``key`` of ``schema`` (``None`` if absent), checked."""
    if key not in schema:
        return None
    value = schema[key]
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise not_supported(f"'{key}' must be a non-negative integer", pointer(path, key))
    return value
