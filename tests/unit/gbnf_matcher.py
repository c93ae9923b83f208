"""A pure-Python reader of the GBNF the grammar package writes: does a grammar accept a string,
and what strings can it produce. Unit tests use it where llama.cpp's own parser is not loaded.

It reads rules of the form ``name ::= body``, one a line, with literals (``\\x`` ``\\u``
``\\U`` ``\\t`` ``\\r`` ``\\n`` and ``\\`` + punctuation escapes), character classes (``[...]``,
``[^...]``, ranges), rule references, groups, alternation and the repetition operators ``*``
``+`` ``?`` ``{m}`` ``{m,}`` ``{m,n}``. Recognition is a memoized search over the sets of end
positions each node can reach, so ambiguous grammars are fine.
"""

from __future__ import annotations

import random
import re
from dataclasses import dataclass

__all__ = ["Grammar"]


@dataclass(frozen=True, eq=False)
class Lit:
    text: str


@dataclass(frozen=True, eq=False)
class Cls:
    ranges: tuple[tuple[int, int], ...]
    negated: bool

    def matches(self, ch: str) -> bool:
        return any(lo <= ord(ch) <= hi for lo, hi in self.ranges) != self.negated


@dataclass(frozen=True, eq=False)
class Ref:
    name: str


@dataclass(frozen=True, eq=False)
class Alt:
    options: tuple[tuple[Node, ...], ...]


@dataclass(frozen=True, eq=False)
class Rep:
    node: Node
    low: int
    high: int | None


Node = Lit | Cls | Ref | Alt | Rep

_NAME = re.compile(r"[A-Za-z0-9-]+")
_COUNTS = re.compile(r"\{(\d+)(,(\d*))?\}")
_HEX_WIDTH = {"x": 2, "u": 4, "U": 8}
_SIMPLE_ESCAPES = {"t": "\t", "r": "\r", "n": "\n"}


class _Reader:
    def __init__(self, src: str) -> None:
        self.src = src
        self.i = 0

    def char(self) -> str:
        src, i = self.src, self.i
        if src[i] != "\\":
            self.i += 1
            return src[i]
        kind = src[i + 1]
        if kind in _HEX_WIDTH:
            width = _HEX_WIDTH[kind]
            self.i += 2 + width
            return chr(int(src[i + 2 : i + 2 + width], 16))
        assert kind in _SIMPLE_ESCAPES or kind in '\\"[]-', f"unknown escape {src[i:]!r}"
        self.i += 2
        return _SIMPLE_ESCAPES.get(kind, kind)

    def skip_space(self) -> None:
        while self.i < len(self.src) and self.src[self.i] == " ":
            self.i += 1

    def alternation(self) -> Alt:
        options = [self.sequence()]
        while self.i < len(self.src) and self.src[self.i] == "|":
            self.i += 1
            self.skip_space()
            options.append(self.sequence())
        return Alt(tuple(options))

    def sequence(self) -> tuple[Node, ...]:
        items: list[Node] = []
        src = self.src
        while self.i < len(src) and src[self.i] not in "|)":
            ch = src[self.i]
            if ch == '"':
                self.i += 1
                text = []
                while src[self.i] != '"':
                    text.append(self.char())
                self.i += 1
                items.append(Lit("".join(text)))
            elif ch == "[":
                self.i += 1
                negated = src[self.i] == "^"
                self.i += negated
                ranges = []
                while src[self.i] != "]":
                    first = last = self.char()
                    if src[self.i] == "-" and src[self.i + 1] != "]":
                        self.i += 1
                        last = self.char()
                    ranges.append((ord(first), ord(last)))
                self.i += 1
                items.append(Cls(tuple(ranges), negated))
            elif ch == "(":
                self.i += 1
                self.skip_space()
                items.append(self.alternation())
                assert src[self.i] == ")", src[self.i :]
                self.i += 1
            elif ch in "*+?{":
                m = _COUNTS.match(src, self.i)
                if ch == "{":
                    assert m is not None, src[self.i :]
                    low = int(m.group(1))
                    high = low if m.group(2) is None else int(m.group(3)) if m.group(3) else None
                    self.i = m.end()
                else:
                    low, high = {"*": (0, None), "+": (1, None), "?": (0, 1)}[ch]
                    self.i += 1
                items[-1] = Rep(items[-1], low, high)
            else:
                name = _NAME.match(src, self.i)
                assert name is not None, f"cannot read {src[self.i :]!r}"
                items.append(Ref(name.group()))
                self.i = name.end()
            self.skip_space()
        return tuple(items)


