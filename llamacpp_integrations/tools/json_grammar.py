"""JSON schema -> GBNF grammar (llama.cpp syntax, root rule ``root``), valid by construction.

Every string the grammar returned by :func:`schema_to_gbnf` accepts is a JSON document that
validates against the schema. Where a constraint can only be expressed approximately, the grammar
accepts a *subset* of the valid instances, never an invalid one; a keyword that cannot be honoured
at all raises :class:`~llamacpp_integrations.errors.SchemaNotSupportedError` naming its place in
the schema (``#/properties/age/multipleOf``). Metadata (``title``, ``description``, ``examples``,
``default``, ``$comment`` ...) and keywords JSON Schema does not define are ignored, as a
validator ignores them.

Supported:

* ``type`` (a name or a list), ``enum``, ``const``;
* objects: ``properties`` (emitted in declared order; required ones always, optional ones may be
  skipped), ``required``, ``additionalProperties`` (false, true or a schema). Objects with declared
  properties are always closed (extra properties would only be allowed, never required). With no
  declared properties: ``{}`` when ``additionalProperties`` is false, any object when it is true or
  absent, a string-keyed map of its values when it is a schema. ``minProperties`` /
  ``maxProperties`` only where the generated objects satisfy them anyway;
* arrays: ``items``, ``prefixItems`` (and the draft-7 list form of ``items`` with
  ``additionalItems``), ``minItems``, ``maxItems``; ``uniqueItems: true`` only with at most one
  item;
* strings: ``minLength`` / ``maxLength`` (counted in code points, as validators do: every escape
  sequence is one character and surrogate escapes are not emitted), ``format`` among ``date``,
  ``time``, ``date-time``, ``uuid``, ``email``, ``ipv4`` (each a conservative subset, see
  ``_FORMATS``), ``pattern`` only when it matches every string (``""``, ``".*"``, ``"^.*"``);
* integers and numbers with ``minimum`` / ``maximum`` / ``exclusiveMinimum`` /
  ``exclusiveMaximum`` (numeric draft 2020 form and boolean draft 4 form), exact digit by digit;
  ``multipleOf`` only when it is 1;
* ``anyOf``; ``oneOf`` when its branches are provably exclusive (different JSON types, disjoint
  ``const`` / ``enum`` values, or objects with a shared required property whose values are
  disjoint); ``allOf`` with a single constraining member; ``$ref`` to any local JSON pointer
  (``#``, ``#/$defs/...``, ``#/definitions/...``), recursion included.

Not supported (raise): ``not``, ``if`` / ``then`` / ``else``, ``dependentRequired`` /
``dependentSchemas`` / ``dependencies``, ``patternProperties``, ``propertyNames``,
``unevaluated*``, ``contains``, ``$dynamicRef``, non-local or anchor ``$ref``, a nested ``$id``,
other string formats, and constraints next to ``$ref`` / ``anyOf`` / ``oneOf`` / ``allOf`` /
``enum`` / ``const`` (besides ``type`` for the last two), which would need an intersection.

Approximations (all narrowing):

* numbers have no exponent, at most 15 significant digits (so that distinct outputs stay distinct
  doubles and exclusive bounds hold after parsing) and at most 6 fraction digits (more when a
  bound needs them, up to the 15 digits); integer parts longer than 15 digits (only when a bound
  is that large) have no fraction; unbounded sides stop at 15 integer digits (below 2**53); a
  value exactly on a bound is written without trailing fraction zeros;
* formats: ``date`` is ``YYYY-MM-DD`` with years 1000-9999, months 01-12 and days valid for the
  month (February up to 28); ``time`` is ``HH:MM:SS[.ffffff]`` with ``Z`` or a ``+HH:MM`` offset
  (no leap second); ``date-time`` joins them with ``T``; ``uuid`` is lowercase 8-4-4-4-12 hex;
  ``email`` is ``atom(.atom){0,2}@label.{1,3}tld`` with short ASCII atoms and labels;
* a schema without ``type`` takes the types its keywords bear on (any JSON value if none); an
  object with declared properties never gets undeclared ones, and ``additionalProperties``
  absent counts as false there;
* free-form values (``{}``, ``true``, objects without properties) use plain JSON numbers of the
  same shape (``-``, up to 15 integer digits, up to 6 fraction digits);
* whitespace between tokens is optional and bounded (a space or newline plus at most 16 blanks),
  so a small model cannot loop on spaces.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from decimal import Decimal
from typing import Any
from urllib.parse import unquote

from ..errors import SchemaNotSupportedError
from .gbnf import (
    _FORMATS,
    _INT_FORMATS,
    DEFAULT_FRACTION_DIGITS,
    _alt,
    _fail,
    _literal,
    _pointer,
    _Rules,
    _seq,
)
from .numeric_grammar import (
    _Bound,
    _DecimalRange,
    _digits,
    _number_bounds,
)
from .schema_facts import (
    _ARRAY_KEYWORDS,
    _NUMBER_KEYWORDS,
    _OBJECT_KEYWORDS,
    _STRING_KEYWORDS,
    _TRIVIAL_PATTERNS,
    _TYPES,
    _UNSUPPORTED,
    _VALIDATION,
    _canonical,
    _dump,
    _has_type,
    _json_kind,
    _non_negative_int,
)

__all__ = ["any_json_gbnf", "json_object_gbnf", "schema_to_gbnf"]

# -- the converter -------------------------------------------------------------------------------


class _Converter:
    def __init__(self, root: Mapping[str, Any] | bool, rules: _Rules | None = None) -> None:
        self._root = root
        self.rules = _Rules() if rules is None else rules
        self._ref_rules: dict[str, str] = {}
        # $ref targets entered since the output last consumed a character (left recursion guard)
        self._unconsumed: list[str] = []

    @contextmanager
    def _consumed(self) -> Iterator[None]:
        saved, self._unconsumed = self._unconsumed, []
        try:
            yield
        finally:
            self._unconsumed = saved

    # -- entry ---------------------------------------------------------------------------------

    def visit(self, schema: Any, path: str, hint: str) -> str:
        """The rule name for the values ``schema`` accepts (a subset of them)."""
        if schema is True:
            return self.rules.fixed("json-value")
        if schema is False:
            raise _fail("the schema false accepts no value", path)
        if not isinstance(schema, Mapping):
            raise _fail("a schema must be an object or a boolean", path)
        for key in schema:
            if key in _UNSUPPORTED:
                raise _fail(f"'{key}' is not supported", _pointer(path, key))
        if path != "#" and "$id" in schema:
            raise _fail("'$id' inside a schema is not supported", _pointer(path, "$id"))
        if "$ref" in schema:
            return self._ref(schema, path, hint)
        if "allOf" in schema:
            return self._all_of(schema, path, hint)
        if "anyOf" in schema or "oneOf" in schema:
            return self._any_of(schema, path, hint)
        if "enum" in schema or "const" in schema:
            return self._enum(schema, path, hint)
        branches = [self._typed(t, schema, path, hint) for t in self._types(schema, path)]
        return self.rules.add(hint, _alt(branches))

    def _only(self, schema: Mapping[str, Any], path: str, allowed: set[str], where: str) -> None:
        for key in schema:
            if key in _VALIDATION and key not in allowed:
                raise _fail(f"'{key}' next to '{where}' is not supported", _pointer(path, key))

    # -- references and combinators -------------------------------------------------------------

    def _resolve(self, ref: Any, path: str) -> tuple[str, Any]:
        where = _pointer(path, "$ref")
        if not isinstance(ref, str) or not ref.startswith("#"):
            raise _fail("only local references ('#...') are supported", where)
        fragment = unquote(ref[1:])
        if fragment and not fragment.startswith("/"):
            raise _fail("anchor references are not supported", where)
        node: Any = self._root
        target = "#"
        for raw in fragment.split("/")[1:] if fragment else []:
            segment = raw.replace("~1", "/").replace("~0", "~")
            if isinstance(node, Mapping) and segment in node:
                node = node[segment]
            elif isinstance(node, list) and segment.isdigit() and int(segment) < len(node):
                node = node[int(segment)]
            else:
                raise _fail(f"cannot resolve {ref!r}", where)
            target = _pointer(target, segment)
        return target, node

    def _ref(self, schema: Mapping[str, Any], path: str, hint: str) -> str:
        self._only(schema, path, {"$ref"}, "$ref")
        target, node = self._resolve(schema["$ref"], path)
        if target in self._unconsumed:
            raise _fail(
                "a $ref cycle that produces no output (left recursion)", _pointer(path, "$ref")
            )
        name = self._ref_rules.get(target)
        if name is not None:
            return name
        segments = target.split("/")
        name = self.rules.reserve(segments[-1] if len(segments) > 1 else "schema")
        self._ref_rules[target] = name
        self._unconsumed.append(target)
        try:
            self.rules.define(name, self.visit(node, target, segments[-1]))
        finally:
            self._unconsumed.pop()
        return name

    def _all_of(self, schema: Mapping[str, Any], path: str, hint: str) -> str:
        self._only(schema, path, {"allOf"}, "allOf")
        members = schema["allOf"]
        if not isinstance(members, list) or not members:
            raise _fail("'allOf' must be a non-empty list", _pointer(path, "allOf"))
        constraining = [
            i
            for i, member in enumerate(members)
            if member is False
            or (isinstance(member, Mapping) and any(k in _VALIDATION for k in member))
            or not isinstance(member, Mapping | bool)
        ]
        if len(constraining) > 1:
            raise _fail(
                "'allOf' with more than one constraining member is not supported",
                _pointer(path, "allOf"),
            )
        index = constraining[0] if constraining else 0
        return self.visit(members[index], _pointer(path, "allOf", index), hint)

    def _any_of(self, schema: Mapping[str, Any], path: str, hint: str) -> str:
        keyword = "anyOf" if "anyOf" in schema else "oneOf"
        self._only(schema, path, {keyword}, keyword)
        branches = schema[keyword]
        where = _pointer(path, keyword)
        if not isinstance(branches, list) or not branches:
            raise _fail(f"'{keyword}' must be a non-empty list", where)
        if keyword == "oneOf":
            self._check_exclusive(branches, where)
        names = [
            self.visit(branch, _pointer(where, i), f"{hint}-{i}")
            for i, branch in enumerate(branches)
        ]
        return self.rules.add(hint, _alt(names))

    def _enum(self, schema: Mapping[str, Any], path: str, hint: str) -> str:
        self._only(schema, path, {"enum", "const", "type"}, "enum" if "enum" in schema else "const")
        if "enum" in schema:
            values = schema["enum"]
            if not isinstance(values, list) or not values:
                raise _fail("'enum' must be a non-empty list", _pointer(path, "enum"))
            if "const" in schema:
                wanted = _canonical(schema["const"])
                values = [v for v in values if _canonical(v) == wanted]
        else:
            values = [schema["const"]]
        if "type" in schema:
            types = self._types(schema, path)
            values = [v for v in values if any(_has_type(v, t) for t in types)]
        where = _pointer(path, "enum" if "enum" in schema else "const")
        literals = [_literal(_dump(v, where)) for v in values]
        if not literals:
            raise _fail("no value of 'enum' / 'const' satisfies the schema", where)
        return self.rules.add(hint, _alt(literals))

    def _check_exclusive(self, branches: list[Any], where: str) -> None:
        infos = [self._summary(branch, set()) for branch in branches]
        for i, a in enumerate(infos):
            for j in range(i + 1, len(infos)):
                if not _disjoint(a, infos[j]):
                    raise _fail(
                        f"'oneOf' branches {i} and {j} may overlap (only provably exclusive "
                        "branches are supported)",
                        where,
                    )

    def _summary(self, schema: Any, seen: set[str]) -> _Summary:
        """What a schema accepts, as far as exclusivity checks need it."""
        if schema is True or not isinstance(schema, Mapping):
            return _Summary(None, None, {})
        if "$ref" in schema:
            try:
                target, node = self._resolve(schema["$ref"], "#")
            except SchemaNotSupportedError:
                return _Summary(None, None, {})
            if target in seen:
                return _Summary(None, None, {})
            return self._summary(node, seen | {target})
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
            values = frozenset(_canonical(v) for v in literal)
            literal_kinds = frozenset(_json_kind(v) for v in literal)
            kinds = literal_kinds if kinds is None else kinds & literal_kinds
        for keyword in ("anyOf", "oneOf"):
            if isinstance(schema.get(keyword), list):
                parts = [self._summary(b, seen) for b in schema[keyword]]
                if all(p.kinds is not None for p in parts):
                    union = frozenset().union(*(p.kinds or frozenset() for p in parts))
                    kinds = union if kinds is None else kinds & union
        if isinstance(schema.get("allOf"), list):
            for member in schema["allOf"]:
                part = self._summary(member, seen)
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
                    part = self._summary(properties[name], seen)
                    if part.values is not None:
                        discriminators[name] = part.values
        return _Summary(kinds, values, discriminators)

    # -- types ---------------------------------------------------------------------------------

    def _types(self, schema: Mapping[str, Any], path: str) -> list[str]:
        declared = schema.get("type")
        if declared is None:
            keys = set(schema)
            inferred = [
                t
                for t, family in (
                    ("object", _OBJECT_KEYWORDS),
                    ("array", _ARRAY_KEYWORDS),
                    ("string", _STRING_KEYWORDS),
                    ("number", _NUMBER_KEYWORDS),
                )
                if keys & family
            ]
            return inferred or ["any"]
        names = declared if isinstance(declared, list) else [declared]
        if not names or any(n not in _TYPES for n in names) or len(set(names)) != len(names):
            raise _fail(f"invalid 'type' {declared!r}", _pointer(path, "type"))
        return list(names)

    def _typed(self, type_name: str, schema: Mapping[str, Any], path: str, hint: str) -> str:
        if type_name == "any":
            return self.rules.fixed("json-value")
        if type_name in ("boolean", "null"):
            return self.rules.fixed(type_name)
        if type_name == "string":
            return self._string(schema, path)
        if type_name in ("integer", "number"):
            return self._number(schema, path, integer=type_name == "integer")
        with self._consumed():
            if type_name == "object":
                return self._object(schema, path, hint)
            return self._array(schema, path, hint)

    def _string(self, schema: Mapping[str, Any], path: str) -> str:
        low = _non_negative_int(schema, "minLength", path) or 0
        high = _non_negative_int(schema, "maxLength", path)
        if high is not None and high < low:
            raise _fail("'maxLength' is below 'minLength'", _pointer(path, "maxLength"))
        pattern = schema.get("pattern")
        if pattern is not None and not (isinstance(pattern, str) and pattern in _TRIVIAL_PATTERNS):
            raise _fail("'pattern' is not supported", _pointer(path, "pattern"))
        quote = _literal('"')
        fmt = schema.get("format")
        if fmt is not None:
            if not isinstance(fmt, str) or fmt not in _FORMATS:
                raise _fail(f"string format {fmt!r} is not supported", _pointer(path, "format"))
            rule, shortest, longest = _FORMATS[fmt]
            if shortest < low or (high is not None and longest > high):
                raise _fail(
                    f"format {fmt!r} with 'minLength' / 'maxLength' other than "
                    f"{shortest}..{longest} is not supported",
                    _pointer(path, "format"),
                )
            return self.rules.add(f"string-{fmt}", _seq(quote, self.rules.fixed(rule), quote))
        char = self.rules.fixed("json-char")
        if low == 0 and high is None:
            return self.rules.fixed("json-string")
        body = _seq(quote, self.rules.repeat(char, low, high), quote)
        return self.rules.add(f"string-{low}-{'' if high is None else high}", body)

    def _number(self, schema: Mapping[str, Any], path: str, *, integer: bool) -> str:
        if "multipleOf" in schema:
            step = schema["multipleOf"]
            if isinstance(step, bool) or not isinstance(step, int | float) or step != 1:
                raise _fail(
                    "'multipleOf' other than 1 is not supported", _pointer(path, "multipleOf")
                )
            integer = True
        low, high = _number_bounds(schema, path)
        fmt = schema.get("format")
        if integer and isinstance(fmt, str) and fmt in _INT_FORMATS:
            bits = _INT_FORMATS[fmt]
            low = max(
                [b for b in (low, _Bound(Decimal(-(2**bits)), False)) if b is not None],
                key=lambda b: (b.value, b.exclusive),
            )
            high = min(
                [b for b in (high, _Bound(Decimal(2**bits - 1), False)) if b is not None],
                key=lambda b: (b.value, not b.exclusive),
            )
        needed = max(
            (len(_digits(abs(b.value))[1]) + 1 for b in (low, high) if b is not None), default=0
        )
        builder = _DecimalRange(
            self.rules, integer=integer, fraction_digits=max(DEFAULT_FRACTION_DIGITS, needed)
        )
        expr = builder.expression(low, high)
        if expr is None:
            raise _fail(
                f"no {'integer' if integer else 'number'} within the bounds can be generated",
                path,
            )
        name = "integer" if integer else "number"
        parts = [f"{'ge' if not b.exclusive else 'gt'}-{b.value}" for b in (low,) if b]
        parts += [f"{'le' if not b.exclusive else 'lt'}-{b.value}" for b in (high,) if b]
        return self.rules.add("-".join([name, *parts]), expr)

    def _object(self, schema: Mapping[str, Any], path: str, hint: str) -> str:
        ws = self.rules.fixed("ws")
        properties = schema.get("properties", {})
        if not isinstance(properties, Mapping):
            raise _fail("'properties' must be an object", _pointer(path, "properties"))
        required = schema.get("required", [])
        if not isinstance(required, list) or not all(isinstance(r, str) for r in required):
            raise _fail("'required' must be a list of strings", _pointer(path, "required"))
        extra = schema.get("additionalProperties", True)
        if not isinstance(extra, bool | Mapping):
            raise _fail(
                "'additionalProperties' must be a boolean or a schema",
                _pointer(path, "additionalProperties"),
            )
        entries: list[tuple[str, Any, str, bool]] = []  # name, schema, path, required
        for name, sub in properties.items():
            is_required = name in required
            if sub is False and not is_required:
                continue  # may not appear: never emitted
            entries.append((name, sub, _pointer(path, "properties", name), is_required))
        for name in dict.fromkeys(required):
            if name not in properties:
                if extra is False:
                    raise _fail(
                        f"required property {name!r} is not allowed by 'additionalProperties'",
                        _pointer(path, "required"),
                    )
                entries.append((name, extra, _pointer(path, "additionalProperties"), True))
        free_form = not properties and not required and extra is not False
        n_required = len(dict.fromkeys(required))
        min_props = _non_negative_int(schema, "minProperties", path)
        max_props = _non_negative_int(schema, "maxProperties", path)
        if min_props is not None and min_props > (0 if free_form else n_required):
            raise _fail(
                "'minProperties' above the number of required properties is not supported",
                _pointer(path, "minProperties"),
            )
        if max_props is not None and (free_form or max_props < len(entries)):
            raise _fail(
                "'maxProperties' below the number of declared properties is not supported",
                _pointer(path, "maxProperties"),
            )
        open_brace, close_brace = _literal("{"), _literal("}")
        if free_form:
            if extra is True:
                return self.rules.fixed("json-object")
            value = self.visit(extra, _pointer(path, "additionalProperties"), f"{hint}-value")
            member = self.rules.add(
                f"{hint}-member",
                _seq(self.rules.fixed("json-string"), ws, _literal(":"), ws, value, ws),
            )
            body = _seq(
                open_brace, ws, f"({member} ({_literal(',')} {ws} {member})*)?", close_brace
            )
            return self.rules.add(hint, body)
        if not entries:
            return self.rules.add("empty-object", _seq(open_brace, ws, close_brace))
        pairs: list[tuple[str, bool]] = []
        for name, sub, sub_path, is_required in entries:
            value = self.visit(sub, sub_path, f"{hint}-{name}")
            key = _literal(json.dumps(name, ensure_ascii=False))
            kv = self.rules.add(f"{hint}-{name}-kv", _seq(key, ws, _literal(":"), ws, value, ws))
            pairs.append((kv, is_required))
        comma = _literal(",")
        first_required = next((i for i, (_, r) in enumerate(pairs) if r), None)
        last_start = len(pairs) - 1 if first_required is None else first_required

        def item(i: int) -> str:
            kv, is_required = pairs[i]
            return _seq(comma, ws, kv) if is_required else f"({comma} {ws} {kv})?"

        def after(i: int) -> str:
            """What may follow once some property before ``i`` was written."""
            if i >= len(pairs):
                return ""
            if i > last_start:
                return _seq(*(item(j) for j in range(i, len(pairs))))
            return self.rules.add(f"{hint}-after-{i}", _seq(item(i), after(i + 1)))

        starts = [_seq(pairs[i][0], after(i + 1)) for i in range(last_start + 1)]
        if first_required is None:
            starts.append("")
        return self.rules.add(hint, _seq(open_brace, ws, _alt(starts), close_brace))

    def _array(self, schema: Mapping[str, Any], path: str, hint: str) -> str:
        ws = self.rules.fixed("ws")
        low = _non_negative_int(schema, "minItems", path) or 0
        high = _non_negative_int(schema, "maxItems", path)
        if high is not None and high < low:
            raise _fail("'maxItems' is below 'minItems'", _pointer(path, "maxItems"))
        items: Any = schema.get("items", True)
        prefix: list[Any] = []
        prefix_key = "prefixItems"
        rest_path = _pointer(path, "items")
        if isinstance(items, list):  # draft 7 tuple form
            prefix, prefix_key = items, "items"
            items = schema.get("additionalItems", True)
            rest_path = _pointer(path, "additionalItems")
        elif "prefixItems" in schema:
            prefix = schema["prefixItems"]
            if not isinstance(prefix, list):
                raise _fail("'prefixItems' must be a list", _pointer(path, "prefixItems"))
        if items is False:
            high = len(prefix) if high is None else min(high, len(prefix))
            if high < low:
                raise _fail(
                    "'minItems' needs more items than the schema allows", _pointer(path, "minItems")
                )
        if schema.get("uniqueItems", False) is not False and (high is None or high > 1):
            raise _fail("'uniqueItems' is not supported", _pointer(path, "uniqueItems"))
        open_bracket, close_bracket = _literal("["), _literal("]")
        if high == 0:
            return self.rules.add("empty-array", _seq(open_bracket, ws, close_bracket))
        comma = _literal(",")
        k = len(prefix) if high is None else min(len(prefix), high)
        elements = [
            self.visit(prefix[i], _pointer(path, prefix_key, i), f"{hint}-{i}") for i in range(k)
        ]
        rest = ""
        rest_low = max(low - k, 0)
        rest_high = None if high is None else high - k
        if rest_high != 0 and items is not False:
            element = self.visit(items, rest_path, f"{hint}-item")
            if k == 0:
                more = self.rules.add(f"{hint}-more", _seq(comma, ws, element, ws))
                high_more = None if rest_high is None else rest_high - 1
                first = _seq(element, ws, self.rules.repeat(more, max(rest_low - 1, 0), high_more))
                body = _seq(open_bracket, ws, first if low > 0 else f"({first})?", close_bracket)
                return self.rules.add(hint, body)
            more = self.rules.add(f"{hint}-more", _seq(comma, ws, element, ws))
            rest = self.rules.repeat(more, rest_low, rest_high)

        def after(i: int) -> str:
            """Elements from ``i`` on (``i >= 1``: each starts with a comma)."""
            if i == k:
                return rest
            entry = _seq(comma, ws, elements[i], ws, after(i + 1))
            return entry if i < low else f"({entry})?"

        first = _seq(elements[0], ws, after(1))
        return self.rules.add(
            hint, _seq(open_bracket, ws, first if low > 0 else f"({first})?", close_bracket)
        )


@dataclass(frozen=True)
class _Summary:
    kinds: frozenset[str] | None  # JSON kinds accepted (integer folded into number); None: any
    values: frozenset[Any] | None  # the only accepted values (canonical), when finite
    discriminators: dict[str, frozenset[Any]]  # required property -> its finite values


def _disjoint(a: _Summary, b: _Summary) -> bool:
    if a.kinds is not None and b.kinds is not None and not a.kinds & b.kinds:
        return True
    if a.values is not None and b.values is not None and not a.values & b.values:
        return True
    return any(
        name in b.discriminators and not values & b.discriminators[name]
        for name, values in a.discriminators.items()
    )


# -- public API ----------------------------------------------------------------------------------


def schema_to_gbnf(schema: Mapping[str, Any] | bool) -> str:
    """A GBNF grammar (root rule ``root``) accepting only JSON documents valid under ``schema``.

    Raises:
        SchemaNotSupportedError: a part of the schema cannot be expressed; ``path`` names it.
    """
    converter = _Converter(schema)
    root = converter.visit(schema, "#", "root-value")
    return converter.rules.render(root)


def schema_rule(rules: _Rules, schema: Mapping[str, Any] | bool, hint: str) -> str:
    """Add the rules for ``schema`` to ``rules`` (a grammar being assembled) and name its rule.

    ``$ref`` pointers resolve against ``schema`` itself, so several schemas can share one
    grammar (the arguments of several tools). Raises ``SchemaNotSupportedError`` as
    :func:`schema_to_gbnf` does.
    """
    return _Converter(schema, rules).visit(schema, "#", hint)


def json_object_gbnf() -> str:
    """A grammar for any JSON object (JSON mode)."""
    rules = _Rules()
    return rules.render(rules.fixed("json-object"))


def any_json_gbnf() -> str:
    """A grammar for any JSON value."""
    rules = _Rules()
    return rules.render(rules.fixed("json-value"))
