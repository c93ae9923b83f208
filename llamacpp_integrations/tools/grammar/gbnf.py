"""Writing GBNF (llama.cpp's grammar syntax): expressions, and the rule set they are named in.

The text helpers build expressions: :func:`literal`, :func:`seq`, :func:`alt`, :func:`group`,
:func:`digit_class` and :func:`repeat_suffix`. :class:`GrammarRules` collects named rules,
shares a rule between equal bodies, adds the fixed rules of :mod:`.fixed_rules` on first use,
writes repetitions within llama.cpp's limits and renders the grammar.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from .fixed_rules import FIXED_RULE_DEPENDENCIES, FIXED_RULES

__all__ = ["GrammarRules", "alt", "digit_class", "group", "literal", "repeat_suffix", "seq"]

# Largest repetition count written as one ``{m,n}``: llama.cpp refuses counts above 2000 and
# products of counts and repeated-rule size at or above 2000, so longer runs nest helper rules.
_REPEAT_LIMIT = 1000


# -- expressions ---------------------------------------------------------------------------------


def literal(text: str) -> str:
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


def seq(*parts: str) -> str:
    """Concatenation; adjacent plain literals are merged into one, empty parts are dropped."""
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


def group(expr: str) -> str:
    """``expr`` as one item an operator may follow: parenthesised unless it already is one."""
    return expr if _is_atom(expr) else f"({expr})"


def alt(options: Sequence[str]) -> str:
    """Alternation of sequences; an empty option makes the whole optional."""
    unique = list(dict.fromkeys(options))
    nullable = "" in unique
    rest = [option for option in unique if option]
    if not rest:
        return ""
    body = rest[0] if len(rest) == 1 else "(" + " | ".join(rest) + ")"
    return group(body) + "?" if nullable else body


def digit_class(low: int, high: int) -> str:
    """One decimal digit from ``low`` to ``high``: a literal when they are equal."""
    if low == high:
        return f'"{low}"'
    return f"[{low}-{high}]"


def repeat_suffix(low: int, high: int | None) -> str:
    """The repetition suffix for ``low..high`` (``None``: unbounded).

    Counts above llama.cpp's limits are not split here: :meth:`GrammarRules.repeat` does that.
    """
    if high is None:
        return {0: "*", 1: "+"}.get(low, f"{{{low},}}")
    if low == high:
        return "" if low == 1 else f"{{{low}}}"
    if (low, high) == (0, 1):
        return "?"
    return f"{{{low},{high}}}"


# -- the rule set --------------------------------------------------------------------------------


class GrammarRules:
    """Named rules of one grammar, deduplicated by body; fixed rules are added on first use."""

    def __init__(self) -> None:
        self._bodies: dict[str, str | None] = {}
        self._by_body: dict[str, str] = {}

    def _fresh(self, hint: str) -> str:
        base = re.sub(r"[^A-Za-z0-9]+", "-", hint).strip("-").lower()[:40].strip("-") or "rule"
        if base[0].isdigit():
            base = "r-" + base
        name, i = base, 2
        while name in self._bodies or name in FIXED_RULES or name == "root":
            name = f"{base}-{i}"
            i += 1
        return name

    def add(self, hint: str, body: str) -> str:
        """A rule with this body (an existing one if some rule has the same body); its name
        derives from ``hint``."""
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
        """A fresh rule name whose body comes later, through :meth:`define` (for recursion)."""
        name = self._fresh(hint)
        self._bodies[name] = None
        return name

    def define(self, name: str, body: str) -> None:
        """Give the rule ``name`` (from :meth:`reserve`) its body."""
        self._bodies[name] = body

    def fixed(self, name: str) -> str:
        """The fixed rule ``name`` (and what it refers to), added on first use."""
        if name not in self._bodies:
            self._bodies[name] = FIXED_RULES[name]
            for dependency in FIXED_RULE_DEPENDENCIES.get(name, ()):
                self.fixed(dependency)
        return name

    def render(self, root: str) -> str:
        """The grammar text: ``root ::= root``, then every defined rule in order of creation."""
        lines = [f"root ::= {root}"]
        lines += [f"{name} ::= {body}" for name, body in self._bodies.items() if body is not None]
        return "\n".join(lines) + "\n"

    def repeat(self, item: str, low: int, high: int | None) -> str:
        """``item`` (one rule name or character class) repeated ``low..high`` times."""
        if high is not None and high < low:
            raise ValueError("empty repetition")
        if low <= _REPEAT_LIMIT and (high is None or high <= _REPEAT_LIMIT):
            return "" if high == 0 else item + repeat_suffix(low, high)
        head = self._exactly(item, low)
        if high is None:
            return seq(head, f"{item}*")
        return seq(head, self._up_to(item, high - low))

    def _exactly(self, item: str, n: int) -> str:
        if n <= _REPEAT_LIMIT:
            return "" if n == 0 else item + repeat_suffix(n, n)
        block = self.add(
            f"{item}-x{_REPEAT_LIMIT}", item + repeat_suffix(_REPEAT_LIMIT, _REPEAT_LIMIT)
        )
        return seq(self._exactly(block, n // _REPEAT_LIMIT), self._exactly(item, n % _REPEAT_LIMIT))

    def _up_to(self, item: str, n: int) -> str:
        if n <= _REPEAT_LIMIT:
            return "" if n == 0 else item + repeat_suffix(0, n)
        block = self.add(
            f"{item}-x{_REPEAT_LIMIT}", item + repeat_suffix(_REPEAT_LIMIT, _REPEAT_LIMIT)
        )
        # 0..n = (block then 0..n-L) or 0..L-1
        longer = seq(block, self._up_to(item, n - _REPEAT_LIMIT))
        shorter = item + repeat_suffix(0, _REPEAT_LIMIT - 1)
        return self.add(f"{item}-upto-{n}", f"{longer} | {shorter}")
