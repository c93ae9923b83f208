"""GBNF building blocks: text helpers, the fixed JSON and string-format rules, a rule table.

Shared by the JSON-schema converter (``json_grammar``) and the numeric ranges
(``numeric_grammar``); schema keywords themselves are read only by the converter.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from ..errors import SchemaNotSupportedError

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
