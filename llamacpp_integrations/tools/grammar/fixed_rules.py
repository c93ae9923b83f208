"""The fixed rules a grammar refers to by name, and the shape of the numbers it writes.

Fixed rules have the same body in every grammar: ``ws`` (whitespace between tokens), the
``json-*`` rules for any JSON value, ``boolean``, ``null`` and the string formats' ``fmt-*``
rules. :class:`~.gbnf.GrammarRules` adds one (and the fixed rules it refers to) on first use.
The number-shape limits bound both the free-form ``json-number`` rule and the numeric ranges.
"""

from __future__ import annotations

from .string_formats import FORMAT_RULE_DEPENDENCIES, FORMAT_RULES

__all__ = [
    "DEFAULT_FRACTION_DIGITS",
    "FIXED_RULES",
    "FIXED_RULE_DEPENDENCIES",
    "MAX_INT_DIGITS",
    "MAX_SIGNIFICANT_DIGITS",
]

# Longest unbounded integer part (below 2**53, so JavaScript reads it exactly too).
MAX_INT_DIGITS = 15
# Significant digits of a generated number: decimals of at most 15 digits round-trip through
# IEEE doubles, so a value strictly above an exclusive bound never parses to the bound itself.
MAX_SIGNIFICANT_DIGITS = 15
# Fraction digits of a generated number when the bounds do not need more.
DEFAULT_FRACTION_DIGITS = 6
# Blanks allowed after the space / newline between two tokens: bounded, so that a small model
# cannot loop on spaces.
_WS_BLANKS = 16

_HEX = "[0-9a-fA-F]"
_JSON_RULES: dict[str, str] = {
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
}
_JSON_RULE_DEPENDENCIES: dict[str, tuple[str, ...]] = {
    "json-string": ("json-char",),
    "json-value": ("json-object", "json-array", "json-string", "json-number"),
    "json-member": ("json-string", "ws", "json-value"),
    "json-object": ("ws", "json-member"),
    "json-array": ("ws", "json-value"),
}

# Body of every fixed rule, by name.
FIXED_RULES: dict[str, str] = {**_JSON_RULES, **FORMAT_RULES}
# Fixed rules each fixed rule refers to (absent: none).
FIXED_RULE_DEPENDENCIES: dict[str, tuple[str, ...]] = {
    **_JSON_RULE_DEPENDENCIES,
    **FORMAT_RULE_DEPENDENCIES,
}
