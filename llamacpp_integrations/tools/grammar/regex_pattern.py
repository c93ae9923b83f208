"""A string schema's ``pattern`` as GBNF: a regular-expression subset read into rules.

:func:`pattern_rule` parses the pattern into the tree of :mod:`.regex_tree` (character sets,
sequences, alternatives, counted repeats), narrows it to ``minLength`` / ``maxLength`` when they
are given, and has :mod:`.regex_writer` write it into a :class:`~.gbnf.GrammarRules` as the rule
of a whole JSON string, quotes included.

The subset: literal characters and escapes (``\\.`` and other escaped symbols, ``\\n`` ``\\t``
``\\r`` ``\\f`` ``\\v`` ``\\0``, ``\\xHH``, ``\\uHHHH``), the classes ``\\d`` ``\\w`` ``\\s``
``\\D`` ``\\W`` ``\\S`` and ``.``, bracket classes with ranges and negation, groups (capturing,
``(?:...)``, named), alternation, the quantifiers ``*`` ``+`` ``?`` ``{n}`` ``{n,}`` ``{n,m}``
(lazy ones too: the same strings), and ``^`` / ``$`` at the ends of the pattern or of its
top-level alternatives.

Invariants:

* Search semantics, as JSON Schema wants (ECMA-262): a side of the pattern (or of a top-level
  alternative) without ``^`` / ``$`` lets any characters come before / after.
* The grammar writes the string's JSON text, and its *decoded* value matches the pattern
  (escaped as ``json.dumps`` escapes); a side left open by a missing anchor accepts any JSON
  string character, escapes of any form included.
* Where regex engines disagree, the grammar takes what all of them match, so that every
  validator (ECMA-262, Python ``re``, Rust ``regex`` as pydantic uses) accepts what it writes:
  ``\\d`` ``\\w`` ``\\s`` are their ASCII sets; ``\\D`` ``\\W`` (and negated classes naming
  ``\\d`` / ``\\w``) exclude non-ASCII characters (some engines count Arabic digits as ``\\d``);
  ``\\S`` (and negated classes naming ``\\s``) exclude every character some engine counts as
  whitespace; ``.`` excludes ``\\n``, ``\\r``, U+2028 and U+2029. Syntax the engines read
  differently raises instead (``[]``, ``{,n}``, ``\\a``, octal and surrogate escapes).
* Narrowing never widens: capping a repeat at 10,000 optional copies, sharing a length range or
  dropping an alternative keeps a subset of the strings, so the grammar stays sound.

Errors are :class:`~llamacpp_integrations.errors.SchemaNotSupportedError` at ``.../pattern``,
naming the feature and its offset in the pattern, for unsupported syntax (backreferences,
lookaround, word boundaries, inline flags, ``\\p{...}``, anchors inside the pattern) and for
malformed patterns alike.
"""

from __future__ import annotations

import re

from ...errors import SchemaNotSupportedError
from .gbnf import GrammarRules
from .regex_tree import (
    ANY_STAR,
    DOMAIN,
    MAX_CODE_POINT,
    VOID,
    Node,
    Ranges,
    char_set,
    chars,
    code_points,
    complement,
    concat,
    least_at_edge,
    minus,
    narrow,
    repeat,
    union,
)
from .regex_writer import string_rule
from .schema_keywords import not_supported, pointer

__all__ = ["pattern_rule"]

# Deepest group nesting read (the tree is walked recursively).
_MAX_DEPTH = 100


