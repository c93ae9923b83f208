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
import math
import re
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from decimal import Decimal
from typing import Any
from urllib.parse import unquote

from ..errors import SchemaNotSupportedError

__all__ = ["any_json_gbnf", "json_object_gbnf", "schema_to_gbnf"]

# Longest unbounded integer part (below 2**53, so JavaScript reads it exactly too).
MAX_INT_DIGITS = 15
# Significant digits of a generated number: decimals of at most 15 digits round-trip through
# IEEE doubles, so a value strictly above an exclusive bound never parses to the bound itself.
MAX_SIGNIFICANT_DIGITS = 15
# Fraction digits of a generated number when the bounds do not need more.
DEFAULT_FRACTION_DIGITS = 6
# Largest repetition count written as one ``{m,n}``: llama.cpp refuses counts above 2000 and
# products of counts and repeated-rule size at or above 2000, so longer runs nest helper rules.
_REPEAT_LIMIT = 1000
# Blanks allowed after the space / newline between two tokens.
_WS_BLANKS = 16

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

# -- fixed rules ---------------------------------------------------------------------------------

_HEX = "[0-9a-fA-F]"
_PRIMITIVES: dict[str, str] = {
    "ws": f"([ \\n] [ \\t]{{0,{_WS_BLANKS}}})?",
    # One character of a JSON string: no raw control character, quote or backslash; escapes of
    # any kind except UTF-16 surrogates (a pair would be two escapes but one character).
    "json-char": (
        r'[^"\\\x00-\x1F] | "\\" (["\\/bfnrt] | "u" ([0-9a-cA-CefEF] '
        + _HEX
        + "{3} | [dD] [0-7] "
        + _HEX
        + "{2}))"
    ),
    "json-string": '"\\"" json-char* "\\""',
    "json-number": (
        f'"-"? ("0" | [1-9] [0-9]{{0,{MAX_INT_DIGITS - 1}}}) '
        f'("." [0-9]{{1,{DEFAULT_FRACTION_DIGITS}}})?'
    ),
    "json-value": (
        'json-object | json-array | json-string | json-number | "true" | "false" | "null"'
    ),
    "json-member": 'json-string ws ":" ws json-value ws',
    "json-object": '"{" ws (json-member ("," ws json-member)*)? "}"',
    "json-array": '"[" ws (json-value ws ("," ws json-value ws)*)? "]"',
    "boolean": '"true" | "false"',
    "null": '"null"',
    # Formats: conservative subsets of RFC 3339 / RFC 4122 / RFC 5321 that every validator accepts.
    "fmt-date": (
        '[1-9] [0-9]{3} "-" ("0" [13578] "-" fmt-day31 | "1" [02] "-" fmt-day31 '
        '| "0" [469] "-" fmt-day30 | "11-" fmt-day30 | "02-" fmt-day28)'
    ),
    "fmt-day31": '"0" [1-9] | [12] [0-9] | "3" [01]',
    "fmt-day30": '"0" [1-9] | [12] [0-9] | "30"',
    "fmt-day28": '"0" [1-9] | "1" [0-9] | "2" [0-8]',
    "fmt-hour": '[01] [0-9] | "2" [0-3]',
    "fmt-time": (
        'fmt-hour ":" [0-5] [0-9] ":" [0-5] [0-9] ("." [0-9]{1,6})? '
        '("Z" | [+-] fmt-hour ":" [0-5] [0-9])'
    ),
    "fmt-date-time": 'fmt-date "T" fmt-time',
    "fmt-uuid": ('[0-9a-f]{8} "-" [0-9a-f]{4} "-" [0-9a-f]{4} "-" [0-9a-f]{4} "-" [0-9a-f]{12}'),
    "fmt-email": ('fmt-atom ("." fmt-atom){0,2} "@" (fmt-label "."){1,3} [a-zA-Z]{2,10}'),
    "fmt-atom": "[a-zA-Z0-9_+-]{1,16}",
    "fmt-label": "[a-zA-Z0-9] ([a-zA-Z0-9-]{0,14} [a-zA-Z0-9])?",
    "fmt-ipv4": 'fmt-octet "." fmt-octet "." fmt-octet "." fmt-octet',
    "fmt-octet": '"25" [0-5] | "2" [0-4] [0-9] | "1" [0-9] [0-9] | [1-9] [0-9] | [0-9]',
}
# Rules a fixed rule refers to, so that only what is used is emitted.
_PRIMITIVE_DEPS: dict[str, tuple[str, ...]] = {
    "json-string": ("json-char",),
    "json-value": ("json-object", "json-array", "json-string", "json-number"),
    "json-member": ("json-string", "ws", "json-value"),
    "json-object": ("ws", "json-member"),
    "json-array": ("ws", "json-value"),
    "fmt-date": ("fmt-day31", "fmt-day30", "fmt-day28"),
    "fmt-time": ("fmt-hour",),
    "fmt-date-time": ("fmt-date", "fmt-time"),
    "fmt-email": ("fmt-atom", "fmt-label"),
    "fmt-ipv4": ("fmt-octet",),
}
# format -> (rule, shortest, longest) in characters (all formats are ASCII, no escapes).
_FORMATS: dict[str, tuple[str, int, int]] = {
    "date": ("fmt-date", 10, 10),
    "time": ("fmt-time", 9, 21),
    "date-time": ("fmt-date-time", 20, 32),
    "uuid": ("fmt-uuid", 36, 36),
    "email": ("fmt-email", 6, 50 + 1 + 3 * 17 + 10),
    "ipv4": ("fmt-ipv4", 7, 15),
}
# OpenAPI integer formats, honoured as bounds on integers (JSON Schema ignores them there).
_INT_FORMATS = {"int32": 31, "int64": 63}


