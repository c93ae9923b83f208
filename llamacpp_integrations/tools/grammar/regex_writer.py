"""Writing a pattern's tree (:mod:`.regex_tree`) as the GBNF rule of a JSON string.

The rule writes the string's JSON text, quotes included, and its *decoded* value is a string of
the tree: ``"``, ``\\`` and control characters are written as the escapes ``json.dumps`` writes
(``\\"``, ``\\n``, ``\\u001f``), every other character as itself, one spelling per character;
:data:`~.regex_tree.ANY` (the open side of an unanchored pattern) is the fixed ``json-char``,
which takes escapes of any form.

Invariants: an item under a repetition operator is one rule name, class or literal (llama.cpp
limits the rules a repetition expands to); a subtree shared in the tree is written once; a
repeat allows at most 10,000 optional copies (fewer strings, a small grammar).
"""

from __future__ import annotations

import json
import re

from .gbnf import GrammarRules, alt, literal, seq
from .regex_tree import (
    ANY_STAR,
    DOMAIN,
    CharSet,
    Concat,
    Node,
    Ranges,
    Union,
    chars,
    code_points,
    complement,
    intersect,
    minus,
)

__all__ = ["string_rule"]

# Repetitions beyond this many optional copies are cut to it: the grammar stays small and the
# language only shrinks (no model writes ten thousand copies of a group inside one string).
_MAX_OPTIONAL_REPEATS = 10_000

# JSON's short escapes, by the code point they stand for.
_SHORT_ESCAPES = {0x22: '"', 0x5C: "\\", 0x08: "b", 0x09: "t", 0x0A: "n", 0x0C: "f", 0x0D: "r"}
# Code points a JSON string never holds raw.
_ESCAPED = code_points([(0x00, 0x1F), (0x22, 0x22), (0x5C, 0x5C)])
# A GBNF item a repetition suffix may follow without adding rules inside llama.cpp's count limit.
_SINGLE_ITEM = re.compile(r'[A-Za-z0-9-]+|"(?:[^"\\]|\\.)*"|\[(?:[^\]\\]|\\.)*\]')


def _class_char(code: int) -> str:
    if 0x20 <= code < 0x7F and chr(code) not in '"\\]-^[':
        return chr(code)
    if code <= 0xFF:
        return f"\\x{code:02X}"
    return f"\\u{code:04X}" if code <= 0xFFFF else f"\\U{code:08X}"


def _char_class(ranges: Ranges) -> str:
    """A GBNF class for ``ranges``: a literal for one character, else the shorter of the class
    listing them and the negated one listing the rest."""
    if len(ranges) == 1 and ranges[0][0] == ranges[0][1]:
        return literal(chr(ranges[0][0]))

    def listing(pairs: Ranges) -> str:
        return "".join(
            _class_char(lo) + ("" if hi - lo < 2 else "-") + _class_char(hi)
            if hi > lo
            else _class_char(lo)
            for lo, hi in pairs
        )

    positive, negative = f"[{listing(ranges)}]", f"[^{listing(complement(ranges))}]"
    return positive if len(positive) <= len(negative) else negative


def _json_chars(ranges: Ranges) -> str:
    """One character of ``ranges`` written as JSON string text, escaped as ``json.dumps`` does."""
    if len(ranges) == 1 and ranges[0][0] == ranges[0][1]:
        return literal(json.dumps(chr(ranges[0][0]), ensure_ascii=False)[1:-1])
    options: list[str] = []
    raw = minus(ranges, _ESCAPED)
    if raw:
        options.append(_char_class(raw))
    escaped = [code for lo, hi in intersect(ranges, _ESCAPED) for code in range(lo, hi + 1)]
    short = chars("".join(_SHORT_ESCAPES[c] for c in escaped if c in _SHORT_ESCAPES))
    if short:
        options.append(seq(literal("\\"), _char_class(short)))
    for nibble in (0, 1):  # the other control characters: \u0000 to \u001f
        digits = "".join(f"{c & 0xF:x}" for c in escaped if c >> 4 == nibble)
        digits = "".join(d for d in digits if int(d, 16) + 16 * nibble not in _SHORT_ESCAPES)
        if digits:
            options.append(seq(literal(f"\\u00{nibble}"), _char_class(chars(digits))))
    return alt(options)


class _Writer:
    """Writes a tree as GBNF expressions, naming sub-rules in ``rules``."""

    def __init__(self, rules: GrammarRules) -> None:
        self.rules = rules
        # what each node was written as, by identity (the node kept, so its id stays its own):
        # subtrees are shared, and a shared one is written once, as a rule, so the grammar grows
        # with the tree's nodes, not with its paths
        self.written: dict[int, tuple[Node, str]] = {}

    def single(self, expr: str, hint: str) -> str:
        """``expr`` as one item: itself if it is one, else a rule of its own."""
        return expr if _SINGLE_ITEM.fullmatch(expr) else self.rules.add(hint, expr)

    def expr(self, node: Node) -> str:
        """``node`` as a GBNF expression (a sequence, or a grouped alternation)."""
        key = id(node)
        if key in self.written:  # met again: a rule of its own
            text = self.single(self.written[key][1], "pattern-part")
        else:
            text = self.write(node)
        self.written[key] = (node, text)
        return text

    def write(self, node: Node) -> str:
        if isinstance(node, CharSet):
            if node.ranges == DOMAIN:
                return self.rules.fixed("json-char")  # any character, any escape
            return self.single(_json_chars(node.ranges), "pattern-char")
        if isinstance(node, Concat):
            return seq(*(self.expr(item) for item in node.items))
        if isinstance(node, Union):
            options = [self.expr(option) for option in node.options]
            if "" not in options:
                return alt(options)
            # optional: as "rule?", so that llama.cpp's count of rules under a repetition
            # operator stays at one
            return self.single(alt([o for o in options if o]), "pattern-part") + "?"
        high = node.high
        if high is not None and high - node.low > _MAX_OPTIONAL_REPEATS:
            high = node.low + _MAX_OPTIONAL_REPEATS
        return self.rules.repeat(self.single(self.expr(node.item), "pattern-part"), node.low, high)


def string_rule(rules: GrammarRules, node: Node) -> str:
    """The name of a rule (added to ``rules``) for a JSON string, quotes included, whose decoded
    value is one of the strings of ``node``."""
    if node is ANY_STAR:
        return rules.fixed("json-string")
    quote = literal('"')
    return rules.add("string-pattern", seq(quote, _Writer(rules).expr(node), quote))