_NON_ASCII: Ranges = ((0x80, MAX_CODE_POINT),)
_DOT = minus(DOMAIN, chars("\n\r\u2028\u2029"))
_DIGIT = code_points([(0x30, 0x39)])
_WORD = code_points([(0x30, 0x39), (0x41, 0x5A), (0x5F, 0x5F), (0x61, 0x7A)])
_SPACE = chars("\t\n\v\f\r ")
# Whitespace for any engine: Python's str.isspace, Unicode White_Space and ECMA-262 (U+FEFF).
_ANY_SPACE = code_points(
    [
        (0x09, 0x0D),
        (0x1C, 0x20),
        (0x2000, 0x200A),
        (0x2028, 0x2029),
        *chars("\x85\xa0\u1680\u202f\u205f\u3000\ufeff"),
    ]
)
# Class escapes: (what every engine matches, what some engine may match).
_SHORTHANDS: dict[str, tuple[Ranges, Ranges]] = {
    "d": (_DIGIT, code_points(_DIGIT + _NON_ASCII)),
    "w": (_WORD, code_points(_WORD + _NON_ASCII)),
    "s": (_SPACE, _ANY_SPACE),
    "D": (complement(code_points(_DIGIT + _NON_ASCII)), complement(_DIGIT)),
    "W": (complement(code_points(_WORD + _NON_ASCII)), complement(_WORD)),
    "S": (complement(_ANY_SPACE), complement(_SPACE)),
}
_CONTROL_ESCAPES = {"n": "\n", "t": "\t", "r": "\r", "f": "\f", "v": "\v"}
_UNSUPPORTED_ESCAPES = {
    "b": "word boundary '\\b'",
    "B": "word boundary '\\B'",
    "k": "named backreference '\\k'",
    "p": "Unicode property escape '\\p'",
    "P": "Unicode property escape '\\P'",
    "c": "control escape '\\c'",
}


# -- parsing -------------------------------------------------------------------------------------

_COUNTS = re.compile(r"\{(\d+)(,(\d*))?\}")


