"""Proving the branches of a ``oneOf`` mutually exclusive, which ``oneOf`` needs to become ``|``.

A grammar alternation accepts a value when *any* branch does, while ``oneOf`` wants exactly one:
the two agree only when no value satisfies two branches. Two branches are taken as exclusive
when they accept different JSON types, disjoint ``const`` / ``enum`` values, or objects whose
shared required property has disjoint values (a discriminator); anything else may overlap.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from ...errors import SchemaNotSupportedError
from .schema_keywords import canonical, json_kind, not_supported

__all__ = ["RefResolver", "check_exclusive"]

# Resolves a ``$ref`` value to its target's pointer and schema, or raises
# SchemaNotSupportedError.
RefResolver = Callable[[Any], tuple[str, Any]]


def check_exclusive(branches: list[Any], where: str, resolve: RefResolver) -> None:
    """Raise unless the ``oneOf`` ``branches`` (at ``where``) are provably exclusive."""
    infos = [_summary(branch, set(), resolve) for branch in branches]
    for i, a in enumerate(infos):
        for j in range(i + 1, len(infos)):
            if not _disjoint(a, infos[j]):
                raise not_supported(
                    f"'oneOf' branches {i} and {j} may overlap (only provably exclusive "
                    "branches are supported)",
                    where,
                )


@dataclass(frozen=True)
class _Summary:
    kinds: frozenset[str] | None  # JSON kinds accepted (integer folded into number); None: any
    values: frozenset[Any] | None  # the only accepted values (canonical), when finite
    discriminators: dict[str, frozenset[Any]]  # required property -> its finite values


def _summary(schema: Any, seen: set[str], resolve: RefResolver) -> _Summary:
    """What a schema accepts, as far as exclusivity checks need it."""
    if schema is True or not isinstance(schema, Mapping):
        return _Summary(None, None, {})
    if "$ref" in schema:
        try:
            target, node = resolve(schema["$ref"])
        except SchemaNotSupportedError:
            return _Summary(None, None, {})
        if target in seen:
            return _Summary(None, None, {})
        return _summary(node, seen | {target}, resolve)
    kinds: frozenset[str] | None = None
    values: frozenset[Any] | None = None
    if "type" in schema:
        names = schema["type"] if isinstance(schema["type"], list) else [schema["type"]]
        kinds = frozenset("number" if n == "integer" else str(n) for n in names)
    literal: list[Any] | None = None
    if "enum" in schema and isinstance(schema["enum"], list):
        literal = list(schema["enum"])
    if "const" in schema:
        literal = [schema["const"]]
    if literal is not None:
        values = frozenset(canonical(v) for v in literal)
        literal_kinds = frozenset(json_kind(v) for v in literal)
        kinds = literal_kinds if kinds is None else kinds & literal_kinds
    for keyword in ("anyOf", "oneOf"):
        if isinstance(schema.get(keyword), list):
            parts = [_summary(b, seen, resolve) for b in schema[keyword]]
            if all(p.kinds is not None for p in parts):
                union = frozenset().union(*(p.kinds or frozenset() for p in parts))
                kinds = union if kinds is None else kinds & union
    if isinstance(schema.get("allOf"), list):
        for member in schema["allOf"]:
            part = _summary(member, seen, resolve)
            if part.kinds is not None:
                kinds = part.kinds if kinds is None else kinds & part.kinds
    discriminators: dict[str, frozenset[Any]] = {}
    required = schema.get("required")
    properties = schema.get("properties")
    if (
        kinds == frozenset({"object"})
        and isinstance(required, list)
        and isinstance(properties, Mapping)
    ):
        for name in required:
            if isinstance(name, str) and name in properties:
                part = _summary(properties[name], seen, resolve)
                if part.values is not None:
                    discriminators[name] = part.values
    return _Summary(kinds, values, discriminators)


def _disjoint(a: _Summary, b: _Summary) -> bool:
    if a.kinds is not None and b.kinds is not None and not a.kinds & b.kinds:
        return True
    if a.values is not None and b.values is not None and not a.values & b.values:
        return True
    return any(
        name in b.discriminators and not values & b.discriminators[name]
        for name, values in a.discriminators.items()
    )
