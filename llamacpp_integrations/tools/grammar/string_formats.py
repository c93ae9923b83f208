"""The string ``format`` values the converter honours, as fixed GBNF rules.

Each format is a conservative subset of its RFC (3339 for dates and times, 4122 for UUIDs, 5321
for e-mail addresses) that every validator accepts. This module owns the rules' bodies and the
length range of the strings each format produces; the rule set adds the rules on first use.

``uuid1`` to ``uuid5`` are not JSON Schema formats, but pydantic writes them (``UUID4`` fields)
and llama.cpp honours them; pydantic checks the version, so the rules fix the version digit and
the RFC 4122 variant (``[89ab]``).
"""

from __future__ import annotations

from typing import NamedTuple

__all__ = ["FORMAT_RULES", "FORMAT_RULE_DEPENDENCIES", "STRING_FORMATS", "StringFormat"]


class StringFormat(NamedTuple):
    """How one ``format`` is written: its fixed rule and the length range of its strings (in
    characters; all formats are ASCII and need no escapes)."""

    rule: str
    shortest: int
    longest: int


# Bodies of the format rules, by rule name.
FORMAT_RULES: dict[str, str] = {
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
    **{
        f"fmt-uuid{v}": (
            f'[0-9a-f]{{8}} "-" [0-9a-f]{{4}} "-{v}" [0-9a-f]{{3}} "-" [89ab] [0-9a-f]{{3}} "-" '
            "[0-9a-f]{12}"
        )
        for v in range(1, 6)
    },
    "fmt-email": ('fmt-atom ("." fmt-atom){0,2} "@" (fmt-label "."){1,3} [a-zA-Z]{2,10}'),
    "fmt-atom": "[a-zA-Z0-9_+-]{1,16}",
    "fmt-label": "[a-zA-Z0-9] ([a-zA-Z0-9-]{0,14} [a-zA-Z0-9])?",
    "fmt-ipv4": 'fmt-octet "." fmt-octet "." fmt-octet "." fmt-octet',
    "fmt-octet": '"25" [0-5] | "2" [0-4] [0-9] | "1" [0-9] [0-9] | [1-9] [0-9] | [0-9]',
}
# Format rules a format rule refers to, so that only what is used is emitted.
FORMAT_RULE_DEPENDENCIES: dict[str, tuple[str, ...]] = {
    "fmt-date": ("fmt-day31", "fmt-day30", "fmt-day28"),
    "fmt-time": ("fmt-hour",),
    "fmt-date-time": ("fmt-date", "fmt-time"),
    "fmt-email": ("fmt-atom", "fmt-label"),
    "fmt-ipv4": ("fmt-octet",),
}
# The supported values of ``format`` on strings.
STRING_FORMATS: dict[str, StringFormat] = {
    "date": StringFormat("fmt-date", 10, 10),
    "time": StringFormat("fmt-time", 9, 21),
    "date-time": StringFormat("fmt-date-time", 20, 32),
    "uuid": StringFormat("fmt-uuid", 36, 36),
    **{f"uuid{v}": StringFormat(f"fmt-uuid{v}", 36, 36) for v in range(1, 6)},
    "email": StringFormat("fmt-email", 6, 50 + 1 + 3 * 17 + 10),
    "ipv4": StringFormat("fmt-ipv4", 7, 15),
}
