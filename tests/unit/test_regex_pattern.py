"""String ``pattern``s as grammar: the supported regular-expression subset, search semantics,
JSON escaping, the narrowing next to ``minLength`` / ``maxLength``, and the errors for what is
not supported. Grammars are checked with the pure-Python GBNF reader of ``gbnf_matcher``."""

from __future__ import annotations

import json
import random
import re
from typing import Any

import pytest

from llamacpp_integrations.errors import SchemaNotSupportedError
from llamacpp_integrations.tools.grammar import GrammarRules, schema_rule, schema_to_gbnf

from .gbnf_matcher import Grammar


def string_grammar(pattern: str, **bounds: Any) -> Grammar:
    return Grammar(schema_to_gbnf({"type": "string", "pattern": pattern, **bounds}))


def accepts(grammar: Grammar, value: str) -> bool:
    """Whether the grammar accepts ``value`` as JSON writes it (json.dumps' escapes)."""
    return grammar.accepts(json.dumps(value, ensure_ascii=False))


def samples(grammar: Grammar, n: int = 60) -> list[str]:
    rng = random.Random(7)
    return [json.loads(grammar.sample(rng)) for _ in range(n)]


# -- supported features --------------------------------------------------------------------------

SUPPORTED: list[tuple[str, list[str], list[str]]] = [
    # pattern, accepted values, rejected values
    ("^[a-z]+$", ["a", "hello"], ["", "Hello", "a b", "a1", "héllo"]),
    ("^abc$", ["abc"], ["", "ab", "abcd", "xabc"]),
    ("^$", [""], ["a"]),
    (
        "^\\d{3}-\\d{4}$",
        ["555-1234"],
        ["55-1234", "555-12345", "555 1234", "\u0663\u0663\u0663-1234"],
    ),
    ("^\\w+$", ["a_1Z"], ["", "a-b", "é"]),
    ("^\\s$", [" ", "\t", "\n", "\r", "\f", "\v"], ["a", "\u00a0", "\u2028"]),
    ("^\\D\\W\\S$", ["a-b", "x!\x7f"], ["1-b", "a_b", "a- ", "é-b", "a-\u00a0"]),
    ("^a.c$", ["abc", "a c", 'a"c', "a\\c", "a\x01c", "aéc", "a😀c"], ["ac", "a\nc", "a\rc"]),
    ("^a\\.b\\\\c\\/d$", ["a.b\\c/d"], ["axb\\c/d"]),
    ("^\\n\\t\\r\\f\\v\\0$", ["\n\t\r\f\v\x00"], ["ntrfv0"]),
    ("^\\x41\\u00e9😀$", ["Aé😀"], ["A"]),
    ("^[a-cx-z]$", ["a", "c", "y"], ["d", "w", "B"]),
    ("^[^a-c]$", ["d", "é", '"', "\\", "\n", "😀"], ["a", "b", ""]),
    ("^[-a]+[a-]$", ["-a", "aa-"], ["b-"]),
    ("^[\\]\\\\\\-^]+$", ["]\\-^"], ["a"]),
    ("^[\\d_]$", ["5", "_"], ["a"]),
    ("^[^\\d\\s]$", ["a", "!"], ["5", " ", "é"]),
    ("^[\\b]$", ["\b"], ["b"]),
    ("^(ab)+$", ["ab", "abab"], ["", "aba"]),
    ("^(?:ab|cd)*e$", ["e", "abcde"], ["abe2", "ace"]),
    ("^(?P<year>\\d{4})-(?:\\d\\d)$", ["2024-01"], ["24-01"]),
    ("^a|b$", ["a", "axx", "b", "xxb"], ["xa", "bx", ""]),
    ("^(foo|bar)?baz$", ["baz", "foobaz", "barbaz"], ["fobaz", "foobarbaz"]),
    ("^a*b+c?$", ["b", "aabbc"], ["", "ac", "bcc"]),
    ("^a{2}b{2,}c{1,3}$", ["aabbc", "aabbbccc"], ["abbc", "aabc", "aabbcccc"]),
    ("^a*?b+?c??d{1,2}?$", ["bd", "abcdd"], ["abc"]),
    ("^(a*)*$", ["", "aaa"], ["b"]),
    ("^(a|)+b$", ["b", "aab"], ["ba"]),
    ("^x{0}y$", ["y"], ["xy"]),
    ("^a{2$", ["a{2"], ["aa"]),
    ('^["\\\\]+$', ['"', '\\"\\'], ["a"]),
]


@pytest.mark.parametrize(("pattern", "good", "bad"), SUPPORTED, ids=[p for p, _, _ in SUPPORTED])
def test_supported_patterns(pattern: str, good: list[str], bad: list[str]) -> None:
    grammar = string_grammar(pattern)
    for value in good:
        assert re.search(pattern, value), value  # the table itself is right
        assert accepts(grammar, value), (value, grammar.text)
    for value in bad:
        assert not accepts(grammar, value), (value, grammar.text)
    for value in samples(grammar):
        assert re.search(pattern, value), (value, grammar.text)