# -- GBNF text helpers ---------------------------------------------------------------------------


def _literal(text: str) -> str:
    """``text`` as a GBNF string literal."""
    out = ['"']
    for ch in text:
        code = ord(ch)
        if ch == '"':
            out.append('\\"')
        elif ch == "\\":
            out.append("\\\\")
        elif ch == "\n":
            out.append("\\n")
        elif ch == "\r":
            out.append("\\r")
        elif ch == "\t":
            out.append("\\t")
        elif code < 0x20 or code == 0x7F:
            out.append(f"\\x{code:02X}")
        else:
            out.append(ch)
    out.append('"')
    return "".join(out)


def _items(expr: str) -> list[str]:
    """The top-level items of a GBNF sequence, each with its repetition operators."""
    items: list[str] = []
    i = 0
    while i < len(expr):
        ch = expr[i]
        start = i
        if ch == " ":
            i += 1
            continue
        if ch in "*+?{":  # an operator belongs to the item before it
            end = expr.index("}", i) + 1 if ch == "{" else i + 1
            items[-1] += expr[i:end]
            i = end
            continue
        if ch in '"[':
            close = '"' if ch == '"' else "]"
            i += 1
            while expr[i] != close:
                i += 2 if expr[i] == "\\" else 1
            i += 1
        elif ch == "(":
            depth = 0
            while True:
                c = expr[i]
                if c in '"[':
                    close = '"' if c == '"' else "]"
                    i += 1
                    while expr[i] != close:
                        i += 2 if expr[i] == "\\" else 1
                elif c == "(":
                    depth += 1
                elif c == ")":
                    depth -= 1
                    if depth == 0:
                        i += 1
                        break
                i += 1
        elif ch == "|":
            i += 1  # kept as an item of its own: a top-level alternation
        else:
            m = re.compile(r"[A-Za-z0-9-]+").match(expr, i)
            if m is None:
                raise ValueError(f"bad GBNF at {expr[i:]!r}")
            i = m.end()
        items.append(expr[start:i])
    return items


def _is_atom(expr: str) -> bool:
    """True when ``expr`` is one GBNF item with no operator (so an operator may follow it)."""
    items = _items(expr)
    return len(items) == 1 and items[0] == expr and expr[-1] not in "*+?}"


def _seq(*parts: str) -> str:
    """Concatenation; adjacent plain literals are merged into one."""
    out: list[str] = []
    for item in (item for part in parts if part for item in _items(part)):
        if item == "|":
            raise ValueError("an alternation must be grouped before it is concatenated")
        plain = item[0] == '"' and item[-1] == '"' and len(item) > 1
        if out and plain and out[-1][0] == '"' and out[-1][-1] == '"' and len(out[-1]) > 1:
            out[-1] = out[-1][:-1] + item[1:]
        else:
            out.append(item)
    return " ".join(out)


def _group(expr: str) -> str:
    return expr if _is_atom(expr) else f"({expr})"


def _alt(options: Sequence[str]) -> str:
    """Alternation of sequences; an empty option makes the whole optional."""
    unique = list(dict.fromkeys(options))
    nullable = "" in unique
    rest = [option for option in unique if option]
    if not rest:
        return ""
    body = rest[0] if len(rest) == 1 else "(" + " | ".join(rest) + ")"
    return _group(body) + "?" if nullable else body


