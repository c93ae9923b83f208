"""JSON schema -> GBNF: every grammar parses in llama.cpp, and accepts only valid instances.

A small GBNF reader (the subset ``json_grammar`` writes) gives two tools: a recognizer, to check
that given strings are accepted or rejected, and a random sampler, to check that whatever the
grammar can produce is valid JSON that validates against the schema. The validator below is
independent of the converter (it implements the keywords from the JSON Schema text).
"""

from __future__ import annotations

import datetime
import json
import os
import random
import re
import uuid
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from decimal import Decimal
from pathlib import Path
from typing import Any

import llama_cpp
import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from llamacpp_integrations.engine.native.weights import LoadedModel
from llamacpp_integrations.errors import SchemaNotSupportedError
from llamacpp_integrations.tools.grammar import (
    any_json_gbnf,
    json_object_gbnf,
    schema_to_gbnf,
)

# -- a GBNF reader -------------------------------------------------------------------------------


@dataclass(frozen=True, eq=False)
class Lit:
    text: str


@dataclass(frozen=True, eq=False)
class Cls:
    ranges: tuple[tuple[int, int], ...]
    negated: bool

    def matches(self, ch: str) -> bool:
        inside = any(lo <= ord(ch) <= hi for lo, hi in self.ranges)
        return inside != self.negated


@dataclass(frozen=True, eq=False)
class Ref:
    name: str


@dataclass(frozen=True, eq=False)
class Alt:
    options: tuple[tuple[Any, ...], ...]


@dataclass(frozen=True, eq=False)
class Rep:
    node: Any
    low: int
    high: int | None


_ESCAPES = {"t": "\t", "r": "\r", "n": "\n", "\\": "\\", '"': '"', "[": "[", "]": "]"}


def _char(src: str, i: int) -> tuple[str, int]:
    if src[i] != "\\":
        return src[i], i + 1
    kind = src[i + 1]
    if kind in "xuU":
        width = {"x": 2, "u": 4, "U": 8}[kind]
        return chr(int(src[i + 2 : i + 2 + width], 16)), i + 2 + width
    return _ESCAPES[kind], i + 2


class GrammarReader:
    def __init__(self, src: str) -> None:
        self.src = src
        self.i = 0

    def space(self) -> None:
        while self.i < len(self.src) and self.src[self.i] in " \t":
            self.i += 1

    def alternates(self) -> Alt:
        options = [self.sequence()]
        while self.i < len(self.src) and self.src[self.i] == "|":
            self.i += 1
            self.space()
            options.append(self.sequence())
        return Alt(tuple(options))

    def sequence(self) -> tuple[Any, ...]:
        items: list[Any] = []
        src = self.src
        while self.i < len(src):
            ch = src[self.i]
            if ch == '"':
                self.i += 1
                text = []
                while src[self.i] != '"':
                    c, self.i = _char(src, self.i)
                    text.append(c)
                self.i += 1
                items.append(Lit("".join(text)))
            elif ch == "[":
                self.i += 1
                negated = src[self.i] == "^"
                if negated:
                    self.i += 1
                ranges = []
                while src[self.i] != "]":
                    first, self.i = _char(src, self.i)
                    last = first
                    if src[self.i] == "-" and src[self.i + 1] != "]":
                        last, self.i = _char(src, self.i + 1)
                    ranges.append((ord(first), ord(last)))
                self.i += 1
                items.append(Cls(tuple(ranges), negated))
            elif ch == "(":
                self.i += 1
                self.space()
                group = self.alternates()
                assert src[self.i] == ")", src[self.i :]
                self.i += 1
                items.append(group)
            elif re.match(r"[A-Za-z0-9-]", ch):
                m = re.compile(r"[A-Za-z0-9-]+").match(src, self.i)
                assert m is not None
                items.append(Ref(m.group()))
                self.i = m.end()
            elif ch in "*+?{":
                if ch == "{":
                    m = re.compile(r"\{(\d+)(,(\d*))?\}").match(src, self.i)
                    assert m is not None
                    low = int(m.group(1))
                    high = low if m.group(2) is None else (int(m.group(3)) if m.group(3) else None)
                    self.i = m.end()
                else:
                    low, high = {"*": (0, None), "+": (1, None), "?": (0, 1)}[ch]
                    self.i += 1
                items[-1] = Rep(items[-1], low, high)
            else:
                break
            self.space()
        return tuple(items)


def parse_gbnf(text: str) -> dict[str, Alt]:
    rules: dict[str, Alt] = {}
    for line in text.split("\n"):  # not splitlines(): U+0085 / U+2028 may sit in literals
        if not line.strip():
            continue
        name, _, body = line.partition(" ::= ")
        reader = GrammarReader(body)
        rules[name] = reader.alternates()
        assert reader.i == len(body), f"unparsed rest {body[reader.i :]!r} in {line!r}"
    for alt in rules.values():
        for ref in _refs(alt):
            assert ref in rules, f"undefined rule {ref}"
    return rules


def _refs(node: Any) -> Iterator[str]:
    if isinstance(node, Ref):
        yield node.name
    elif isinstance(node, Alt):
        for option in node.options:
            for item in option:
                yield from _refs(item)
    elif isinstance(node, Rep):
        yield from _refs(node.node)


class Grammar:
    """Recognizer and random sampler for a grammar written by ``json_grammar``."""

    def __init__(self, text: str) -> None:
        self.text = text
        self.rules = parse_gbnf(text)
        self._height = self._heights()

    # recognition: the set of end positions of ``node`` matched from ``pos``
    def accepts(self, s: str) -> bool:
        memo: dict[tuple[int, int], frozenset[int]] = {}

        def ends(node: Any, pos: int) -> frozenset[int]:
            if isinstance(node, Lit):
                return (
                    frozenset({pos + len(node.text)})
                    if s.startswith(node.text, pos)
                    else frozenset()
                )
            if isinstance(node, Cls):
                ok = pos < len(s) and node.matches(s[pos])
                return frozenset({pos + 1}) if ok else frozenset()
            key = (id(node), pos)
            if key in memo:
                return memo[key]
            if isinstance(node, Ref):
                result = ends(self.rules[node.name], pos)
            elif isinstance(node, Alt):
                out: set[int] = set()
                for option in node.options:
                    out |= seq_ends(option, frozenset({pos}))
                result = frozenset(out)
            else:
                assert isinstance(node, Rep)
                current = frozenset({pos})
                reached = set(current) if node.low == 0 else set()
                count = 0
                while current and (node.high is None or count < node.high):
                    current = frozenset(e for p in current for e in ends(node.node, p))
                    count += 1
                    if count >= node.low:
                        if node.high is None and current <= reached:
                            break
                        reached |= current
                result = frozenset(reached)
            memo[key] = result
            return result

        def seq_ends(items: tuple[Any, ...], starts: frozenset[int]) -> frozenset[int]:
            for item in items:
                starts = frozenset(e for p in starts for e in ends(item, p))
                if not starts:
                    break
            return starts

        return len(s) in ends(Ref("root"), 0)

    # sampling
    def _heights(self) -> dict[str, float]:
        inf = float("inf")
        height = dict.fromkeys(self.rules, inf)

        def h(node: Any) -> float:
            if isinstance(node, Lit | Cls):
                return 0
            if isinstance(node, Ref):
                return height[node.name] + 1
            if isinstance(node, Rep):
                return 0 if node.low == 0 else h(node.node)
            return min(max((h(i) for i in option), default=0) for option in node.options)

        changed = True
        while changed:
            changed = False
            for name, alt in self.rules.items():
                value = h(alt)
                if value < height[name]:
                    height[name], changed = value, True
        self._h = h
        return height

    _POOL = [chr(c) for c in range(0x20, 0x7F)] + list("é中😀\x7fßЖ\u2028")

    def sample(self, rng: random.Random, budget: int = 30) -> str:
        out: list[str] = []

        def gen(node: Any, depth: int) -> None:
            if isinstance(node, Lit):
                out.append(node.text)
            elif isinstance(node, Cls):
                if node.negated:
                    out.append(rng.choice([c for c in self._POOL if node.matches(c)]))
                else:
                    lo, hi = rng.choice(node.ranges)
                    out.append(chr(rng.randint(lo, hi)))
            elif isinstance(node, Ref):
                gen(self.rules[node.name], depth + 1)
            elif isinstance(node, Alt):
                options = node.options
                if depth > budget:
                    best = min(max((self._h(i) for i in o), default=0) for o in options)
                    options = tuple(
                        o for o in options if max((self._h(i) for i in o), default=0) == best
                    )
                for item in rng.choice(options):
                    gen(item, depth)
            else:
                assert isinstance(node, Rep)
                high = node.low + 3 if node.high is None else min(node.high, node.low + 3)
                count = node.low if depth > budget else rng.randint(node.low, high)
                if depth <= budget and rng.random() < 0.2 and node.high is not None:
                    count = node.high  # the longest run, now and then
                for _ in range(count):
                    gen(node.node, depth + 1)

        gen(Ref("root"), 0)
        return "".join(out)