def test_unanchored_sides_allow_any_text() -> None:
    anywhere = string_grammar("abc")
    for value in ["abc", "xxabc", "abcyy", 'x"\n\\abc\x01😀']:
        assert accepts(anywhere, value), value
    assert not accepts(anywhere, "ab c")
    prefix, suffix = string_grammar("^abc"), string_grammar("abc$")
    assert accepts(prefix, "abcz") and not accepts(prefix, "zabc")
    assert accepts(suffix, "zabc") and not accepts(suffix, "abcz")
    # the open sides take escapes of any form, as any JSON string does
    assert anywhere.accepts('"\\u00e9abc\\/"')


def test_patterns_matching_every_string_are_any_string() -> None:
    for pattern in ["", ".*", "^.*", "a*", "(abc)?", "x{0}", "^a*", "b?$"]:
        assert string_grammar(pattern).text.startswith("root ::= json-string\n"), pattern


def test_named_groups_are_groups() -> None:
    plain = string_grammar("^(\\d{4})-(\\d\\d)$").text
    assert string_grammar("^(?<year>\\d{4})-(?P<month>\\d\\d)$").text == plain


def test_output_is_json_escaped_like_json_dumps() -> None:
    grammar = string_grammar('^["\\\\\\n\\x01\\x7f/]+$')
    assert grammar.accepts('"\\"\\\\\\n\\u0001\x7f/"')
    assert not grammar.accepts('"\\u0022"')  # one spelling per character: json.dumps'
    assert not grammar.accepts('"\n"')  # raw control characters never
    for value in samples(grammar):
        assert re.fullmatch('["\\\\\\n\\x01\\x7f/]+', value)


def test_strings_inside_objects_and_tool_grammars() -> None:
    schema = {
        "type": "object",
        "properties": {"code": {"type": "string", "pattern": "^[A-Z]{3}$"}},
        "required": ["code"],
    }
    grammar = Grammar(schema_to_gbnf(schema))
    assert grammar.accepts('{"code": "ABC"}')
    assert not grammar.accepts('{"code": "ABCD"}')
    rules = GrammarRules()
    name = schema_rule(rules, {"type": "string", "pattern": "^x+$"}, "args")
    assert Grammar(rules.render(name)).accepts('"xx"')


def test_huge_repeat_counts_stay_small() -> None:
    grammar = string_grammar("^a{1,100000}$")
    assert len(grammar.text) < 2000
    assert accepts(grammar, "a" * 5000)
    assert not accepts(grammar, "")
    nested = string_grammar("^(a{0,5000}b){2,3000}$")
    assert len(nested.text) < 2000
    assert accepts(nested, "ab" + "a" * 10 + "b")
    exact = string_grammar("^[0-9]{123456}$")
    assert len(exact.text) < 500


def test_nested_optional_groups_stay_small_and_exact() -> None:
    deep = "^" + "(a?b?" * 40 + ")*" * 40 + "$"
    assert len(schema_to_gbnf({"type": "string", "pattern": deep})) < 20_000
    assert len(schema_to_gbnf({"type": "string", "pattern": deep, "maxLength": 9})) < 20_000
    pattern = "^(a?b?(a?c?)*)*d$"
    grammar = string_grammar(pattern)
    rng = random.Random(5)
    for _ in range(300):
        value = "".join(rng.choice("abcd") for _ in range(rng.randint(0, 7)))
        assert accepts(grammar, value) == bool(re.search(pattern, value)), value


# -- with minLength / maxLength ------------------------------------------------------------------


def test_length_bounds_on_one_varying_part_are_exact() -> None:
    grammar = string_grammar("^[a-z]+$", minLength=2, maxLength=4)
    for n in range(7):
        assert accepts(grammar, "a" * n) == (2 <= n <= 4), n
    padded = string_grammar("^id-\\d*$", maxLength=6)
    assert accepts(padded, "id-123") and not accepts(padded, "id-1234")


def test_length_bounds_shared_among_varying_parts() -> None:
    grammar = string_grammar("^[a-z]+@[a-z]+\\.[a-z]{2,}$", minLength=8, maxLength=20)
    assert accepts(grammar, "abc@def.gh")
    values = samples(grammar, 200)
    for value in values:
        assert re.search("^[a-z]+@[a-z]+\\.[a-z]{2,}$", value)
        assert 8 <= len(value) <= 20, value
    unanchored = string_grammar("abc", maxLength=5)
    assert accepts(unanchored, "abc") and accepts(unanchored, "xabcx")
    assert not accepts(unanchored, "abcdef")
    at_least = string_grammar("abc", minLength=6)
    assert all(len(v) >= 6 and "abc" in v for v in samples(at_least))
    repeated = string_grammar("^(ab|c)+$", maxLength=9)
    assert all(len(v) <= 9 and re.fullmatch("(ab|c)+", v) for v in samples(repeated, 200))