class _Parser:
    """Recursive descent over the pattern, building the tree (anchors resolved into it)."""

    def __init__(self, pattern: str, where: str) -> None:
        self.src = pattern
        self.i = 0
        self.where = where

    def unsupported(self, feature: str, at: int | None = None) -> SchemaNotSupportedError:
        offset = self.i if at is None else at
        return not_supported(f"{feature} (offset {offset}) is not supported", self.where)

    def invalid(self, problem: str, at: int | None = None) -> SchemaNotSupportedError:
        offset = self.i if at is None else at
        return not_supported(f"invalid pattern: {problem} at offset {offset}", self.where)

    def peek(self, ahead: int = 0) -> str:
        j = self.i + ahead
        return self.src[j] if j < len(self.src) else ""

    def parse(self) -> Node:
        """The whole pattern, its unanchored sides open to any characters."""
        branches = [self.branch(0, top=True)]
        while self.peek() == "|":
            self.i += 1
            branches.append(self.branch(0, top=True))
        if self.i < len(self.src):
            raise self.invalid("unbalanced ')'")
        return union(branches)

    def branch(self, depth: int, top: bool) -> Node:
        start = end = False
        if top and self.peek() == "^":
            self.i, start = self.i + 1, True
        items: list[Node] = []
        while self.peek() not in ("", "|", ")"):
            ch = self.peek()
            if ch == "$" and top and self.peek(1) in ("", "|"):
                self.i, end = self.i + 1, True
                break
            if ch in "^$":
                raise self.unsupported(
                    f"'{ch}' other than at an end of the pattern or of a top-level alternative"
                )
            items.append(self.quantified(self.atom(depth)))
        node = concat(items)
        if not top:
            return node
        if (not start or not end) and node.shortest == 0:
            return ANY_STAR  # an open side and an optional body: every string matches
        if not start:
            node = least_at_edge(node, 0)
        if not end:
            node = least_at_edge(node, -1)
        return concat([*([] if start else [ANY_STAR]), node, *([] if end else [ANY_STAR])])

    def quantified(self, atom: Node) -> Node:
        """``atom`` with the repetition that follows it, if one does."""
        at = self.i
        counts = self.counts()
        if counts is None:
            return atom
        low, high = counts
        if self.peek() == "?":
            self.i += 1  # lazy: the same strings
        if self.peek() in ("*", "+", "?") or (
            self.peek() == "{" and _COUNTS.match(self.src, self.i)
        ):
            raise self.invalid("a repeat of a repeat")
        if high is not None and high < low:
            raise self.invalid(f"repeat count {{{low},{high}}} out of order", at)
        return repeat(atom, low, high)

    def counts(self) -> tuple[int, int | None] | None:
        ch = self.peek()
        if ch in ("*", "+", "?"):
            self.i += 1
            return {"*": (0, None), "+": (1, None), "?": (0, 1)}[ch]
        if ch != "{":
            return None
        m = _COUNTS.match(self.src, self.i)
        if m is None:
            if re.compile(r"\{,\d+\}").match(self.src, self.i):
                raise self.unsupported("'{,n}' (a repeat in Python, literal text in ECMA-262)")
            return None  # a '{' that starts no count is a literal
        self.i = m.end()
        low = int(m.group(1))
        if m.group(2) is None:
            return low, low
        return low, int(m.group(3)) if m.group(3) else None

    def atom(self, depth: int) -> Node:
        at, ch = self.i, self.peek()
        if ch in ("*", "+", "?") or (ch == "{" and _COUNTS.match(self.src, self.i)):
            raise self.invalid("nothing to repeat")
        self.i += 1
        if ch == "(":
            return self.group(depth + 1, at)
        if ch == "[":
            return char_set(self.char_class(at)[0])
        if ch == ".":
            return char_set(_DOT)
        if ch == "\\":
            escaped = self.escape(in_class=False)
            if isinstance(escaped, int):
                return self.char(escaped)
            return char_set(escaped[0])
        return self.char(ord(ch))

    def char(self, code: int) -> Node:
        if 0xD800 <= code <= 0xDFFF:
            raise self.unsupported("a lone surrogate", self.i - 1)
        return char_set(((code, code),))

    def group(self, depth: int, at: int) -> Node:
        if depth > _MAX_DEPTH:
            raise self.unsupported(f"group nesting deeper than {_MAX_DEPTH}", at)
        if self.peek() == "?":
            head = self.src[self.i : self.i + 3]
            if head.startswith("?:"):
                self.i += 2
            elif head.startswith(("?=", "?!")):
                raise self.unsupported(f"lookahead '({head[:2]}'", at)
            elif head in ("?<=", "?<!"):
                raise self.unsupported(f"lookbehind '({head}'", at)
            elif head.startswith(("?<", "?P<")):  # a named group: its name changes nothing
                close = self.src.find(">", self.i)
                name = self.src[self.i + (3 if head.startswith("?P") else 2) : close]
                if close < 0 or not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", name):
                    raise self.invalid("bad group name", at)
                self.i = close + 1
            else:
                shown = head if head.startswith("?P") else head[:2]
                raise self.unsupported(f"group syntax '({shown}' (flags, comments...)", at)
        options = [self.branch(depth, top=False)]
        while self.peek() == "|":
            self.i += 1
            options.append(self.branch(depth, top=False))
        if self.peek() != ")":
            raise self.invalid("'(' without its ')'", at)
        self.i += 1
        return union(options)

    def char_class(self, at: int) -> tuple[Ranges, Ranges]:
        """A ``[...]`` (after its ``[``): (what every engine matches, what some engine may)."""
        negated = self.peek() == "^"
        self.i += negated
        if self.peek() == "]":
            raise self.unsupported("'[]' / ']' first in a class (read differently by engines)")
        certain: list[tuple[int, int]] = []
        possible: list[tuple[int, int]] = []
        while self.peek() != "]":
            if self.peek() == "":
                raise self.invalid("'[' without its ']'", at)
            if self.src.startswith(("[:", "[=", "[."), self.i):
                raise self.unsupported("POSIX class '" + self.src[self.i : self.i + 2] + "'")
            first = self.class_atom()
            if self.peek() == "-" and self.peek(1) not in ("]", ""):
                dash = self.i
                self.i += 1
                last = self.class_atom()
                if not isinstance(first, int) or not isinstance(last, int):
                    raise self.unsupported("a class escape as a range end", dash)
                if last < first:
                    raise self.invalid("character range out of order", dash)
                certain.append((first, last))
                possible.append((first, last))
            elif isinstance(first, int):
                certain.append((first, first))
                possible.append((first, first))
            else:
                certain.extend(first[0])
                possible.extend(first[1])
        self.i += 1
        if negated:
            return complement(code_points(possible)), complement(code_points(certain))
        return code_points(certain), code_points(possible)

    def class_atom(self) -> int | tuple[Ranges, Ranges]:
        ch = self.peek()
        self.i += 1
        if ch != "\\":
            return ord(ch)
        if self.peek() == "b":
            self.i += 1
            return 0x08  # backspace inside a class, in every engine
        if self.peek() == "-":
            self.i += 1
            return ord("-")
        return self.escape(in_class=True)

    def escape(self, in_class: bool) -> int | tuple[Ranges, Ranges]:
        """What follows a backslash: one code point, or a class escape's two sets."""
        at = self.i - 1
        ch = self.peek()
        if ch == "":
            raise self.invalid("trailing backslash", at)
        self.i += 1
        if ch in _SHORTHANDS:
            return _SHORTHANDS[ch]
        if ch in _CONTROL_ESCAPES:
            return ord(_CONTROL_ESCAPES[ch])
        if ch == "0" and not self.peek().isdigit():
            return 0
        if ch in "xu":
            return self.hex_escape(ch, at)
        if ch.isdigit():
            what = "octal escape" if in_class or ch == "0" else "backreference"
            raise self.unsupported(f"{what} '\\{ch}'", at)
        if ch in _UNSUPPORTED_ESCAPES:
            raise self.unsupported(_UNSUPPORTED_ESCAPES[ch], at)
        if ch.isascii() and ch.isalnum():
            raise self.unsupported(f"escape '\\{ch}'", at)
        return ord(ch)  # an escaped symbol is itself

    def hex_escape(self, kind: str, at: int) -> int:
        width = 2 if kind == "x" else 4
        digits = self.src[self.i : self.i + width]
        if kind == "u" and self.peek() == "{":
            raise self.unsupported("'\\u{...}' escape", at)
        if not re.fullmatch(f"[0-9a-fA-F]{{{width}}}", digits):
            raise self.invalid(f"'\\{kind}' needs {width} hex digits", at)
        self.i += width
        code = int(digits, 16)
        if 0xD800 <= code <= 0xDFFF:
            # ECMA-262 reads a pair of these as one character, Python as two that no JSON
            # string holds: the engines disagree
            raise self.unsupported("a surrogate escape (write the character itself)", at)
        return code


