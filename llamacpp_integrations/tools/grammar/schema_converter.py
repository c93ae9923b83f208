"""The walk over a JSON Schema that writes its grammar, and the grammar entry points.

One :class:`_Converter` visit per schema node returns the name of a rule accepting (a subset of)
the values the node accepts. Keywords are dispatched here; numeric bounds are written by
:mod:`.numeric_ranges`, ``oneOf`` exclusivity is proved by :mod:`.exclusive_branches`, and what
keywords mean comes from :mod:`.schema_keywords`. What is supported, and how it is narrowed, is
documented on the package (:mod:`llamacpp_integrations.tools.grammar`).
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import Any
from urllib.parse import unquote

from .exclusive_branches import check_exclusive
from .gbnf import GrammarRules, alt, literal, seq
from .numeric_ranges import number_rule
from .regex_pattern import pattern_rule
from .schema_keywords import (
    ARRAY_KEYWORDS,
    NUMBER_KEYWORDS,
    OBJECT_KEYWORDS,
    STRING_KEYWORDS,
    TRIVIAL_PATTERNS,
    TYPES,
    UNSUPPORTED_KEYWORDS,
    VALIDATION_KEYWORDS,
    canonical,
    dump_json,
    has_type,
    non_negative_int,
    not_supported,
    pointer,
)
from .string_formats import STRING_FORMATS

__all__ = ["any_json_gbnf", "json_object_gbnf", "schema_rule", "schema_to_gbnf"]


class _Converter:
    """Writes the rules for one root schema (which its ``$ref`` pointers resolve against)."""

    def __init__(self, root: Mapping[str, Any] | bool, rules: GrammarRules | None = None) -> None:
        self._root = root
        self.rules = GrammarRules() if rules is None else rules
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
            raise not_supported("the schema false accepts no value", path)
        if not isinstance(schema, Mapping):
            raise not_supported("a schema must be an object or a boolean", path)
        for key in schema:
            if key in UNSUPPORTED_KEYWORDS:
                raise not_supported(f"'{key}' is not supported", pointer(path, key))
        if path != "#" and "$id" in schema:
            raise not_supported("'$id' inside a schema is not supported", pointer(path, "$id"))
        if "$ref" in schema:
            return self._ref(schema, path, hint)
        if "allOf" in schema:
            return self._all_of(schema, path, hint)
        if "anyOf" in schema or "oneOf" in schema:
            return self._any_of(schema, path, hint)
        if "enum" in schema or "const" in schema:
            return self._enum(schema, path, hint)
        branches = [self._typed(t, schema, path, hint) for t in self._types(schema, path)]
        return self.rules.add(hint, alt(branches))

    def _only(self, schema: Mapping[str, Any], path: str, allowed: set[str], where: str) -> None:
        for key in schema:
            if key in VALIDATION_KEYWORDS and key not in allowed:
                raise not_supported(
                    f"'{key}' next to '{where}' is not supported", pointer(path, key)
                )

    # -- references and combinators -------------------------------------------------------------

    def _resolve(self, ref: Any, path: str) -> tuple[str, Any]:
        where = pointer(path, "$ref")
        if not isinstance(ref, str) or not ref.startswith("#"):
            raise not_supported("only local references ('#...') are supported", where)
        fragment = unquote(ref[1:])
        if fragment and not fragment.startswith("/"):
            raise not_supported("anchor references are not supported", where)
        node: Any = self._root
        target = "#"
        for raw in fragment.split("/")[1:] if fragment else []:
            segment = raw.replace("~1", "/").replace("~0", "~")
            if isinstance(node, Mapping) and segment in node:
                node = node[segment]
            elif isinstance(node, list) and segment.isdigit() and int(segment) < len(node):
                node = node[int(segment)]
            else:
                raise not_supported(f"cannot resolve {ref!r}", where)
            target = pointer(target, segment)
        return target, node

    def _ref(self, schema: Mapping[str, Any], path: str, hint: str) -> str:
        self._only(schema, path, {"$ref"}, "$ref")
        target, node = self._resolve(schema["$ref"], path)
        if target in self._unconsumed:
            raise not_supported(
                "a $ref cycle that produces no output (left recursion)", pointer(path, "$ref")
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
            raise not_supported("'allOf' must be a non-empty list", pointer(path, "allOf"))
        constraining = [
            i
            for i, member in enumerate(members)
            if member is False
            or (isinstance(member, Mapping) and any(k in VALIDATION_KEYWORDS for k in member))
            or not isinstance(member, Mapping | bool)
        ]
        if len(constraining) > 1:
            raise not_supported(
                "'allOf' with more than one constraining member is not supported",
                pointer(path, "allOf"),
            )
        index = constraining[0] if constraining else 0
        return self.visit(members[index], pointer(path, "allOf", index), hint)

    def _any_of(self, schema: Mapping[str, Any], path: str, hint: str) -> str:
        keyword = "anyOf" if "anyOf" in schema else "oneOf"
        self._only(schema, path, {keyword}, keyword)
        branches = schema[keyword]
        where = pointer(path, keyword)
        if not isinstance(branches, list) or not branches:
            raise not_supported(f"'{keyword}' must be a non-empty list", where)
        if keyword == "oneOf":
            check_exclusive(branches, where, lambda ref: self._resolve(ref, "#"))
        names = [
            self.visit(branch, pointer(where, i), f"{hint}-{i}")
            for i, branch in enumerate(branches)
        ]
        return self.rules.add(hint, alt(names))

    def _enum(self, schema: Mapping[str, Any], path: str, hint: str) -> str:
        self._only(schema, path, {"enum", "const", "type"}, "enum" if "enum" in schema else "const")
        if "enum" in schema:
            values = schema["enum"]
            if not isinstance(values, list) or not values:
                raise not_supported("'enum' must be a non-empty list", pointer(path, "enum"))
            if "const" in schema:
                wanted = canonical(schema["const"])
                values = [v for v in values if canonical(v) == wanted]
        else:
            values = [schema["const"]]
        if "type" in schema:
            types = self._types(schema, path)
            values = [v for v in values if any(has_type(v, t) for t in types)]
        where = pointer(path, "enum" if "enum" in schema else "const")
        literals = [literal(dump_json(v, where)) for v in values]
        if not literals:
            raise not_supported("no value of 'enum' / 'const' satisfies the schema", where)
        return self.rules.add(hint, alt(literals))

    # -- types ---------------------------------------------------------------------------------

    def _types(self, schema: Mapping[str, Any], path: str) -> list[str]:
        declared = schema.get("type")
        if declared is None:
            keys = set(schema)
            inferred = [
                t
                for t, family in (
                    ("object", OBJECT_KEYWORDS),
                    ("array", ARRAY_KEYWORDS),
                    ("string", STRING_KEYWORDS),
                    ("number", NUMBER_KEYWORDS),
                )
                if keys & family
            ]
            return inferred or ["any"]
        names = declared if isinstance(declared, list) else [declared]
        if not names or any(n not in TYPES for n in names) or len(set(names)) != len(names):
            raise not_supported(f"invalid 'type' {declared!r}", pointer(path, "type"))
        return list(names)

    def _typed(self, type_name: str, schema: Mapping[str, Any], path: str, hint: str) -> str:
        if type_name == "any":
            return self.rules.fixed("json-value")
        if type_name in ("boolean", "null"):
            return self.rules.fixed(type_name)
        if type_name == "string":
            return self._string(schema, path)
        if type_name in ("integer", "number"):
            return number_rule(self.rules, schema, path, integer=type_name == "integer")
        with self._consumed():
            if type_name == "object":
                return self._object(schema, path, hint)
            return self._array(schema, path, hint)

    def _string(self, schema: Mapping[str, Any], path: str) -> str:
        low = non_negative_int(schema, "minLength", path) or 0
        high = non_negative_int(schema, "maxLength", path)
        if high is not None and high < low:
            raise not_supported("'maxLength' is below 'minLength'", pointer(path, "maxLength"))
        pattern = schema.get("pattern")
        fmt = schema.get("format")
        if pattern is not None and not (isinstance(pattern, str) and pattern in TRIVIAL_PATTERNS):
            if fmt is not None:
                raise not_supported(
                    "'pattern' next to 'format' is not supported", pointer(path, "pattern")
                )
            return pattern_rule(self.rules, pattern, path, low, high)
        quote = literal('"')
        if fmt is not None:
            if not isinstance(fmt, str) or fmt not in STRING_FORMATS:
                raise not_supported(
                    f"string format {fmt!r} is not supported", pointer(path, "format")
                )
            rule, shortest, longest = STRING_FORMATS[fmt]
            if shortest < low or (high is not None and longest > high):
                raise not_supported(
                    f"format {fmt!r} with 'minLength' / 'maxLength' other than "
                    f"{shortest}..{longest} is not supported",
                    pointer(path, "format"),
                )
            return self.rules.add(f"string-{fmt}", seq(quote, self.rules.fixed(rule), quote))
        char = self.rules.fixed("json-char")
        if low == 0 and high is None:
            return self.rules.fixed("json-string")
        body = seq(quote, self.rules.repeat(char, low, high), quote)
        return self.rules.add(f"string-{low}-{'' if high is None else high}", body)

    def _object(self, schema: Mapping[str, Any], path: str, hint: str) -> str:
        ws = self.rules.fixed("ws")
        properties = schema.get("properties", {})
        if not isinstance(properties, Mapping):
            raise not_supported("'properties' must be an object", pointer(path, "properties"))
        required = schema.get("required", [])
        if not isinstance(required, list) or not all(isinstance(r, str) for r in required):
            raise not_supported("'required' must be a list of strings", pointer(path, "required"))
        extra = schema.get("additionalProperties", True)
        if not isinstance(extra, bool | Mapping):
            raise not_supported(
                "'additionalProperties' must be a boolean or a schema",
                pointer(path, "additionalProperties"),
            )
        entries: list[tuple[str, Any, str, bool]] = []  # name, schema, path, required
        for name, sub in properties.items():
            is_required = name in required
            if sub is False and not is_required:
                continue  # may not appear: never emitted
            entries.append((name, sub, pointer(path, "properties", name), is_required))
        for name in dict.fromkeys(required):
            if name not in properties:
                if extra is False:
                    raise not_supported(
                        f"required property {name!r} is not allowed by 'additionalProperties'",
                        pointer(path, "required"),
                    )
                entries.append((name, extra, pointer(path, "additionalProperties"), True))
        free_form = not properties and not required and extra is not False
        n_required = len(dict.fromkeys(required))
        min_props = non_negative_int(schema, "minProperties", path)
        max_props = non_negative_int(schema, "maxProperties", path)
        if min_props is not None and min_props > (0 if free_form else n_required):
            raise not_supported(
                "'minProperties' above the number of required properties is not supported",
                pointer(path, "minProperties"),
            )
        if max_props is not None and (free_form or max_props < len(entries)):
            raise not_supported(
                "'maxProperties' below the number of declared properties is not supported",
                pointer(path, "maxProperties"),
            )
        open_brace, close_brace = literal("{"), literal("}")
        if free_form:
            if extra is True:
                return self.rules.fixed("json-object")
            value = self.visit(extra, pointer(path, "additionalProperties"), f"{hint}-value")
            member = self.rules.add(
                f"{hint}-member",
                seq(self.rules.fixed("json-string"), ws, literal(":"), ws, value, ws),
            )
            body = seq(open_brace, ws, f"({member} ({literal(',')} {ws} {member})*)?", close_brace)
            return self.rules.add(hint, body)
        if not entries:
            return self.rules.add("empty-object", seq(open_brace, ws, close_brace))
        pairs: list[tuple[str, bool]] = []
        for name, sub, sub_path, is_required in entries:
            value = self.visit(sub, sub_path, f"{hint}-{name}")
            key = literal(json.dumps(name, ensure_ascii=False))
            kv = self.rules.add(f"{hint}-{name}-kv", seq(key, ws, literal(":"), ws, value, ws))
            pairs.append((kv, is_required))
        comma = literal(",")
        first_required = next((i for i, (_, r) in enumerate(pairs) if r), None)
        last_start = len(pairs) - 1 if first_required is None else first_required

        def item(i: int) -> str:
            kv, is_required = pairs[i]
            return seq(comma, ws, kv) if is_required else f"({comma} {ws} {kv})?"

        def after(i: int) -> str:
            """What may follow once some property before ``i`` was written."""
            if i >= len(pairs):
                return ""
            if i > last_start:
                return seq(*(item(j) for j in range(i, len(pairs))))
            return self.rules.add(f"{hint}-after-{i}", seq(item(i), after(i + 1)))

        starts = [seq(pairs[i][0], after(i + 1)) for i in range(last_start + 1)]
        if first_required is None:
            starts.append("")
        return self.rules.add(hint, seq(open_brace, ws, alt(starts), close_brace))

    def _array(self, schema: Mapping[str, Any], path: str, hint: str) -> str:
        ws = self.rules.fixed("ws")
        low = non_negative_int(schema, "minItems", path) or 0
        high = non_negative_int(schema, "maxItems", path)
        if high is not None and high < low:
            raise not_supported("'maxItems' is below 'minItems'", pointer(path, "maxItems"))
        items: Any = schema.get("items", True)
        prefix: list[Any] = []
        prefix_key = "prefixItems"
        rest_path = pointer(path, "items")
        if isinstance(items, list):  # draft 7 tuple form
            prefix, prefix_key = items, "items"
            items = schema.get("additionalItems", True)
            rest_path = pointer(path, "additionalItems")
        elif "prefixItems" in schema:
            prefix = schema["prefixItems"]
            if not isinstance(prefix, list):
                raise not_supported("'prefixItems' must be a list", pointer(path, "prefixItems"))
        if items is False:
            high = len(prefix) if high is None else min(high, len(prefix))
            if high < low:
                raise not_supported(
                    "'minItems' needs more items than the schema allows", pointer(path, "minItems")
                )
        if schema.get("uniqueItems", False) is not False and (high is None or high > 1):
            raise not_supported("'uniqueItems' is not supported", pointer(path, "uniqueItems"))
        open_bracket, close_bracket = literal("["), literal("]")
        if high == 0:
            return self.rules.add("empty-array", seq(open_bracket, ws, close_bracket))
        comma = literal(",")
        k = len(prefix) if high is None else min(len(prefix), high)
        elements = [
            self.visit(prefix[i], pointer(path, prefix_key, i), f"{hint}-{i}") for i in range(k)
        ]
        rest = ""
        rest_low = max(low - k, 0)
        rest_high = None if high is None else high - k
        if rest_high != 0 and items is not False:
            element = self.visit(items, rest_path, f"{hint}-item")
            if k == 0:
                more = self.rules.add(f"{hint}-more", seq(comma, ws, element, ws))
                high_more = None if rest_high is None else rest_high - 1
                first = seq(element, ws, self.rules.repeat(more, max(rest_low - 1, 0), high_more))
                body = seq(open_bracket, ws, first if low > 0 else f"({first})?", close_bracket)
                return self.rules.add(hint, body)
            more = self.rules.add(f"{hint}-more", seq(comma, ws, element, ws))
            rest = self.rules.repeat(more, rest_low, rest_high)

        def after(i: int) -> str:
            """Elements from ``i`` on (``i >= 1``: each starts with a comma)."""
            if i == k:
                return rest
            entry = seq(comma, ws, elements[i], ws, after(i + 1))
            return entry if i < low else f"({entry})?"

        first = seq(elements[0], ws, after(1))
        return self.rules.add(
            hint, seq(open_bracket, ws, first if low > 0 else f"({first})?", close_bracket)
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


def schema_rule(rules: GrammarRules, schema: Mapping[str, Any] | bool, hint: str) -> str:
    """Add the rules for ``schema`` to ``rules`` (a grammar being assembled) and name its rule.

    ``$ref`` pointers resolve against ``schema`` itself, so several schemas can share one
    grammar (the arguments of several tools). Raises ``SchemaNotSupportedError`` as
    :func:`schema_to_gbnf` does.
    """
    return _Converter(schema, rules).visit(schema, "#", hint)


def json_object_gbnf() -> str:
    """A grammar for any JSON object (JSON mode)."""
    rules = GrammarRules()
    return rules.render(rules.fixed("json-object"))


def any_json_gbnf() -> str:
    """A grammar for any JSON value."""
    rules = GrammarRules()
    return rules.render(rules.fixed("json-value"))