def _digit_class(low: int, high: int) -> str:
    if low == high:
        return f'"{low}"'
    return f"[{low}-{high}]"


def _count(low: int, high: int | None) -> str:
    """The repetition suffix for ``low..high`` (``None``: unbounded); ``low, high <= limit``."""
    if high is None:
        return {0: "*", 1: "+"}.get(low, f"{{{low},}}")
    if low == high:
        return "" if low == 1 else f"{{{low}}}"
    if (low, high) == (0, 1):
        return "?"
    return f"{{{low},{high}}}"


def _pointer(path: str, *segments: str | int) -> str:
    escaped = (str(s).replace("~", "~0").replace("/", "~1") for s in segments)
    return "/".join([path, *escaped])


def _fail(message: str, path: str) -> SchemaNotSupportedError:
    return SchemaNotSupportedError(message, path=path)


# -- rule table ----------------------------------------------------------------------------------


class _Rules:
    """Named rules, deduplicated by body; fixed rules are added on first use."""

    def __init__(self) -> None:
        self._bodies: dict[str, str | None] = {}
        self._by_body: dict[str, str] = {}

    def _fresh(self, hint: str) -> str:
        base = re.sub(r"[^A-Za-z0-9]+", "-", hint).strip("-").lower()[:40].strip("-") or "rule"
        if base[0].isdigit():
            base = "r-" + base
        name, i = base, 2
        while name in self._bodies or name in _PRIMITIVES or name == "root":
            name = f"{base}-{i}"
            i += 1
        return name

    def add(self, hint: str, body: str) -> str:
        """A rule with this body (an existing one if some rule has the same body)."""
        if re.fullmatch(r"[A-Za-z0-9-]+", body):
            return body  # a rule that only names another rule is that rule
        if body.startswith("(") and _is_atom(body):
            body = body[1:-1]
        found = self._by_body.get(body)
        if found is not None:
            return found
        name = self._fresh(hint)
        self._bodies[name] = body
        self._by_body[body] = name
        return name

    def reserve(self, hint: str) -> str:
        name = self._fresh(hint)
        self._bodies[name] = None
        return name

    def define(self, name: str, body: str) -> None:
        self._bodies[name] = body

    def fixed(self, name: str) -> str:
        """The fixed rule ``name`` (and what it refers to), added on first use."""
        if name not in self._bodies:
            self._bodies[name] = _PRIMITIVES[name]
            for dependency in _PRIMITIVE_DEPS.get(name, ()):
                self.fixed(dependency)
        return name

    def render(self, root: str) -> str:
        lines = [f"root ::= {root}"]
        lines += [f"{name} ::= {body}" for name, body in self._bodies.items() if body is not None]
        return "\n".join(lines) + "\n"

    def repeat(self, item: str, low: int, high: int | None) -> str:
        """``item`` (one rule name or character class) repeated ``low..high`` times."""
        if high is not None and high < low:
            raise ValueError("empty repetition")
        if low <= _REPEAT_LIMIT and (high is None or high <= _REPEAT_LIMIT):
            return "" if high == 0 else item + _count(low, high)
        head = self._exactly(item, low)
        if high is None:
            return _seq(head, f"{item}*")
        return _seq(head, self._up_to(item, high - low))

    def _exactly(self, item: str, n: int) -> str:
        if n <= _REPEAT_LIMIT:
            return "" if n == 0 else item + _count(n, n)
        block = self.add(f"{item}-x{_REPEAT_LIMIT}", item + _count(_REPEAT_LIMIT, _REPEAT_LIMIT))
        return _seq(
            self._exactly(block, n // _REPEAT_LIMIT), self._exactly(item, n % _REPEAT_LIMIT)
        )

    def _up_to(self, item: str, n: int) -> str:
        if n <= _REPEAT_LIMIT:
            return "" if n == 0 else item + _count(0, n)
        block = self.add(f"{item}-x{_REPEAT_LIMIT}", item + _count(_REPEAT_LIMIT, _REPEAT_LIMIT))
        # 0..n = (block then 0..n-L) or 0..L-1
        longer = _seq(block, self._up_to(item, n - _REPEAT_LIMIT))
        shorter = item + _count(0, _REPEAT_LIMIT - 1)
        return self.add(f"{item}-upto-{n}", f"{longer} | {shorter}")


# -- numbers -------------------------------------------------------------------------------------


@dataclass(frozen=True)
class _Bound:
    value: Decimal
    exclusive: bool


def _digits(value: Decimal) -> tuple[str, str]:
    """Integer and fraction digits of a non-negative decimal (no leading / trailing zeros)."""
    text = format(abs(value), "f")
    whole, _, fraction = text.partition(".")
    return whole.lstrip("0") or "0", fraction.rstrip("0")


class _DecimalRange:
    """Decimal strings (no exponent) whose value lies between two bounds, digit by digit.

    A string is an integer part of ``L`` digits (no leading zero unless ``L == 1``), then
    optionally ``.`` and up to ``K(L)`` fraction digits. For one length ``L`` the strings compare
    as their digit sequences padded with zeros, so the classic range construction applies: follow
    the digits of the bounds while the prefix equals them, and leave the rest free as soon as it
    is strictly inside. Lengths strictly between the bounds' lengths are free entirely.
    """

    def __init__(self, rules: _Rules, *, integer: bool, fraction_digits: int) -> None:
        self._rules = rules
        self._integer = integer
        self._fraction_digits = fraction_digits

    def fraction_limit(self, length: int) -> int:
        if self._integer:
            return 0
        return max(0, min(self._fraction_digits, MAX_SIGNIFICANT_DIGITS - length))

    def expression(self, low: _Bound | None, high: _Bound | None) -> str | None:
        """Signed values in ``[low, high]`` (``None``: unbounded side); ``None`` if none."""
        options: list[str] = []
        if high is None or high.value > 0 or (high.value == 0 and not high.exclusive):
            start = low if low is not None and low.value >= 0 else _Bound(Decimal(0), False)
            positive = self._non_negative(start, high)
            if positive is not None:
                options.append(positive)
        if low is None or low.value < 0:
            if high is not None and high.value < 0:
                start = _Bound(-high.value, high.exclusive)
            else:
                start = _Bound(Decimal(0), True)  # strictly negative: no "-0"
            stop = None if low is None else _Bound(-low.value, low.exclusive)
            negative = self._non_negative(start, stop)
            if negative is not None:
                options.append(_seq('"-"', _group(negative)))
        return _alt(options) if options else None

    def _fraction(self, k: int) -> str:
        return self._rules.add(f"frac-{k}", f'"." [0-9]{_count(1, k)}') if k else ""

    def _non_negative(self, low: _Bound, high: _Bound | None) -> str | None:
        if high is not None and (
            high.value < low.value
            or (high.value == low.value and (low.exclusive or high.exclusive))
        ):
            return None
        low_whole, low_fraction = _digits(low.value)
        top = max(len(low_whole), MAX_INT_DIGITS)
        high_len: int | None = None
        high_digits = ""
        if high is not None:
            high_whole, high_fraction = _digits(high.value)
            high_len = len(high_whole)
            high_digits = high_whole + high_fraction
            top = min(top, high_len)
        options: list[str] = []
        free: list[int] = []
        for length in range(len(low_whole), top + 1):
            low_tight = length == len(low_whole)
            high_tight = length == high_len
            if not low_tight and not high_tight:
                free.append(length)
                continue
            expr = self._one_length(
                length,
                (low_whole + low_fraction, low.exclusive) if low_tight else None,
                (high_digits, high is not None and high.exclusive) if high_tight else None,
            )
            if expr is not None:
                options.append(expr)
        # Free lengths, merged while they share the fraction limit.
        while free:
            first = free[0]
            k = self.fraction_limit(first)
            run = [n for n in free if self.fraction_limit(n) == k]
            last = run[-1]
            free = [n for n in free if n not in run]
            frac = self._fraction(k)
            frac_opt = f"{frac}?" if frac else ""
            if first == 1:
                options.append(_seq("[0-9]", frac_opt))
                first = 2
            if first <= last:
                options.append(
                    _seq("[1-9]", self._rules.repeat("[0-9]", first - 1, last - 1), frac_opt)
                )
        return _alt(options) if options else None

    def _one_length(
        self, length: int, low: tuple[str, bool] | None, high: tuple[str, bool] | None
    ) -> str | None:
        k = self.fraction_limit(length)
        end = length + k
        low_digits, low_excl = low if low is not None else ("", False)
        high_digits, high_excl = high if high is not None else ("", False)

        def digit_at(digits: str, pos: int) -> int:
            return int(digits[pos]) if pos < len(digits) else 0

        def rest_zero(digits: str, pos: int) -> bool:
            return all(c == "0" for c in digits[pos:])

        def dot(pos: int) -> str:
            return '"."' if pos == length else ""

        def tail(pos: int) -> str:
            """Any suffix from ``pos`` on."""
            if pos > length:
                return self._rules.repeat("[0-9]", 0, end - pos)
            frac = self._fraction(k)
            optional_fraction = f"{frac}?" if frac else ""
            if pos == length:
                return optional_fraction
            return _seq(self._rules.repeat("[0-9]", length - pos, length - pos), optional_fraction)

        def zeros(pos: int) -> str:
            """The suffix of value zero (no trailing fraction zeros)."""
            return _literal("0" * (length - pos)) if pos < length else ""

        def nonzero(pos: int) -> str | None:
            """A suffix with some non-zero digit."""
            if pos >= end:
                return None
            options = [_seq(dot(pos), "[1-9]", tail(pos + 1))]
            rest = nonzero(pos + 1)
            if rest is not None:
                options.append(_seq(dot(pos), '"0"', rest))
            return _alt(options)

        memo: dict[tuple[int, bool, bool], str | None] = {}

        def within(pos: int, low_t: bool, high_t: bool) -> str | None:
            """Suffixes from ``pos`` on, given the prefix equals the tight bounds' prefixes."""
            key = (pos, low_t, high_t)
            if key not in memo:
                memo[key] = step(pos, low_t, high_t)
            return memo[key]

        def step(pos: int, low_t: bool, high_t: bool) -> str | None:
            if not low_t and not high_t:
                return tail(pos)
            low_zero = low_t and rest_zero(low_digits, pos)
            if low_zero and not low_excl:
                return within(pos, False, high_t)
            if high_t and rest_zero(high_digits, pos):
                # the suffix must be <= 0 (< 0 if exclusive); a tight low bound wants > 0
                return None if high_excl or low_t else zeros(pos)
            if low_zero and not high_t:
                return nonzero(pos)
            options: list[str] = []
            if pos >= length and not low_t:
                options.append("")  # stop here: the suffix is 0, inside both bounds
            if pos < end:
                first = 1 if pos == 0 and length > 1 else 0
                d_low = max(first, digit_at(low_digits, pos)) if low_t else first
                d_high = digit_at(high_digits, pos) if high_t else 9
                runs: list[tuple[int, int, str | None]] = []
                for d in range(d_low, d_high + 1):
                    cont = within(
                        pos + 1,
                        low_t and d == digit_at(low_digits, pos),
                        high_t and d == digit_at(high_digits, pos),
                    )
                    if runs and runs[-1][2] == cont and runs[-1][1] == d - 1:
                        runs[-1] = (runs[-1][0], d, cont)
                    else:
                        runs.append((d, d, cont))
                for a, b, cont in runs:
                    if cont is not None:
                        options.append(_seq(dot(pos), _digit_class(a, b), cont))
            return _alt(options) if options else None

        return within(0, low is not None, high is not None)


def _decimal(value: Any, path: str) -> Decimal:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise _fail("a numeric bound must be a number", path)
    if isinstance(value, float):
        if not math.isfinite(value):
            raise _fail("a numeric bound must be finite", path)
        return Decimal(repr(value)) if value else Decimal(0)  # no -0.0
    return Decimal(value)


def _number_bounds(schema: Mapping[str, Any], path: str) -> tuple[_Bound | None, _Bound | None]:
    lows: list[_Bound] = []
    highs: list[_Bound] = []
    for key, out, strict_key in (
        ("minimum", lows, "exclusiveMinimum"),
        ("maximum", highs, "exclusiveMaximum"),
    ):
        strict = schema.get(strict_key)
        if key in schema:
            out.append(_Bound(_decimal(schema[key], _pointer(path, key)), strict is True))
        elif isinstance(strict, bool) and strict:
            raise _fail(f"boolean '{strict_key}' without '{key}'", _pointer(path, strict_key))
        if strict is not None and not isinstance(strict, bool):
            out.append(_Bound(_decimal(strict, _pointer(path, strict_key)), True))
    low = max(lows, key=lambda b: (b.value, b.exclusive), default=None)
    high = min(highs, key=lambda b: (b.value, not b.exclusive), default=None)
    return low, high


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


# -- the converter -------------------------------------------------------------------------------


class _Converter:
    def __init__(self, root: Mapping[str, Any] | bool) -> None:
        self._root = root
        self.rules = _Rules()
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


def json_object_gbnf() -> str:
    """A grammar for any JSON object (JSON mode)."""
    rules = _Rules()
    return rules.render(rules.fixed("json-object"))


def any_json_gbnf() -> str:
    """A grammar for any JSON value."""
    rules = _Rules()
    return rules.render(rules.fixed("json-value"))