# -- entry point ---------------------------------------------------------------------------------


def pattern_rule(
    rules: GrammarRules,
    pattern: object,
    path: str,
    min_length: int = 0,
    max_length: int | None = None,
) -> str:
    """The name of a rule for a JSON string (quotes included) whose value ``pattern`` matches
    (searched, as JSON Schema does) and has ``min_length..max_length`` characters.

    ``path`` is the string schema's place. With length bounds, the strings are narrowed where
    the pattern's parts vary in length (shares of the length range, as even as they allow).

    Raises:
        SchemaNotSupportedError: at ``path/pattern``: unsupported or malformed syntax (its
            feature and offset named), a pattern no JSON string matches, or no matching string
            found within the length bounds.
    """
    where = pointer(path, "pattern")
    if not isinstance(pattern, str):
        raise not_supported("'pattern' must be a string", where)
    node = _Parser(pattern, where).parse()
    if node is VOID:
        raise not_supported("no JSON string matches the pattern", where)
    if min_length > 0 or max_length is not None:
        try:
            node = narrow(node, min_length, max_length)
        except ValueError:
            raise not_supported(
                "the pattern is too intricate to fit 'minLength' / 'maxLength'", where
            ) from None
        if node is VOID:
            raise not_supported(
                "found no string matching the pattern within 'minLength' / 'maxLength'", where
            )
    return string_rule(rules, node)