# -- an independent validator --------------------------------------------------------------------


def _is_number(v: Any) -> bool:
    return isinstance(v, int | float | Decimal) and not isinstance(v, bool)


def _json_equal(a: Any, b: Any) -> bool:
    if _is_number(a) and _is_number(b):
        return Decimal(str(a)) == Decimal(str(b))
    if isinstance(a, bool) or isinstance(b, bool) or a is None or b is None:
        return type(a) is type(b) and a == b
    if isinstance(a, str) and isinstance(b, str):
        return a == b
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(_json_equal(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(_json_equal(a[k], b[k]) for k in a)
    return False


def _type_ok(v: Any, t: str) -> bool:
    return {
        "null": v is None,
        "boolean": isinstance(v, bool),
        "integer": (isinstance(v, int) and not isinstance(v, bool))
        or (isinstance(v, float | Decimal) and v == v.__floor__()),
        "number": _is_number(v),
        "string": isinstance(v, str),
        "array": isinstance(v, list),
        "object": isinstance(v, dict),
    }[t]


_DATE = re.compile(r"\d{4}-\d{2}-\d{2}")
_TIME = re.compile(r"(\d{2}):(\d{2}):(\d{2})(\.\d+)?([Zz]|[+-](\d{2}):(\d{2}))")


def _format_ok(v: str, fmt: str) -> bool:
    if fmt == "date":
        if not _DATE.fullmatch(v):
            return False
        try:
            datetime.date.fromisoformat(v)
        except ValueError:
            return False
        return True
    if fmt == "time":
        m = _TIME.fullmatch(v)
        if not m:
            return False
        hh, mm, ss = int(m[1]), int(m[2]), int(m[3])
        if m[6] is not None and (int(m[6]) > 23 or int(m[7]) > 59):
            return False
        return hh <= 23 and mm <= 59 and ss <= 59
    if fmt == "date-time":
        date, sep, time = v.partition("T") if "T" in v else v.partition("t")
        return bool(sep) and _format_ok(date, "date") and _format_ok(time, "time")
    if fmt == "uuid":
        if not re.fullmatch(r"[0-9a-fA-F]{8}(-[0-9a-fA-F]{4}){3}-[0-9a-fA-F]{12}", v):
            return False
        uuid.UUID(v)
        return True
    if fmt == "email":
        local, at, domain = v.rpartition("@")
        return (
            bool(at)
            and 0 < len(local) <= 64
            and re.fullmatch(r"[A-Za-z0-9_+-]+(\.[A-Za-z0-9_+-]+)*", local) is not None
            and re.fullmatch(r"([A-Za-z0-9]([A-Za-z0-9-]*[A-Za-z0-9])?\.)+[A-Za-z]{2,}", domain)
            is not None
            and len(v) <= 254
        )
    if fmt == "ipv4":
        parts = v.split(".")
        return len(parts) == 4 and all(
            re.fullmatch(r"0|[1-9][0-9]{0,2}", p) and int(p) <= 255 for p in parts
        )
    raise AssertionError(f"unknown format {fmt}")


def resolve(root: Any, ref: str) -> Any:
    node = root
    for raw in ref[1:].split("/")[1:] if ref != "#" else []:
        key = raw.replace("~1", "/").replace("~0", "~")
        node = node[int(key)] if isinstance(node, list) else node[key]
    return node


def validate(v: Any, schema: Any, root: Any = None) -> bool:
    root = schema if root is None else root
    if schema is True:
        return True
    if schema is False:
        return False
    s: Mapping[str, Any] = schema
    if "$ref" in s and not validate(v, resolve(root, s["$ref"]), root):
        return False
    if "type" in s:
        types = s["type"] if isinstance(s["type"], list) else [s["type"]]
        if not any(_type_ok(v, t) for t in types):
            return False
    if "enum" in s and not any(_json_equal(v, e) for e in s["enum"]):
        return False
    if "const" in s and not _json_equal(v, s["const"]):
        return False
    if "anyOf" in s and not any(validate(v, b, root) for b in s["anyOf"]):
        return False
    if "oneOf" in s and sum(validate(v, b, root) for b in s["oneOf"]) != 1:
        return False
    if "allOf" in s and not all(validate(v, b, root) for b in s["allOf"]):
        return False
    if "not" in s and validate(v, s["not"], root):
        return False
    if _is_number(v):
        x = Decimal(str(v))
        if "minimum" in s:
            if x < Decimal(str(s["minimum"])):
                return False
            if s.get("exclusiveMinimum") is True and x == Decimal(str(s["minimum"])):
                return False
        if "maximum" in s:
            if x > Decimal(str(s["maximum"])):
                return False
            if s.get("exclusiveMaximum") is True and x == Decimal(str(s["maximum"])):
                return False
        for key, bad in (
            ("exclusiveMinimum", lambda b: x <= b),
            ("exclusiveMaximum", lambda b: x >= b),
        ):
            bound = s.get(key)
            if _is_number(bound) and bad(Decimal(str(bound))):
                return False
        if "multipleOf" in s and (x / Decimal(str(s["multipleOf"]))) % 1 != 0:
            return False
    if isinstance(v, str):
        if len(v) < s.get("minLength", 0) or len(v) > s.get("maxLength", len(v)):
            return False
        if "pattern" in s and not re.search(s["pattern"], v):
            return False
        if "format" in s and not _format_ok(v, s["format"]):
            return False
    if isinstance(v, list):
        if len(v) < s.get("minItems", 0) or len(v) > s.get("maxItems", len(v)):
            return False
        prefix, rest = s.get("prefixItems", []), s.get("items", True)
        if isinstance(rest, list):  # draft 7 tuple form
            prefix, rest = rest, s.get("additionalItems", True)
        for item, sub in zip(v, prefix, strict=False):
            if not validate(item, sub, root):
                return False
        if not all(validate(item, rest, root) for item in v[len(prefix) :]):
            return False
        if s.get("uniqueItems") is True and any(
            _json_equal(a, b) for i, a in enumerate(v) for b in v[i + 1 :]
        ):
            return False
    if isinstance(v, dict):
        props = s.get("properties", {})
        if any(name not in v for name in s.get("required", [])):
            return False
        for name, item in v.items():
            if name in props:
                if not validate(item, props[name], root):
                    return False
            elif not validate(item, s.get("additionalProperties", True), root):
                return False
        if len(v) < s.get("minProperties", 0) or len(v) > s.get("maxProperties", len(v)):
            return False
    return True


def dumps(v: Any) -> str:
    """Compact JSON, keys in insertion order; Decimals as plain decimal strings."""
    if isinstance(v, Decimal):
        text = format(v, "f")
        if "." in text:
            text = text.rstrip("0").rstrip(".")
        return "0" if text == "-0" else text
    if isinstance(v, float):  # only enum / const values are floats: written as the converter does
        return json.dumps(v)
    if isinstance(v, dict):
        return "{" + ",".join(f"{dumps(k)}:{dumps(x)}" for k, x in v.items()) + "}"
    if isinstance(v, list):
        return "[" + ",".join(dumps(x) for x in v) + "]"
    return json.dumps(v, ensure_ascii=False)


# -- llama.cpp parse check -----------------------------------------------------------------------


@pytest.fixture(scope="module")
def vocab(smollm_path: Path) -> Iterator[int]:
    """The test model's vocabulary, for llama.cpp's grammar parser."""
    model = LoadedModel(smollm_path)
    try:
        yield model.vocab
    finally:
        model.close()


def llama_parses(vocab: int, grammar: str) -> bool:
    sampler = llama_cpp.llama_sampler_init_grammar(vocab, grammar.encode("utf-8"), b"root")
    if not sampler:
        return False
    llama_cpp.llama_sampler_free(sampler)
    return True


def check(vocab: int, schema: Any) -> Grammar:
    """Convert, check llama.cpp parses it, and that 40 random productions validate."""
    text = schema_to_gbnf(schema)
    assert llama_parses(vocab, text), text
    grammar = Grammar(text)
    rng = random.Random(1234)
    for _ in range(40):
        produced = grammar.sample(rng)
        value = json.loads(produced)
        assert validate(value, schema), (produced, text)
        assert grammar.accepts(produced), (produced, text)
    return grammar


# -- integers ------------------------------------------------------------------------------------

INTEGER_RANGES = [
    (0, 0),
    (-5, 5),
    (7, 123),
    (10, None),
    (None, -3),
    (-100, -10),
    (1, 1_000_000),
    (0, 9),
    (9, 10),
    (-1, 0),
    (99, 101),
    (-1234, 5678),
    (0, None),
    (None, 0),
    (None, None),
    (19, 91),
    (100, 199),
    (-999, -100),
]


def _window(lo: int | None, hi: int | None) -> list[int]:
    points = {0, 1, -1, 9, 10, -10, 99, 100, 1000}
    for b in (lo, hi):
        if b is not None:
            points |= {b + d for d in range(-12, 13)}
            points |= {b * 10, b // 10, -b}
    return sorted(points)


@pytest.mark.parametrize(("lo", "hi"), INTEGER_RANGES)
def test_integer_ranges_are_exact(vocab: int, lo: int | None, hi: int | None) -> None:
    schema: dict[str, Any] = {"type": "integer"}
    if lo is not None:
        schema["minimum"] = lo
    if hi is not None:
        schema["maximum"] = hi
    grammar = check(vocab, schema)
    candidates = set(_window(lo, hi))
    if lo is not None and hi is not None and hi - lo <= 3000:
        candidates |= set(range(lo - 30, hi + 31))
    for x in sorted(candidates):
        inside = (lo is None or x >= lo) and (hi is None or x <= hi)
        assert grammar.accepts(str(x)) == inside, (x, lo, hi, grammar.text)
    for bad in ("-0", "007", "01", "1.0", "+1", " 1", "1 ", "", "-", "1e3"):
        assert not grammar.accepts(bad), bad


@pytest.mark.parametrize(
    ("schema", "lo", "hi"),
    [
        ({"exclusiveMinimum": 3, "exclusiveMaximum": 17}, 4, 16),
        ({"minimum": 3, "exclusiveMinimum": True, "maximum": 17, "exclusiveMaximum": True}, 4, 16),
        ({"minimum": 3, "exclusiveMinimum": False}, 3, None),
        ({"minimum": -2.5, "maximum": 7.9}, -2, 7),
        ({"exclusiveMinimum": -10.0, "maximum": -0.5}, -9, -1),
        ({"minimum": 0, "exclusiveMinimum": 5}, 6, None),
        ({"format": "int32"}, -(2**31), 2**31 - 1),
    ],
)
def test_integer_bound_forms(vocab: int, schema: dict[str, Any], lo: int, hi: int | None) -> None:
    grammar = check(vocab, {"type": "integer", **schema})
    for x in _window(lo, hi):
        inside = x >= lo and (hi is None or x <= hi)
        assert grammar.accepts(str(x)) == inside, (x, schema)


def test_unbounded_integers_stop_at_15_digits(vocab: int) -> None:
    grammar = check(vocab, {"type": "integer"})
    assert grammar.accepts("9" * 15) and grammar.accepts("-" + "9" * 15)
    assert not grammar.accepts("1" + "0" * 15)
    # bounds beyond 15 digits are kept exactly
    big = check(vocab, {"type": "integer", "minimum": 10**20, "maximum": 10**20 + 5})
    assert big.accepts(str(10**20 + 5)) and not big.accepts(str(10**20 + 6))


# -- numbers -------------------------------------------------------------------------------------

NUMBER_BOUNDS = [
    {"minimum": 10, "maximum": 40},
    {"exclusiveMinimum": 0, "exclusiveMaximum": 1},
    {"minimum": -1.5, "maximum": 2.25},
    {"minimum": 0.001, "exclusiveMaximum": 0.002},
    {"exclusiveMinimum": -3.75},
    {"maximum": -0.5},
    {"minimum": 99.99, "maximum": 100.01},
    {},
    {"minimum": 0},
    {"exclusiveMaximum": 0},
    {"minimum": 1e-8, "maximum": 2e-8},
    {"minimum": -0.0, "exclusiveMaximum": 0.5},
    {"exclusiveMinimum": -0.0, "maximum": 3},
]


def _decimals_near(values: list[Decimal]) -> set[str]:
    out = {"0", "1", "-1", "0.5", "-0.5", "10", "100.5", "-0.000001"}
    for b in values:
        for scale in (
            Decimal(1),
            Decimal("0.1"),
            Decimal("0.01"),
            Decimal("0.001"),
            Decimal("1e-6"),
        ):
            for d in range(-3, 4):
                out.add(str(b + d * scale))
    return out


@pytest.mark.parametrize("bounds", NUMBER_BOUNDS, ids=[json.dumps(b) for b in NUMBER_BOUNDS])
def test_number_bounds_hold_and_cover(vocab: int, bounds: dict[str, Any]) -> None:
    schema = {"type": "number", **bounds}
    grammar = check(vocab, schema)
    values = [Decimal(repr(v)) for v in bounds.values()]
    k = max([6] + [len(dumps(v).partition(".")[2]) + 1 for v in values])
    for text in sorted(_decimals_near(values)):
        normal = dumps(Decimal(text))
        valid = validate(float(normal), schema)
        whole, _, frac = normal.lstrip("-").partition(".")
        expressible = len(frac) <= k and len(whole) + len(frac) <= 15
        if grammar.accepts(normal):
            assert valid, (normal, schema)
        elif valid and expressible:
            pytest.fail(f"{normal} is valid for {schema} but rejected:\n{grammar.text}")
    for bad in ("-0", "01", "1.", ".5", "1e2", "+1", "1.5.5"):
        assert not grammar.accepts(bad), bad


@pytest.mark.parametrize(
    "bounds",
    [
        {"minimum": -1.5, "maximum": 1.05},
        {"exclusiveMinimum": -1.5, "exclusiveMaximum": 1.05},
        {"exclusiveMinimum": 0.25, "maximum": 2},
        {"minimum": -2, "exclusiveMaximum": -0.99},
        {"exclusiveMinimum": -0.01, "exclusiveMaximum": 0.01},
        {"minimum": 0.1, "maximum": 0.1},
        {"minimum": 1.99, "maximum": 2.01},
    ],
    ids=lambda b: json.dumps(b),
)
def test_number_ranges_exhaustively(vocab: int, bounds: dict[str, Any]) -> None:
    """Every value with up to 3 decimals in [-3, 3] is accepted exactly when it is valid."""
    schema = {"type": "number", **bounds}
    grammar = check(vocab, schema)
    for m in range(-3000, 3001):
        text = dumps(Decimal(m) / 1000)
        assert grammar.accepts(text) == validate(json.loads(text), schema), (text, schema)


def test_celsius_range(vocab: int) -> None:
    grammar = check(vocab, {"type": "number", "minimum": 10, "maximum": 40})
    for ok in ("10", "10.5", "39.999999", "40", "25", "12.0"):
        assert grammar.accepts(ok), ok
    for bad in ("9.999", "40.01", "41", "-20", "100", "4", "040"):
        assert not grammar.accepts(bad), bad


def test_number_multiple_of_one_is_an_integer(vocab: int) -> None:
    grammar = check(vocab, {"type": "number", "multipleOf": 1, "minimum": 0, "maximum": 5})
    assert grammar.accepts("5") and not grammar.accepts("2.5")


# -- strings -------------------------------------------------------------------------------------


@pytest.mark.parametrize(("lo", "hi"), [(0, 0), (0, 3), (2, 2), (1, None), (5, 8)])
def test_string_lengths(vocab: int, lo: int, hi: int | None) -> None:
    schema: dict[str, Any] = {"type": "string", "minLength": lo}
    if hi is not None:
        schema["maxLength"] = hi
    grammar = check(vocab, schema)
    for n in range(0, 12):
        for unit in ("a", "é", '"', "\\", "\n", "😀", "\u0001", "\x7f"):
            text = json.dumps(unit * n, ensure_ascii=False)
            assert grammar.accepts(text) == (lo <= n and (hi is None or n <= hi)), (text, schema)
    if hi is None or hi >= max(lo, 1):
        assert grammar.accepts('"\\u0041' + "b" * max(lo - 1, 0) + '"')
    assert not grammar.accepts('"\\ud83d\\ude00"')  # surrogate escapes are never emitted
    assert not grammar.accepts('"\n"') and not grammar.accepts('"\\x"')


def test_long_strings_nest_repetitions(vocab: int) -> None:
    grammar = check(vocab, {"type": "string", "minLength": 2100, "maxLength": 4500})
    for n, ok in ((2099, False), (2100, True), (3333, True), (4500, True), (4501, False)):
        assert grammar.accepts('"' + "x" * n + '"') == ok, n


FORMAT_CASES = {
    "date": (
        ["2024-01-31", "1999-12-01", "2023-02-28", "2023-04-30", "9999-11-30"],
        [
            "2024-13-01",
            "2024-00-10",
            "2024-02-30",
            "2024-04-31",
            "2024-1-01",
            "24-01-01",
            "2024-01-32",
            "2024-01-00",
            "0000-01-01",
            "2024-01-01T",
        ],
    ),
    "time": (
        ["00:00:00Z", "23:59:59+02:00", "12:30:00.123Z", "08:15:30-05:30"],
        ["24:00:00Z", "12:60:00Z", "12:00:60Z", "12:00:00", "12:00Z", "12:00:00+24:00"],
    ),
    "date-time": (
        ["2024-05-17T10:20:30Z", "2000-02-28T23:59:59.5+01:00"],
        ["2024-05-17 10:20:30Z", "2024-05-17T10:20:30", "2024-02-31T00:00:00Z"],
    ),
    "uuid": (
        ["123e4567-e89b-12d3-a456-426614174000", str(uuid.UUID(int=0))],
        ["123e4567e89b12d3a456426614174000", "123e4567-e89b-12d3-a456-42661417400g"],
    ),
    "email": (
        ["a@b.cc", "john.doe+x@mail.example.org", "x_y@sub-domain.io"],
        ["plain", "@b.cc", "a@b", "a..b@c.de", "a@-b.cc", "a@b.c", "a b@c.de", ".a@b.cc"],
    ),
    "ipv4": (
        ["0.0.0.0", "255.255.255.255", "192.168.1.20"],
        ["256.1.1.1", "1.2.3", "01.2.3.4", "1.2.3.4.5"],
    ),
}


@pytest.mark.parametrize("fmt", sorted(FORMAT_CASES))
def test_string_formats(vocab: int, fmt: str) -> None:
    grammar = check(vocab, {"type": "string", "format": fmt})
    good, bad = FORMAT_CASES[fmt]
    for text in good:
        assert _format_ok(text, fmt), text
        assert grammar.accepts(json.dumps(text)), text
    for text in bad:
        assert not grammar.accepts(json.dumps(text)), text


def test_format_with_compatible_length_bounds(vocab: int) -> None:
    check(vocab, {"type": "string", "format": "date", "minLength": 10, "maxLength": 10})
    with pytest.raises(SchemaNotSupportedError) as info:
        schema_to_gbnf({"type": "string", "format": "email", "maxLength": 20})
    assert info.value.path == "#/format"


# -- enums, const, objects, arrays, combinators --------------------------------------------------


def test_enum_and_const(vocab: int) -> None:
    values = ["red", 'qu"ote', "back\\slash", 3, 2.5, True, None, {"a": [1, 2]}, [], "ünï"]
    grammar = check(vocab, {"enum": values})
    for v in values:
        assert grammar.accepts(json.dumps(v, ensure_ascii=False, separators=(",", ":")))
    for v in ("blue", 4, False, {"a": [1]}, "RED"):
        assert not grammar.accepts(json.dumps(v))
    typed = check(vocab, {"type": "string", "enum": ["a", 1, "b"]})
    assert typed.accepts('"a"') and not typed.accepts("1")
    const = check(vocab, {"const": {"k": "v"}})
    assert const.accepts('{"k":"v"}') and not const.accepts('{"k":"w"}')
    integral = check(vocab, {"type": "integer", "enum": [1.0, 1.5, 2]})
    assert integral.accepts("1.0") and integral.accepts("2") and not integral.accepts("1.5")


def test_required_and_optional_properties(vocab: int) -> None:
    schema = {
        "type": "object",
        "properties": {
            "a": {"type": "integer"},
            "b": {"type": "string", "maxLength": 3},
            "c": {"type": "boolean"},
            "d": {"type": "null"},
        },
        "required": ["b", "d"],
    }
    grammar = check(vocab, schema)
    accepted = [
        '{"b":"x","d":null}',
        '{"a":1,"b":"","d":null}',
        '{"a":1,"b":"x","c":true,"d":null}',
        '{"b":"x","c":false,"d":null}',
        '{ "b" : "x" ,\n  "d": null }',
    ]
    rejected = [
        '{"d":null}',
        '{"b":"x"}',
        '{"d":null,"b":"x"}',
        '{"b":"x","d":null,"e":1}',
        '{"b":"x",,"d":null}',
        '{,"b":"x","d":null}',
        '{"b":"x","d":null,}',
        '{"b":"xxxx","d":null}',
        "{}",
    ]
    for text in accepted:
        assert grammar.accepts(text), text
    for text in rejected:
        assert not grammar.accepts(text), text


def test_all_optional_properties_and_commas(vocab: int) -> None:
    grammar = check(
        vocab,
        {"type": "object", "properties": {k: {"const": i} for i, k in enumerate("abc")}},
    )
    for text in ("{}", '{"a":0}', '{"b":1}', '{"c":2}', '{"a":0,"c":2}', '{"a":0,"b":1,"c":2}'):
        assert grammar.accepts(text), text
    for text in ('{,"b":1}', '{"a":0,}', '{"b":1,"a":0}', '{"a":0"b":1}'):
        assert not grammar.accepts(text), text


def test_free_form_and_map_objects(vocab: int) -> None:
    free = check(vocab, {"type": "object"})
    assert free.accepts('{"x":[1,{"y":null}],"z":"w"}') and not free.accepts("[]")
    closed = check(vocab, {"type": "object", "additionalProperties": False})
    assert closed.accepts("{}") and not closed.accepts('{"a":1}')
    mapping = check(
        vocab, {"type": "object", "additionalProperties": {"type": "integer", "minimum": 0}}
    )
    assert mapping.accepts('{"a":1,"b":2}') and mapping.accepts("{}")
    assert not mapping.accepts('{"a":-1}') and not mapping.accepts('{"a":"1"}')
    undeclared = check(vocab, {"type": "object", "required": ["k"]})
    assert undeclared.accepts('{"k":[true]}') and not undeclared.accepts("{}")


@pytest.mark.parametrize(("lo", "hi"), [(0, None), (1, 3), (2, 2), (0, 0), (3, None), (0, 1)])
def test_array_bounds(vocab: int, lo: int, hi: int | None) -> None:
    schema: dict[str, Any] = {
        "type": "array",
        "items": {"type": "integer", "minimum": 0},
        "minItems": lo,
    }
    if hi is not None:
        schema["maxItems"] = hi
    grammar = check(vocab, schema)
    for n in range(7):
        text = json.dumps(list(range(n)))
        assert grammar.accepts(text) == (lo <= n and (hi is None or n <= hi)), text
    assert (
        not grammar.accepts("[-1]") and not grammar.accepts("[1,]") and not grammar.accepts("[,1]")
    )


def test_prefix_items(vocab: int) -> None:
    schema = {
        "type": "array",
        "prefixItems": [{"type": "string", "maxLength": 2}, {"type": "integer"}],
        "items": {"type": "boolean"},
        "minItems": 1,
        "maxItems": 4,
    }
    grammar = check(vocab, schema)
    for text in ('["a"]', '["a",1]', '["a",1,true]', '["a",1,true,false]'):
        assert grammar.accepts(text), text
    for text in ("[]", "[1]", '["a",true]', '["a",1,true,false,true]', '["a",1,2]'):
        assert not grammar.accepts(text), text
    closed = check(vocab, {"type": "array", "prefixItems": [{"const": 1}], "items": False})
    assert closed.accepts("[]") and closed.accepts("[1]") and not closed.accepts("[1,1]")
    draft7 = check(vocab, {"type": "array", "items": [{"const": 1}], "additionalItems": False})
    assert draft7.accepts("[1]") and not draft7.accepts("[1,1]")


def test_any_of_type_lists_and_one_of(vocab: int) -> None:
    grammar = check(
        vocab, {"anyOf": [{"type": "integer", "maximum": 3}, {"type": "string", "maxLength": 1}]}
    )
    assert grammar.accepts("3") and grammar.accepts('"x"') and not grammar.accepts("4")
    nullable = check(vocab, {"type": ["string", "null"], "maxLength": 2, "minimum": 5})
    assert nullable.accepts("null") and nullable.accepts('"ab"') and not nullable.accepts('"abc"')
    one = check(vocab, {"oneOf": [{"type": "integer"}, {"type": "string"}, {"type": "null"}]})
    assert one.accepts("1") and one.accepts('"1"') and one.accepts("null")
    tagged = {
        "oneOf": [
            {
                "type": "object",
                "properties": {"kind": {"const": "a"}, "x": {"type": "integer"}},
                "required": ["kind", "x"],
            },
            {
                "type": "object",
                "properties": {"kind": {"enum": ["b", "c"]}, "x": {"type": "string"}},
                "required": ["kind"],
            },
        ]
    }
    tagged_grammar = check(vocab, tagged)
    assert tagged_grammar.accepts('{"kind":"a","x":1}') and tagged_grammar.accepts('{"kind":"c"}')
    assert check(vocab, {"oneOf": [{"const": 1}, {"const": 2}]}).accepts("2")


def test_all_of_with_one_member_and_metadata(vocab: int) -> None:
    schema = {
        "title": "T",
        "description": "d",
        "examples": [1],
        "default": 3,
        "$comment": "c",
        "allOf": [{"type": "integer", "minimum": 1, "maximum": 2}, {"description": "only words"}],
        "x-vendor": {"anything": True},
    }
    grammar = check(vocab, schema)
    assert grammar.accepts("1") and not grammar.accepts("3")


def test_recursive_ref_tree(vocab: int) -> None:
    schema = {
        "$defs": {
            "node": {
                "type": "object",
                "properties": {
                    "value": {"type": "integer", "minimum": 0, "maximum": 9},
                    "children": {"type": "array", "items": {"$ref": "#/$defs/node"}, "maxItems": 2},
                },
                "required": ["value"],
            }
        },
        "$ref": "#/$defs/node",
    }
    grammar = check(vocab, schema)
    tree = {
        "value": 1,
        "children": [{"value": 2}, {"value": 3, "children": [{"value": 4, "children": []}]}],
    }
    assert grammar.accepts(dumps(tree))
    assert not grammar.accepts(dumps({"value": 1, "children": [{"value": 10}]}))
    assert not grammar.accepts(dumps({"value": 1, "children": [{"value": 1}] * 3}))
    definitions = {
        "definitions": {
            "list": {
                "anyOf": [
                    {"type": "null"},
                    {
                        "type": "object",
                        "properties": {
                            "head": {"type": "string", "maxLength": 1},
                            "tail": {"$ref": "#/definitions/list"},
                        },
                        "required": ["head", "tail"],
                    },
                ]
            }
        },
        "$ref": "#/definitions/list",
    }
    linked = check(vocab, definitions)
    assert linked.accepts('{"head":"a","tail":{"head":"b","tail":null}}')
    assert not linked.accepts('{"head":"a","tail":{"head":"b"}}')
    assert check(vocab, {"type": "array", "items": {"$ref": "#"}, "maxItems": 2}).accepts(
        "[[],[[]]]"
    )


def test_grammar_shape(vocab: int) -> None:
    text = schema_to_gbnf(
        {
            "type": "object",
            "properties": {
                "a b/c": {"type": "string", "maxLength": 4},
                "d": {"type": "string", "maxLength": 4},
                "ünïcode": {"type": "integer"},
            },
        }
    )
    names = [line.split(" ::= ")[0] for line in text.splitlines()]
    assert names[0] == "root" and len(names) == len(set(names))
    assert all(re.fullmatch(r"[a-z0-9-]+", n) for n in names), names
    assert text.count("json-char{0,4}") == 1  # identical rules are shared
    assert "ws ::= ([ \\n] [ \\t]{0,16})?" in text
    ws_rule = Grammar(text)
    assert ws_rule.accepts('{"d":""' + " " * 17 + "}") and not ws_rule.accepts(
        '{"d":"" ' + " " * 17 + "}"
    )


def test_json_mode_grammars(vocab: int) -> None:
    obj, anything = json_object_gbnf(), any_json_gbnf()
    assert llama_parses(vocab, obj) and llama_parses(vocab, anything)
    o, a = Grammar(obj), Grammar(anything)
    assert o.accepts('{"a":[1,-2.5,"x",{"b":null}],"c":true}') and not o.accepts("[1]")
    assert a.accepts("[1]") and a.accepts('"s"') and a.accepts("-0.25") and not a.accepts("[1,]")
    rng = random.Random(7)
    for _ in range(50):
        assert isinstance(json.loads(o.sample(rng)), dict)
        json.loads(a.sample(rng))


# -- unsupported keywords ------------------------------------------------------------------------

UNSUPPORTED = [
    ({"type": "integer", "multipleOf": 3}, "#/multipleOf"),
    ({"type": "number", "multipleOf": 0.5}, "#/multipleOf"),
    (
        {"type": "object", "properties": {"age": {"type": "integer", "multipleOf": 2}}},
        "#/properties/age/multipleOf",
    ),
    ({"type": "string", "pattern": "^(?=a)[a-z]+$"}, "#/pattern"),
    ({"type": "string", "format": "hostname"}, "#/format"),
    ({"not": {"type": "null"}}, "#/not"),
    ({"if": {"type": "string"}, "then": {"maxLength": 2}}, "#/if"),
    ({"type": "object", "dependentRequired": {"a": ["b"]}}, "#/dependentRequired"),
    ({"type": "object", "patternProperties": {"^x": {}}}, "#/patternProperties"),
    ({"type": "object", "propertyNames": {"maxLength": 2}}, "#/propertyNames"),
    ({"type": "array", "uniqueItems": True}, "#/uniqueItems"),
    ({"type": "array", "contains": {"const": 1}}, "#/contains"),
    ({"type": "array", "items": {"type": "string", "pattern": "(a)\\1"}}, "#/items/pattern"),
    ({"anyOf": [{"type": "string"}, {"not": {}}]}, "#/anyOf/1/not"),
    ({"oneOf": [{"type": "integer"}, {"type": "number"}]}, "#/oneOf"),
    ({"oneOf": [{"type": "string"}, {"maxLength": 3}]}, "#/oneOf"),
    ({"allOf": [{"type": "string"}, {"maxLength": 3}]}, "#/allOf"),
    ({"type": "string", "anyOf": [{"maxLength": 1}]}, "#/type"),
    ({"$ref": "#/$defs/a", "maxLength": 2, "$defs": {"a": {"type": "string"}}}, "#/maxLength"),
    ({"$ref": "http://example.com/schema"}, "#/$ref"),
    ({"$ref": "#/$defs/missing"}, "#/$ref"),
    (
        {"$defs": {"a": {"anyOf": [{"$ref": "#/$defs/a"}, {"type": "null"}]}}, "$ref": "#/$defs/a"},
        "#/$defs/a/anyOf/0/$ref",
    ),
    ({"enum": ["a", "b"], "maxLength": 1}, "#/maxLength"),
    ({"type": "integer", "minimum": 5, "maximum": 4}, "#"),
    ({"type": "integer", "exclusiveMinimum": 4, "exclusiveMaximum": 5}, "#"),
    ({"type": "string", "minLength": 3, "maxLength": 2}, "#/maxLength"),
    ({"type": "array", "minItems": 3, "maxItems": 2}, "#/maxItems"),
    ({"type": "object", "properties": {"a": False}, "required": ["a"]}, "#/properties/a"),
    ({"type": "object", "required": ["a"], "additionalProperties": False}, "#/required"),
    ({"type": "object", "minProperties": 1}, "#/minProperties"),
    ({"type": "object", "properties": {"a": {}, "b": {}}, "maxProperties": 1}, "#/maxProperties"),
    ({"type": "strin"}, "#/type"),
    ({"const": float("nan")}, "#/const"),
    ({"unevaluatedProperties": False}, "#/unevaluatedProperties"),
    (False, "#"),
    (
        {"type": "object", "properties": {"x": {"$id": "other", "type": "string"}}},
        "#/properties/x/$id",
    ),
    ({"type": "number", "minimum": "1"}, "#/minimum"),
]


@pytest.mark.parametrize(("schema", "path"), UNSUPPORTED, ids=[p for _, p in UNSUPPORTED])
def test_unsupported_keywords_raise_with_their_path(schema: Any, path: str) -> None:
    with pytest.raises(SchemaNotSupportedError) as info:
        schema_to_gbnf(schema)
    assert info.value.path == path, str(info.value)
    assert f"(at {path})" in str(info.value)


def test_trivially_satisfied_keywords_are_accepted(vocab: int) -> None:
    check(vocab, {"type": "array", "uniqueItems": True, "maxItems": 1})
    check(vocab, {"type": "array", "uniqueItems": False})
    check(vocab, {"type": "string", "pattern": ".*"})
    check(
        vocab,
        {
            "type": "object",
            "properties": {"a": {}},
            "required": ["a"],
            "minProperties": 1,
            "maxProperties": 3,
        },
    )
    check(vocab, {"type": "integer", "multipleOf": 1})
    check(vocab, {"type": "string", "minimum": 3, "multipleOf": 7})  # number keywords: not strings


# -- property-based: random schemas, their instances and mutations -------------------------------

KEY_CHARS = st.sampled_from([*'abkz_"\\ é中-/~', "\n"])
TEXT = st.text(st.characters(exclude_categories=("Cs",)), max_size=6)
SCALARS = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-50, 50),
    st.decimals(-100, 100, places=2).map(float),
    TEXT,
)


@st.composite
def integer_schemas(draw: st.DrawFn) -> dict[str, Any]:
    schema: dict[str, Any] = {"type": "integer"}
    lo = draw(st.none() | st.integers(-(10**6), 10**6))
    hi = draw(st.none() | st.integers(-(10**6), 10**6))
    if lo is not None and hi is not None and lo > hi:
        lo, hi = hi, lo
    style = draw(st.sampled_from(["inclusive", "exclusive", "draft4"]))
    if lo is not None and hi is not None and style != "inclusive" and hi - lo < 2:
        hi = lo + 2
    for key, value in (("minimum", lo), ("maximum", hi)):
        if value is None:
            continue
        if style == "inclusive":
            schema[key] = value
        elif style == "exclusive":
            schema["exclusive" + key[0].upper() + key[1:]] = value
        else:
            schema[key] = value
            schema["exclusive" + key[0].upper() + key[1:]] = True
    return schema


@st.composite
def number_schemas(draw: st.DrawFn) -> dict[str, Any]:
    schema: dict[str, Any] = {"type": "number"}
    bound = st.decimals(-1000, 1000, places=draw(st.integers(0, 3))).map(
        lambda d: int(d) if d == d.to_integral_value() else float(d)
    )
    lo, hi = draw(st.none() | bound), draw(st.none() | bound)
    if lo is not None and hi is not None:
        lo, hi = min(lo, hi), max(lo, hi)
        if hi - lo < 0.01:
            hi = lo + 1
    for key, value in (("Minimum", lo), ("Maximum", hi)):
        if value is None:
            continue
        style = draw(st.sampled_from(["inclusive", "exclusive", "draft4"]))
        if style == "exclusive":
            schema["exclusive" + key] = value
        else:
            schema[key.lower()] = value
            if style == "draft4":
                schema["exclusive" + key] = draw(st.booleans())
    return schema


@st.composite
def string_schemas(draw: st.DrawFn) -> dict[str, Any]:
    if draw(st.integers(0, 4)) == 0:
        return {"type": "string", "format": draw(st.sampled_from(sorted(FORMAT_CASES)))}
    schema: dict[str, Any] = {"type": "string"}
    lo = draw(st.integers(0, 4))
    if lo or draw(st.booleans()):
        schema["minLength"] = lo
    if draw(st.booleans()):
        schema["maxLength"] = draw(st.integers(lo, 8))
    return schema


def _unique_values(values: list[Any]) -> list[Any]:
    out: list[Any] = []
    for v in values:
        if not any(_json_equal(v, o) for o in out):
            out.append(v)
    return out


LEAVES = st.one_of(
    st.just({"type": "boolean"}),
    st.just({"type": "null"}),
    integer_schemas(),
    number_schemas(),
    string_schemas(),
    st.lists(SCALARS | st.just({"k": [1]}), min_size=1, max_size=4).map(
        lambda vs: {"enum": _unique_values(vs)}
    ),
    SCALARS.map(lambda v: {"const": v}),
    st.builds(lambda n: {"type": ["string", "null"], "maxLength": n}, st.integers(0, 5)),
    st.sampled_from([{}, True, {"type": "object"}, {"description": "anything"}]),
)


@st.composite
def object_schemas(draw: st.DrawFn, children: st.SearchStrategy[Any]) -> dict[str, Any]:
    names = draw(st.lists(st.text(KEY_CHARS, min_size=1, max_size=5), max_size=4, unique=True))
    props = {n: draw(children) for n in names}
    schema: dict[str, Any] = {"type": "object", "properties": props}
    required = [n for n in names if draw(st.booleans())]
    if draw(st.integers(0, 4)) == 0:  # required but not declared: takes additionalProperties
        required.append("undeclared")
        schema["additionalProperties"] = draw(children)
    elif draw(st.booleans()):
        schema["additionalProperties"] = False
    if required:
        schema["required"] = required
    if not names and draw(st.booleans()):
        schema = {"type": "object", "additionalProperties": draw(children)}
    return schema


@st.composite
def array_schemas(draw: st.DrawFn, children: st.SearchStrategy[Any]) -> dict[str, Any]:
    lo = draw(st.integers(0, 3))
    schema: dict[str, Any] = {"type": "array", "items": draw(children)}
    if lo or draw(st.booleans()):
        schema["minItems"] = lo
    if draw(st.booleans()):
        schema["maxItems"] = draw(st.integers(lo, 5))
    if draw(st.integers(0, 3)) == 0:
        schema["prefixItems"] = draw(st.lists(children, min_size=1, max_size=2))
        if draw(st.booleans()):
            schema["items"] = False
            schema["minItems"] = min(lo, len(schema["prefixItems"]))
            schema.pop("maxItems", None)
        if draw(st.booleans()):  # the draft 7 spelling
            schema["additionalItems"] = schema.pop("items")
            schema["items"] = schema.pop("prefixItems")
    return schema


DISTINCT_TYPE_LEAVES = {
    "boolean": st.just({"type": "boolean"}),
    "null": st.just({"type": "null"}),
    "integer": integer_schemas(),
    "string": string_schemas(),
}


def _extend(children: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    return st.one_of(
        object_schemas(children),
        array_schemas(children),
        st.lists(children, min_size=1, max_size=3).map(lambda bs: {"anyOf": bs}),
        st.lists(st.sampled_from(sorted(DISTINCT_TYPE_LEAVES)), min_size=1, max_size=3, unique=True)
        .flatmap(lambda ts: st.tuples(*(DISTINCT_TYPE_LEAVES[t] for t in ts)))
        .map(lambda bs: {"oneOf": list(bs)}),
        children.map(lambda c: {"allOf": [c], "description": "wrapped"}),
    )


RAW_SCHEMAS = st.recursive(LEAVES, _extend, max_leaves=8)

_SCHEMA_LISTS = ("anyOf", "oneOf", "allOf", "prefixItems")


@st.composite
def schemas(draw: st.DrawFn) -> Any:
    """A random supported schema; some subschemas moved to ``$defs`` behind a ``$ref``."""
    schema = draw(RAW_SCHEMAS)
    defs: dict[str, Any] = {}

    def hoist(node: Any) -> Any:
        if not isinstance(node, dict):
            return node
        node = dict(node)
        for key in _SCHEMA_LISTS:
            if isinstance(node.get(key), list):
                node[key] = [hoist(n) for n in node[key]]
        if isinstance(node.get("properties"), dict):
            node["properties"] = {k: hoist(v) for k, v in node["properties"].items()}
        for key in ("items", "additionalProperties"):
            if isinstance(node.get(key), dict):
                node[key] = hoist(node[key])
        if draw(st.integers(0, 4)) == 0:
            name = f"d{len(defs)}"
            defs[name] = node
            return {"$ref": f"#/$defs/{name}"}
        return node

    schema = hoist(schema)
    if defs:
        schema = {"$defs": defs, "allOf": [schema]} if isinstance(schema, dict) else schema
    return schema


# instances generated within the grammar's subset, in its property order

ANY_JSON = st.recursive(
    st.one_of(
        st.none(),
        st.booleans(),
        st.integers(-(10**6), 10**6),
        st.decimals(-1000, 1000, places=3),
        TEXT,
    ),
    lambda c: st.lists(c, max_size=3) | st.dictionaries(TEXT, c, max_size=3),
    max_leaves=6,
)


def _bounds(schema: Mapping[str, Any]) -> tuple[Decimal | None, bool, Decimal | None, bool]:
    lo: Decimal | None = None
    hi: Decimal | None = None
    lo_ex = hi_ex = False
    if "minimum" in schema:
        lo, lo_ex = Decimal(repr(schema["minimum"])), schema.get("exclusiveMinimum") is True
    if _is_number(schema.get("exclusiveMinimum")):
        b = Decimal(repr(schema["exclusiveMinimum"]))
        if lo is None or b >= lo:
            lo, lo_ex = b, True
    if "maximum" in schema:
        hi, hi_ex = Decimal(repr(schema["maximum"])), schema.get("exclusiveMaximum") is True
    if _is_number(schema.get("exclusiveMaximum")):
        b = Decimal(repr(schema["exclusiveMaximum"]))
        if hi is None or b <= hi:
            hi, hi_ex = b, True
    return lo, lo_ex, hi, hi_ex


def _numbers(schema: Mapping[str, Any], places: int) -> st.SearchStrategy[Any]:
    lo, lo_ex, hi, hi_ex = _bounds(schema)
    scale = Decimal(10) ** places
    limit = 10**6 * scale
    a = -limit if lo is None else (lo * scale).to_integral_value(rounding="ROUND_CEILING")
    b = limit if hi is None else (hi * scale).to_integral_value(rounding="ROUND_FLOOR")
    if lo is not None and lo_ex and a == lo * scale:
        a += 1
    if hi is not None and hi_ex and b == hi * scale:
        b -= 1
    if a > b:
        return st.nothing()
    ints = st.integers(int(a), int(b))
    if places == 0:
        return ints
    return ints.map(lambda m: Decimal(m) / scale)


_FORMAT_VALUES: dict[str, st.SearchStrategy[str]] = {
    "date": st.dates(datetime.date(1000, 1, 1))
    .filter(lambda d: d.day <= 28 or d.month != 2)
    .map(lambda d: d.isoformat()),
    "time": st.tuples(st.times(), st.sampled_from(["Z", "+01:00", "-11:30"])).map(
        lambda t: t[0].replace(microsecond=t[0].microsecond // 1000 * 1000).isoformat() + t[1]
    ),
    "uuid": st.uuids().map(str),
    "email": st.sampled_from(["a@b.cc", "first.last@example.com", "x+y_z@sub.domain.org"]),
    "ipv4": st.ip_addresses(v=4).map(str),
}
_FORMAT_VALUES["date-time"] = st.tuples(_FORMAT_VALUES["date"], _FORMAT_VALUES["time"]).map(
    "T".join
)


def instances(schema: Any, root: Any) -> st.SearchStrategy[Any]:
    if (
        schema is True
        or schema == {}
        or (isinstance(schema, dict) and set(schema) <= {"description"})
    ):
        return ANY_JSON
    if "$ref" in schema:
        target = resolve(root, schema["$ref"])
        return st.deferred(lambda: instances(target, root))
    if "allOf" in schema:
        members = [m for m in schema["allOf"] if m is not True and set(m) - {"description"}]
        return instances(members[0] if members else True, root)
    for key in ("anyOf", "oneOf"):
        if key in schema:
            return st.one_of([instances(b, root) for b in schema[key]])
    if "enum" in schema or "const" in schema:
        values = schema["enum"] if "enum" in schema else [schema["const"]]
        return st.sampled_from([v for v in values if validate(v, schema)])
    types = schema.get("type")
    if types is None:
        types = ["object"] if "properties" in schema or "additionalProperties" in schema else []
    types = types if isinstance(types, list) else [types]
    options = []
    for t in types:
        if t == "null":
            options.append(st.none())
        elif t == "boolean":
            options.append(st.booleans())
        elif t == "integer":
            options.append(_numbers(schema, 0))
        elif t == "number":
            per_places = [_numbers(schema, p) for p in range(4)]
            options.append(st.one_of([s for s in per_places if not s.is_empty]))
        elif t == "string":
            if "format" in schema:
                options.append(_FORMAT_VALUES[schema["format"]])
            else:
                options.append(
                    st.text(
                        st.characters(exclude_categories=("Cs",)),
                        min_size=schema.get("minLength", 0),
                        max_size=schema.get("maxLength", schema.get("minLength", 0) + 6),
                    )
                )
        elif t == "object":
            options.append(_objects(schema, root))
        elif t == "array":
            options.append(_arrays(schema, root))
    return st.one_of(options)


def _objects(schema: Mapping[str, Any], root: Any) -> st.SearchStrategy[Any]:
    props = schema.get("properties", {})
    extra = schema.get("additionalProperties", True)
    if not props and not schema.get("required"):
        if extra is True:
            return st.dictionaries(TEXT, ANY_JSON, max_size=3)
        if extra is False:
            return st.just({})
        return st.dictionaries(TEXT, instances(extra, root), max_size=3)
    required = schema.get("required", [])

    @st.composite
    def build(draw: st.DrawFn) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for name, sub in props.items():
            if name in required or draw(st.booleans()):
                out[name] = draw(instances(sub, root))
        for name in required:
            if name not in props:
                out[name] = draw(instances(extra, root))
        return out

    return build()


def _arrays(schema: Mapping[str, Any], root: Any) -> st.SearchStrategy[Any]:
    prefix = schema.get("prefixItems", [])
    items = schema.get("items", True)
    if isinstance(items, list):
        prefix, items = items, schema.get("additionalItems", True)
    lo = schema.get("minItems", 0)
    hi = schema.get("maxItems", lo + 3)
    if items is False:
        hi = min(hi, len(prefix))

    @st.composite
    def build(draw: st.DrawFn) -> list[Any]:
        n = draw(st.integers(lo, min(hi, lo + 3)))
        return [draw(instances(prefix[i] if i < len(prefix) else items, root)) for i in range(n)]

    return build()


def _paths(v: Any, at: tuple[Any, ...] = ()) -> Iterator[tuple[Any, ...]]:
    yield at
    if isinstance(v, dict):
        for k, x in v.items():
            yield from _paths(x, (*at, k))
    elif isinstance(v, list):
        for i, x in enumerate(v):
            yield from _paths(x, (*at, i))


def _replace(v: Any, path: tuple[Any, ...], fn: Callable[[Any], Any]) -> Any:
    if not path:
        return fn(v)
    copy = dict(v) if isinstance(v, dict) else list(v)
    copy[path[0]] = _replace(v[path[0]], path[1:], fn)
    return copy


def _nudge(x: Any, r: random.Random) -> Any:
    if isinstance(x, bool) or x is None:
        return r.choice([0, "true", not x if isinstance(x, bool) else False])
    if _is_number(x):
        x = Decimal(repr(x)) if isinstance(x, float) else x
        return x + r.choice([1, -1, Decimal("0.001"), Decimal("-0.001"), 10**6, Decimal("0.5")])
    if isinstance(x, str):
        return r.choice([x + "x", x[1:], x + "\u00e9" * 5, "2024-02-30", "", x.upper()])
    if isinstance(x, list):
        return r.choice([[*x, x[0]] if x else [None], x[1:], [*x, "extra"], []])
    if isinstance(x, dict):
        if x and r.random() < 0.5:
            key = r.choice(list(x))
            return {k: v for k, v in x.items() if k != key}
        return {**x, r.choice(["zz", "a", "k"]): r.choice([1, "v", None])}
    return x


def _mutate(value: Any, r: random.Random) -> Any:
    paths = list(_paths(value))
    path = r.choice(paths)
    return _replace(
        value,
        path,
        lambda x: (
            _nudge(x, r)
            if r.random() < 0.8
            else r.choice([None, 0, -1, 1.5, "x", [], {}, True, 10**7])
        ),
    )


SETTINGS = settings(
    max_examples=int(os.environ.get("JSON_GRAMMAR_EXAMPLES", "150")),
    deadline=None,
    suppress_health_check=[
        HealthCheck.too_slow,
        HealthCheck.function_scoped_fixture,
        HealthCheck.data_too_large,
    ],
)


@SETTINGS
@given(schema=schemas(), data=st.data())
def test_random_schemas_are_valid_by_construction(
    vocab: int, schema: Any, data: st.DataObject
) -> None:
    text = schema_to_gbnf(schema)
    assert llama_parses(vocab, text), text
    grammar = Grammar(text)
    # (1) whatever the grammar produces is valid
    rng = random.Random(data.draw(st.integers(0, 2**32 - 1), label="seed"))
    for _ in range(10):
        produced = grammar.sample(rng)
        assert validate(json.loads(produced), schema), (produced, text)
    # (2) valid instances (in the grammar's property order) are accepted
    for _ in range(2):
        instance = data.draw(instances(schema, schema), label="instance")
        serialized = dumps(instance)
        assert validate(json.loads(serialized), schema), serialized
        assert grammar.accepts(serialized), (serialized, text)
        # (3) mutations are accepted only when still valid
        for _ in range(4):
            mutated = dumps(_mutate(instance, rng))
            accepted = grammar.accepts(mutated)
            valid = validate(json.loads(mutated), schema)
            event("mutation invalid" if not valid else "mutation still valid")
            assert valid or not accepted, (mutated, text)
        chars = list(serialized)
        i = rng.randrange(len(chars) + 1)
        chars[i : i + rng.randint(0, 1)] = rng.choice(["", ",", "}", "]", '"', "0", "-", "\\", " "])
        broken = "".join(chars)
        if grammar.accepts(broken):
            assert validate(json.loads(broken), schema), (broken, text)


# -- string patterns -------------------------------------------------------------------------------

PATTERNS = [
    r"^[A-Z]{3}-\d{4}$",
    r"^[a-z]+@[a-z]+\.(com|org)$",
    r"^v\d+\.\d+(\.\d+)?$",
    r"^(yes|no|maybe)$",
    r"^\w+( \w+)*$",
    r"^[^\s\"]{2,8}$",
    r"id-[0-9a-f]{4}",  # unanchored: anything may surround it
    r'^say "hi"\\now$',  # characters JSON must escape
]


@pytest.mark.parametrize("pattern", PATTERNS)
def test_string_patterns(vocab: int, pattern: str) -> None:
    """llama.cpp parses each pattern's grammar, and its random productions match the pattern
    (``validate`` checks ``pattern`` with Python's ``re``)."""
    check(vocab, {"type": "string", "pattern": pattern})
    check(vocab, {"type": "object", "properties": {"x": {"type": "string", "pattern": pattern}}})
