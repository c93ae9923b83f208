"""The language of a string pattern as a tree, and its narrowing to a length range.

Leaves are sets of code points (:class:`CharSet`, one character); inner nodes are sequences
(:class:`Concat`), alternatives (:class:`Union`) and counted repeats (:class:`Repeat`). Every
node knows the length range of its strings. Build nodes with :func:`concat`, :func:`union` and
:func:`repeat`, which keep the tree normalized:

* a repeated item never matches the empty string (``(a*)*`` is ``a*``): a GBNF rule repeated
  without consuming anything is left recursion to llama.cpp;
* :data:`VOID` (no string) is absorbed (dropped from alternatives, spreading through sequences),
  and an alternative of :data:`ANY_STAR` (every string) is :data:`ANY_STAR`;
* nodes are compared by identity: normalizing shares subtrees (the tree is a DAG), and a
  structural hash or equality would walk the shared parts once per path, exponentially often;
* nested unbounded repeats are merged (``(x+)+`` is ``x+``), so the grammar is less ambiguous.

:func:`narrow` keeps the strings within a length range: exactly where the tree can say so (one
part of varying length), else a subset (the range shared among the varying parts). It never
adds a string.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass

__all__ = [
    "ANY",
    "ANY_STAR",
    "DOMAIN",
    "EMPTY",
    "MAX_CODE_POINT",
    "VOID",
    "CharSet",
    "Concat",
    "Node",
    "Ranges",
    "Repeat",
    "Union",
    "char_set",
    "chars",
    "code_points",
    "complement",
    "concat",
    "intersect",
    "least_at_edge",
    "minus",
    "narrow",
    "repeat",
    "union",
]

MAX_CODE_POINT = 0x10FFFF
# A set of code points: sorted, disjoint, inclusive ranges.
Ranges = tuple[tuple[int, int], ...]


# -- sets of code points -------------------------------------------------------------------------


def code_points(pairs: Iterable[tuple[int, int]]) -> Ranges:
    """The set of the inclusive ranges ``pairs`` (in any order, overlapping or not)."""
    merged: list[tuple[int, int]] = []
    for lo, hi in sorted(pairs):
        if merged and lo <= merged[-1][1] + 1:
            merged[-1] = (merged[-1][0], max(hi, merged[-1][1]))
        else:
            merged.append((lo, hi))
    return tuple(merged)


def complement(ranges: Ranges) -> Ranges:
    """Every code point not in ``ranges``."""
    out: list[tuple[int, int]] = []
    start = 0
    for lo, hi in ranges:
        if lo > start:
            out.append((start, lo - 1))
        start = hi + 1
    if start <= MAX_CODE_POINT:
        out.append((start, MAX_CODE_POINT))
    return tuple(out)


def minus(ranges: Ranges, removed: Ranges) -> Ranges:
    """The code points of ``ranges`` not in ``removed``."""
    return complement(code_points(complement(ranges) + removed))


def intersect(ranges: Ranges, other: Ranges) -> Ranges:
    """The code points in both sets."""
    return minus(ranges, complement(other))


def chars(text: str) -> Ranges:
    """The set of the characters of ``text``."""
    return code_points((ord(c), ord(c)) for c in text)


# Characters a JSON string can hold (a surrogate escape is half of a character).
DOMAIN = complement(((0xD800, 0xDFFF),))


# -- the tree ------------------------------------------------------------------------------------


@dataclass(frozen=True, eq=False)
class CharSet:
    """One character from a set (never empty except as :data:`VOID`: use :func:`char_set`)."""

    ranges: Ranges
    shortest: int = 1
    longest: int | None = 1


@dataclass(frozen=True, eq=False)
class Concat:
    """Its items one after the other."""

    items: tuple[Node, ...]
    shortest: int
    longest: int | None


@dataclass(frozen=True, eq=False)
class Union:
    """Any one of its options."""

    options: tuple[Node, ...]
    shortest: int
    longest: int | None


@dataclass(frozen=True, eq=False)
class Repeat:
    """``item`` (which never matches the empty string) ``low..high`` times."""

    item: Node
    low: int
    high: int | None
    shortest: int
    longest: int | None


Node = CharSet | Concat | Union | Repeat
# No string at all.
VOID = CharSet(())
# The empty string only.
EMPTY = Concat((), 0, 0)
# Any one character a JSON string can hold; any number of them.
ANY = CharSet(DOMAIN)
ANY_STAR = Repeat(ANY, 0, None, 0, None)


def char_set(ranges: Ranges) -> Node:
    """One character from ``ranges`` that a JSON string can hold (:data:`VOID` if none)."""
    ranges = intersect(ranges, DOMAIN)
    if not ranges:
        return VOID
    return ANY if ranges == DOMAIN else CharSet(ranges)


def _mul(a: int | None, b: int | None) -> int | None:
    return None if a is None or b is None else a * b


def concat(items: Iterable[Node]) -> Node:
    """The sequence of ``items`` (nested sequences flattened)."""
    flat: list[Node] = []
    for item in items:
        if item is VOID:
            return VOID
        flat.extend(item.items if isinstance(item, Concat) else [item])
    if len(flat) == 1:
        return flat[0]
    longs = [i.longest for i in flat]
    longest = None if None in longs else sum(x for x in longs if x is not None)
    return Concat(tuple(flat), sum(i.shortest for i in flat), longest)


def union(options: Iterable[Node]) -> Node:
    """Any of ``options`` (nested alternatives flattened, duplicates dropped)."""
    flat: list[Node] = []
    for option in options:
        flat.extend(option.options if isinstance(option, Union) else [option])
    unique = list(dict.fromkeys(o for o in flat if o is not VOID))
    if any(o is ANY_STAR for o in unique):
        return ANY_STAR  # every string: the other options add nothing
    if len(unique) <= 1:
        return unique[0] if unique else VOID
    longs = [o.longest for o in unique]
    longest = None if None in longs else max(x for x in longs if x is not None)
    return Union(tuple(unique), min(o.shortest for o in unique), longest)


def _non_empty(node: Node) -> Node:
    """The strings of ``node`` except the empty one."""
    if node.shortest > 0:
        return node
    if isinstance(node, Repeat):
        return VOID if node.high == 0 else repeat(node.item, max(node.low, 1), node.high)
    if isinstance(node, Union):
        return union(_non_empty(o) for o in node.options)
    if isinstance(node, Concat):  # every item may be empty: the first non-empty one leads
        items = node.items
        return union(concat([_non_empty(items[i]), *items[i + 1 :]]) for i in range(len(items)))
    return node


def repeat(item: Node, low: int, high: int | None) -> Node:
    """``item`` ``low..high`` times (``None``: no limit), normalized as the module says."""
    if high == 0:
        return EMPTY
    if item.shortest == 0:
        # with x optional, x{m,n} is (x without ""){0,n}; and a repeated rule must consume
        # something, or llama.cpp sees left recursion
        item, low = _non_empty(item), 0
    if item is VOID:
        return EMPTY if low == 0 else VOID
    if low == high == 1:
        return item
    if item is ANY and low == 0 and high is None:
        return ANY_STAR
    if isinstance(item, Repeat) and item.high is None and (low > 0 or item.low == 1):
        # (x{a,}){m,n} is x{a*m,}: nesting would only make the grammar ambiguous
        inner = item
        item, low, high = inner.item, inner.low * low, None
    return Repeat(item, low, high, item.shortest * low, _mul(item.longest, high))


def least_at_edge(node: Node, edge: int) -> Node:
    """``node`` with a repeat at its ``edge`` (0 or -1) cut to its least count, for a side open
    to any characters: they absorb the other copies (the language is the same), and the grammar
    is less ambiguous."""
    items: list[Node] = list(node.items) if isinstance(node, Concat) else [node]
    last = items[edge]
    if isinstance(last, Repeat) and last.high != last.low:
        items[edge] = repeat(last.item, last.low, last.low)
    return concat(items)


# -- minLength / maxLength -----------------------------------------------------------------------

# Narrowing steps before giving up (ordinary patterns take a few per node).
_MAX_NARROWING_STEPS = 20_000


def _spread(amount: int, rooms: list[int | None]) -> list[int]:
    """Up to ``amount`` shared as evenly as the ``rooms`` (capacities; ``None``: any) allow."""
    shares = [0] * len(rooms)
    open_ = [i for i, room in enumerate(rooms) if room is None or room > 0]
    while amount > 0 and open_:
        each = max(amount // len(open_), 1)
        for i in list(open_):
            room = rooms[i]
            give = min(each, amount) if room is None else min(each, amount, room - shares[i])
            shares[i] += give
            amount -= give
            if room is not None and shares[i] == room:
                open_.remove(i)
            if amount == 0:
                break
    return shares


def narrow(node: Node, low: int, high: int | None) -> Node:
    """The strings of ``node`` with ``low..high`` characters (``None``: no limit): all of them
    where the tree can say so, else a subset; :data:`VOID` when none is found.

    Raises:
        ValueError: the tree is too intricate to narrow within a bounded amount of work.
    """
    return _Narrowing().narrow(node, low, high)


class _Narrowing:
    """One narrowing, with a work limit: a shared subtree may be narrowed once per path, with a
    different length range each time, and paths multiply."""

    def __init__(self) -> None:
        self.steps_left = _MAX_NARROWING_STEPS
        # by node identity and range; the node is kept too, so that its id stays its own
        self.done: dict[tuple[int, int, int | None], tuple[Node, Node]] = {}

    def narrow(self, node: Node, low: int, high: int | None) -> Node:
        key = (id(node), low, high)
        if key not in self.done:
            self.steps_left -= 1
            if self.steps_left < 0:
                raise ValueError("too intricate to narrow")
            self.done[key] = (node, self.step(node, low, high))
        return self.done[key][1]

    def step(self, node: Node, low: int, high: int | None) -> Node:
        longest = node.longest
        if node.shortest >= low and (high is None or (longest is not None and longest <= high)):
            return node
        if (high is not None and node.shortest > high) or (longest is not None and longest < low):
            return VOID
        if isinstance(node, Union):
            return union(self.narrow(option, low, high) for option in node.options)
        if isinstance(node, Repeat):
            return self.narrow_repeat(node, low, high)
        if isinstance(node, Concat):
            return self.narrow_concat(node, low, high)
        return node  # one character: decided above

    def narrow_repeat(self, node: Repeat, low: int, high: int | None) -> Node:
        item = node.item
        # enough copies that even the shortest ones reach ``low``
        count_low = max(node.low, -(-low // item.shortest))
        if high is None:
            if node.high is not None and count_low > node.high:
                return VOID
            return repeat(item, count_low, node.high)
        if item.longest != item.shortest:
            # copies of varying length: each gets a budget, about sqrt(high), so that both the
            # number of copies and their lengths keep some freedom
            budget = max(item.shortest, math.isqrt(high))
            if count_low:
                budget = min(budget, high // count_low)
            item = self.narrow(item, item.shortest, budget)
            if item is VOID:
                return EMPTY if count_low == 0 else VOID
        assert item.longest is not None
        count_high = high // item.longest
        if node.high is not None:
            count_high = min(count_high, node.high)
        if count_low > count_high:
            return VOID
        return repeat(item, count_low, count_high)

    def narrow_concat(self, node: Concat, low: int, high: int | None) -> Node:
        """Share the length range among the items of varying length, as evenly as they allow."""
        items = node.items
        loose = [k for k, item in enumerate(items) if item.longest != item.shortest]
        fixed = sum(item.shortest for k, item in enumerate(items) if k not in loose)
        lows = [items[k].shortest for k in loose]
        rooms: list[int | None] = []
        for k in loose:
            longest = items[k].longest
            rooms.append(None if longest is None else longest - items[k].shortest)
        need = max(low - fixed - sum(lows), 0)
        raise_by = _spread(need, rooms)
        if sum(raise_by) < need:
            return VOID
        lows = [a + b for a, b in zip(lows, raise_by, strict=True)]
        highs = [items[k].longest for k in loose]
        if high is not None:
            slack = high - fixed - sum(lows)
            if slack < 0:
                return VOID
            rooms = [None if h is None else h - a for a, h in zip(lows, highs, strict=True)]
            grow = _spread(slack, rooms)
            highs = [a + b for a, b in zip(lows, grow, strict=True)]
        narrowed = list(items)
        for k, a, h in zip(loose, lows, highs, strict=True):
            narrowed[k] = self.narrow(items[k], a, h)
        return concat(narrowed)