def test_length_bounds_no_pattern_string_meets_raise() -> None:
    with pytest.raises(SchemaNotSupportedError) as info:
        schema_to_gbnf({"type": "string", "pattern": "^abc$", "minLength": 4})
    assert info.value.path == "#/pattern"
    with pytest.raises(SchemaNotSupportedError):
        schema_to_gbnf({"type": "string", "pattern": "^(ab)+$", "minLength": 3, "maxLength": 3})


def test_format_next_to_pattern_raises_and_trivial_patterns_pass() -> None:
    with pytest.raises(SchemaNotSupportedError) as info:
        schema_to_gbnf({"type": "string", "format": "date", "pattern": "^2"})
    assert info.value.path == "#/pattern"
    assert schema_to_gbnf({"type": "string", "format": "date", "pattern": ".*"})


# -- what raises ---------------------------------------------------------------------------------

UNSUPPORTED = [
    ("(a)\\1", "backreference"),
    ("(?<n>a)\\k<n>", "named backreference"),
    ("a(?=b)", "lookahead"),
    ("a(?!b)", "lookahead"),
    ("(?<=a)b", "lookbehind"),
    ("(?<!a)b", "lookbehind"),
    ("\\bword\\b", "word boundary"),
    ("a\\Bb", "word boundary"),
    ("(?i)abc", "group syntax '(?i'"),
    ("(?i:abc)", "group syntax '(?i'"),
    ("(?#note)a", "group syntax '(?#'"),
    ("(?>a)", "group syntax '(?>'"),
    ("\\p{L}+", "Unicode property"),
    ("\\P{L}", "Unicode property"),
    ("\\cJ", "control escape"),
    ("\\u{1F600}", "'\\u{...}'"),
    ("\\ud83d\\ude00", "surrogate escape"),
    ("[\\01]", "octal escape"),
    ("\\A", "escape '\\A'"),
    ("\\a", "escape '\\a'"),
    ("a{,3}", "'{,n}'"),
    ("[]a]", "'[]'"),
    ("[^]", "'[]'"),
    ("[[:alpha:]]", "POSIX class"),
    ("[\\d-z]", "class escape as a range end"),
    ("a^b", "'^'"),
    ("a$b", "'$'"),
    ("(^a)", "'^'"),
    ("(" * 101 + ")" * 101, "nesting"),
]


@pytest.mark.parametrize(("pattern", "feature"), UNSUPPORTED, ids=[p[:20] for p, _ in UNSUPPORTED])
def test_unsupported_features_raise_at_the_pattern(pattern: str, feature: str) -> None:
    schema = {"type": "object", "properties": {"x": {"type": "string", "pattern": pattern}}}
    with pytest.raises(SchemaNotSupportedError) as info:
        schema_to_gbnf(schema)
    assert info.value.path == "#/properties/x/pattern"
    assert feature in str(info.value)
    assert "not supported" in str(info.value)


MALFORMED = [
    ("(ab", "'(' without its ')'", 0),
    ("ab)", "unbalanced ')'", 2),
    ("[ab", "'[' without its ']'", 0),
    ("[z-a]", "character range out of order", 2),
    ("a{3,2}", "out of order", 1),
    ("*a", "nothing to repeat", 0),
    ("a|+", "nothing to repeat", 2),
    ("a**", "a repeat of a repeat", 2),
    ("a{2}+", "a repeat of a repeat", 4),
    ("ab\\", "trailing backslash", 2),
    ("\\x4", "hex digits", 0),
    ("(?<1>a)", "bad group name", 0),
]


@pytest.mark.parametrize(
    ("pattern", "problem", "offset"), MALFORMED, ids=[p for p, _, _ in MALFORMED]
)
def test_malformed_patterns_raise_naming_the_place(pattern: str, problem: str, offset: int) -> None:
    with pytest.raises(SchemaNotSupportedError) as info:
        schema_to_gbnf({"type": "string", "pattern": pattern})
    assert info.value.path == "#/pattern"
    assert problem in str(info.value)
    assert f"offset {offset}" in str(info.value)


def test_patterns_that_match_nothing_or_are_not_strings_raise() -> None:
    for pattern in ["[^\\s\\S]", "^a[^\\d\\D]$"]:
        with pytest.raises(SchemaNotSupportedError, match="no JSON string"):
            schema_to_gbnf({"type": "string", "pattern": pattern})
    with pytest.raises(SchemaNotSupportedError, match="must be a string"):
        schema_to_gbnf({"type": "string", "pattern": 3})