def _refs(node: Node) -> list[str]:
    if isinstance(node, Ref):
        return [node.name]
    if isinstance(node, Rep):
        return _refs(node.node)
    if isinstance(node, Alt):
        return [name for option in node.options for item in option for name in _refs(item)]
    return []


class Grammar:
    """A GBNF grammar (root rule ``root``): recognizer and random producer."""

    def __init__(self, text: str) -> None:
        self.text = text
        self.rules: dict[str, Alt] = {}
        for line in text.split("\n"):  # not splitlines(): U+2028 may sit in a literal
            if not line.strip():
                continue
            name, _, body = line.partition(" ::= ")
            reader = _Reader(body)
            self.rules[name] = reader.alternation()
            assert reader.i == len(body), f"unread rest {body[reader.i :]!r} of {line!r}"
        for rule in self.rules.values():
            for name in _refs(rule):
                assert name in self.rules, f"undefined rule {name}"

    def accepts(self, s: str) -> bool:
        """Whether the whole of ``s`` is a sentence of the grammar."""
        memo: dict[tuple[int, int], frozenset[int]] = {}

        def ends(node: Node, pos: int) -> frozenset[int]:
            if isinstance(node, Lit):
                return frozenset({pos + len(node.text)}) if s.startswith(node.text, pos) else _NONE
            if isinstance(node, Cls):
                return frozenset({pos + 1}) if pos < len(s) and node.matches(s[pos]) else _NONE
            key = (id(node), pos)
            found = memo.get(key)
            if found is not None:
                return found
            memo[key] = _NONE  # a rule re-entered at the same place adds nothing new
            if isinstance(node, Ref):
                result = ends(self.rules[node.name], pos)
            elif isinstance(node, Alt):
                result = frozenset().union(*(run(option, {pos}) for option in node.options))
            else:
                result = repeat(node, pos)
            memo[key] = result
            return result

        def run(items: tuple[Node, ...], starts: set[int] | frozenset[int]) -> frozenset[int]:
            current = frozenset(starts)
            for item in items:
                current = frozenset(e for p in current for e in ends(item, p))
                if not current:
                    break
            return current

        def repeat(node: Rep, pos: int) -> frozenset[int]:
            current = frozenset({pos})
            reached: set[int] = set(current) if node.low == 0 else set()
            count = 0
            while current and (node.high is None or count < node.high):
                current = frozenset(e for p in current for e in ends(node.node, p))
                count += 1
                if count >= node.low:
                    if node.high is None:
                        current = current - reached  # only new positions can lead further
                    reached |= current
            return frozenset(reached)

        return len(s) in ends(Ref("root"), 0)

    # characters tried for negated classes: ASCII, escapes' targets and some wider ones
    POOL = [chr(c) for c in range(0x00, 0x80)] + list("éß中Ж😀\u00a0\u2028\u0663\ufeff")

    def sample(self, rng: random.Random, depth_budget: int = 40) -> str:
        """A random sentence (repetitions kept short; past the budget, the fewest choices)."""
        out: list[str] = []

        def gen(node: Node, depth: int) -> None:
            if isinstance(node, Lit):
                out.append(node.text)
            elif isinstance(node, Cls):
                if node.negated:
                    out.append(rng.choice([c for c in self.POOL if node.matches(c)]))
                else:
                    lo, hi = rng.choice(node.ranges)
                    out.append(chr(rng.randint(lo, hi)))
            elif isinstance(node, Ref):
                gen(self.rules[node.name], depth + 1)
            elif isinstance(node, Alt):
                options = node.options
                if depth > depth_budget:  # prefer options without references, to end
                    options = tuple(o for o in options if not any(_refs(i) for i in o)) or options
                for item in rng.choice(options):
                    gen(item, depth)
            else:
                top = node.low + 3 if node.high is None else min(node.high, node.low + 3)
                count = node.low if depth > depth_budget else rng.randint(node.low, top)
                for _ in range(count):
                    gen(node.node, depth + 1)

        gen(Ref("root"), 0)
        return "".join(out)


_NONE: frozenset[int] = frozenset()
