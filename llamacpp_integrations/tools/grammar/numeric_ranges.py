"""Numeric keywords as GBNF: integer and decimal ranges built digit by digit, bounds exact.

:func:`number_rule` reads ``minimum`` / ``maximum`` / ``exclusiveMinimum`` / ``exclusiveMaximum``
(numeric draft 2020 form and boolean draft 4 form), ``multipleOf`` (1 only) and the OpenAPI
integer formats, and writes the rule for the numbers within the bounds (a subset of them: no
exponent, at most ``MAX_SIGNIFICANT_DIGITS`` significant digits).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

from .fixed_rules import DEFAULT_FRACTION_DIGITS, MAX_INT_DIGITS, MAX_SIGNIFICANT_DIGITS
from .gbnf import GrammarRules, alt, digit_class, group, literal, repeat_suffix, seq
from .schema_keywords import not_supported, pointer

__all__ = ["number_rule"]

# OpenAPI integer formats, honoured as bounds on integers (JSON Schema ignores them there).
_INTEGER_FORMAT_BITS = {"int32": 31, "int64": 63}


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

    def __init__(self, rules: GrammarRules, *, integer: bool, fraction_digits: int) -> None:
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
                options.append(seq('"-"', group(negative)))
        return alt(options) if options else None

    def _fraction(self, k: int) -> str:
        return self._rules.add(f"frac-{k}", f'"." [0-9]{repeat_suffix(1, k)}') if k else ""

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
                options.append(seq("[0-9]", frac_opt))
                first = 2
            if first <= last:
                options.append(
                    seq("[1-9]", self._rules.repeat("[0-9]", first - 1, last - 1), frac_opt)
                )
        return alt(options) if options else None

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
            return seq(self._rules.repeat("[0-9]", length - pos, length - pos), optional_fraction)

        def zeros(pos: int) -> str:
            """The suffix of value zero (no trailing fraction zeros)."""
            return literal("0" * (length - pos)) if pos < length else ""

        def nonzero(pos: int) -> str | None:
            """A suffix with some non-zero digit."""
            if pos >= end:
                return None
            options = [seq(dot(pos), "[1-9]", tail(pos + 1))]
            rest = nonzero(pos + 1)
            if rest is not None:
                options.append(seq(dot(pos), '"0"', rest))
            return alt(options)

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
                        options.append(seq(dot(pos), digit_class(a, b), cont))
            return alt(options) if options else None

        return within(0, low is not None, high is not None)


def _decimal(value: Any, path: str) -> Decimal:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise not_supported("a numeric bound must be a number", path)
    if isinstance(value, float):
        if not math.isfinite(value):
            raise not_supported("a numeric bound must be finite", path)
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
            out.append(_Bound(_decimal(schema[key], pointer(path, key)), strict is True))
        elif isinstance(strict, bool) and strict:
            raise not_supported(
                f"boolean '{strict_key}' without '{key}'", pointer(path, strict_key)
            )
        if strict is not None and not isinstance(strict, bool):
            out.append(_Bound(_decimal(strict, pointer(path, strict_key)), True))
    low = max(lows, key=lambda b: (b.value, b.exclusive), default=None)
    high = min(highs, key=lambda b: (b.value, not b.exclusive), default=None)
    return low, high


def number_rule(rules: GrammarRules, schema: Mapping[str, Any], path: str, *, integer: bool) -> str:
    """The rule for the integers (or numbers) ``schema`` at ``path`` accepts, added to ``rules``.

    Raises:
        SchemaNotSupportedError: a bound is not a finite number, ``multipleOf`` is not 1, or
            no number within the bounds can be written.
    """
    if "multipleOf" in schema:
        step = schema["multipleOf"]
        if isinstance(step, bool) or not isinstance(step, int | float) or step != 1:
            raise not_supported(
                "'multipleOf' other than 1 is not supported", pointer(path, "multipleOf")
            )
        integer = True
    low, high = _number_bounds(schema, path)
    fmt = schema.get("format")
    if integer and isinstance(fmt, str) and fmt in _INTEGER_FORMAT_BITS:
        bits = _INTEGER_FORMAT_BITS[fmt]
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
        rules, integer=integer, fraction_digits=max(DEFAULT_FRACTION_DIGITS, needed)
    )
    expr = builder.expression(low, high)
    if expr is None:
        raise not_supported(
            f"no {'integer' if integer else 'number'} within the bounds can be generated",
            path,
        )
    name = "integer" if integer else "number"
    parts = [f"{'ge' if not b.exclusive else 'gt'}-{b.value}" for b in (low,) if b]
    parts += [f"{'le' if not b.exclusive else 'lt'}-{b.value}" for b in (high,) if b]
    return rules.add("-".join([name, *parts]), expr)
