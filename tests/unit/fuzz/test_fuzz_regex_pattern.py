"""String patterns as grammar, against Python's ``re``: strings ``re`` matches are accepted (as
JSON text), strings it does not match are refused, what the grammar produces matches, and random
patterns either raise the schema error or give a grammar whose productions match.

Where regex engines disagree (Unicode digits and word characters, Unicode whitespace, ``.`` and
``\\r``) the grammar takes the characters every engine agrees on, so exactness is checked over an
alphabet free of those, and soundness over any text, against ``re`` in both its Unicode and its
ASCII mode.
"""

from __future__ import annotations

import functools
import json
import random
import re
import warnings

from hypothesis import assume, given
from hypothesis import strategies as st

from llamacpp_integrations.errors import SchemaNotSupportedError
from llamacpp_integrations.tools.grammar import schema_to_gbnf

from ..gbnf_matcher import Grammar

PATTERNS = [
    "^[a-z]+$",
    "abc",
    "^abc",
    "abc$",
    "^\\d{3}-\\d{2,4}$",
    "^\\w+(\\s\\w+)*$",
    "\\S+@\\S+\\.\\w{2,}",
    '^[^,"\\\\]*$',
    "^(foo|bar|)baz?$",
    "^a|b$|^c$",
    "^(?:ab|a)*b$",
    "^.{2,5}$",
    "^[\\D][\\W]\\S$",
    '^["\\\\\\n\\t\\x00-\\x1f]+$',
    "^(a|b*c)*d$",
    "^x{2}(y{1,3}z)+$",
    "^[A-Z][a-z]*( [A-Z][a-z]*){0,2}$",
    "-?\\d+(\\.\\d+)?",
    "^[^a-c]{1,3}x$",
    "^(\\d{1,3}\\.){3}\\d{1,3}$",
    "^[a-f0-9]{8}-[a-f0-9]{4}$",
    "^(?P<key>[a-z_]+)=(?P<value>[^;]*);$",
]
# (None backtracks catastrophically in Python's re: it is the oracle here.)
# Characters on which engines agree, for exact comparison ('\r': '.' in Python only;
# '\x1c'-'\x1f': whitespace for Python's Unicode mode only).
SAFE = [c for c in map(chr, range(0x80)) if c not in "\r\x1c\x1d\x1e\x1f"]
WIDE = ["é", "中", "😀"]  # non-ASCII, and not digits, word characters or spaces in ASCII mode
NEGATED_SHORTHANDS = re.compile(r"\\[DWS]")


def alphabet(pattern: str) -> list[str]:
    """Characters on which grammar and ``re`` (ASCII mode) agree, for ``pattern``."""
    return SAFE if NEGATED_SHORTHANDS.search(pattern) else SAFE + WIDE


def search(pattern: str, value: str, flags: int = re.ASCII) -> bool:
    """ECMA-262's search: ``$`` only at the very end (Python's also before a final newline)."""
    return re.search(pattern.replace("$", "\\Z"), value, flags) is not None


@functools.cache
def grammar(pattern: str) -> Grammar:
    return Grammar(schema_to_gbnf({"type": "string", "pattern": pattern}))


def encoded(value: str) -> str:
    return json.dumps(value, ensure_ascii=False)


@given(data=st.data(), fullmatch=st.booleans())
def test_fuzz_pattern_accepts_what_re_matches(data: st.DataObject, fullmatch: bool) -> None:
    pattern = data.draw(st.sampled_from(PATTERNS))
    compiled = re.compile(pattern, re.ASCII)
    value = data.draw(st.from_regex(compiled, fullmatch=fullmatch, alphabet=alphabet(pattern)))
    assume(search(pattern, value))  # from_regex reads '$' as Python does
    assert grammar(pattern).accepts(encoded(value)), (pattern, value)


@given(data=st.data())
def test_fuzz_pattern_acceptance_equals_re_search(data: st.DataObject) -> None:
    pattern = data.draw(st.sampled_from(PATTERNS))
    chars = alphabet(pattern)
    # near misses: a matching string with a few characters replaced, inserted or deleted
    base = data.draw(st.from_regex(re.compile(pattern, re.ASCII), alphabet=chars) | st.text(chars))
    edits = data.draw(st.lists(st.tuples(st.integers(0, 40), st.sampled_from(chars)), max_size=3))
    value = base
    for at, ch in edits:
        at %= len(value) + 1
        value = value[:at] + ch + value[at + (at % 3 == 0) :]
    assert grammar(pattern).accepts(encoded(value)) == search(pattern, value), (pattern, value)


@given(pattern=st.sampled_from(PATTERNS), value=st.text(max_size=12))
def test_fuzz_pattern_accepts_only_matches_of_any_text(pattern: str, value: str) -> None:
    if grammar(pattern).accepts(encoded(value)):
        assert search(pattern, value, re.ASCII) and search(pattern, value, 0), (pattern, value)


@given(pattern=st.sampled_from(PATTERNS), seed=st.integers(0, 2**32))
def test_fuzz_pattern_productions_match(pattern: str, seed: int) -> None:
    produced = grammar(pattern).sample(random.Random(seed))
    value = json.loads(produced)
    assert isinstance(value, str)
    assert search(pattern, value, re.ASCII) and search(pattern, value, 0), (pattern, produced)


PIECES = [
    *"ab.|()*+?^$-[]{}\\\"é",
    "\\d", "\\w", "\\s", "\\D", "\\W", "\\S", "\\n", "\\.", "\\\\", "\\x01",
    "[a-c]", "[^ab]", "[^\\s]", "(?:", "{2}", "{1,3}", "{2,}", "{0}", "\\1", "(?=",
]  # fmt: skip


@given(
    pieces=st.lists(st.sampled_from(PIECES), max_size=10),
    bounds=st.fixed_dictionaries(
        {}, optional={"minLength": st.integers(0, 6), "maxLength": st.integers(0, 12)}
    ),
    seed=st.integers(0, 2**32),
)
def test_fuzz_random_patterns(pieces: list[str], bounds: dict[str, int], seed: int) -> None:
    pattern = "".join(pieces)
    try:
        text = schema_to_gbnf({"type": "string", "pattern": pattern, **bounds})
    except SchemaNotSupportedError:
        return
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # "possible nested set" and the like
        try:
            modes = [re.compile(pattern), re.compile(pattern, re.ASCII)]
        except re.error:
            return  # accepted as ECMA-262 reads it ('a{', ']'...), which Python refuses
    produced, rng = Grammar(text), random.Random(seed)
    for _ in range(5):
        value = json.loads(produced.sample(rng))
        assert all(mode.search(value) for mode in modes), (pattern, value)
        assert bounds.get("minLength", 0) <= len(value) <= bounds.get("maxLength", len(value))
