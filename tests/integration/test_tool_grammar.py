"""Tool-call grammars: llama.cpp reads them, they hold exactly the offered calls, and the parser
reads everything they produce.

Recognition and sampling use the pure-Python GBNF reader of the JSON-schema tests, and sampled
arguments are checked with that module's independent schema validator.
"""

from __future__ import annotations

import itertools
import json
import random
import re
from typing import Any

import pytest

from llamacpp_integrations.tools.call_syntax import (
    HERMES,
    LLAMA3,
    MISTRAL,
    MISTRAL_ARGS,
    SYNTAXES,
    TOOL_CALL_LIST,
    CallSyntax,
)
from llamacpp_integrations.tools.grammar import GrammarRules
from llamacpp_integrations.tools.tool_grammar import (
    MAX_PARALLEL_CALLS,
    marker_free_text_rule,
    tool_calls_gbnf,
)
from llamacpp_integrations.tools.tool_parser import parse_tool_output
from llamacpp_integrations.tools.tool_spec import ToolSpec
from tests.integration.test_json_grammar import Grammar, llama_parses, validate
from tests.integration.test_json_grammar import vocab as vocab  # the fixture

WEATHER = ToolSpec(
    "get_weather",
    "Current weather in a city.",
    {
        "type": "object",
        "properties": {
            "city": {"type": "string"},
            "unit": {"enum": ["celsius", "fahrenheit"]},
        },
        "required": ["city", "unit"],
    },
)
ADD = ToolSpec(
    "add",
    "Add two integers.",
    {
        "type": "object",
        "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}},
        "required": ["a", "b"],
        "additionalProperties": False,
    },
)
SEARCH = ToolSpec(
    "web.search",
    "Search the web.",
    {
        "type": "object",
        "properties": {
            "query": {"type": "string", "maxLength": 12},
            "limit": {"type": "integer", "minimum": 1, "maximum": 10},
        },
        "required": ["query"],
    },
)
NO_PARAMETERS = ToolSpec("get_time", "The current time.")
EVENT = ToolSpec(
    "create_event",
    "Put an event in the calendar.",
    {
        "type": "object",
        "properties": {
            "event": {
                "type": "object",
                "properties": {
                    "title": {"type": "string", "maxLength": 20},
                    "attendees": {
                        "type": "array",
                        "items": {
                            "type": "object",
                            "properties": {
                                "name": {"type": "string"},
                                "optional": {"type": "boolean"},
                            },
                            "required": ["name"],
                        },
                        "maxItems": 3,
                    },
                },
                "required": ["title", "attendees"],
            },
            "tags": {"type": "array", "items": {"type": "string"}, "maxItems": 2},
        },
        "required": ["event"],
    },
)

# name -> (tools, valid calls, calls whose arguments break the schema)
Example = tuple[str, Any]  # name, arguments
TOOL_SETS: dict[str, tuple[list[ToolSpec], list[Example], list[Example]]] = {
    "three": (
        [WEATHER, ADD, SEARCH],
        [
            ("get_weather", {"city": "Paris", "unit": "celsius"}),
            ("add", {"a": 2, "b": -3}),
            ("web.search", {"query": "llama.cpp", "limit": 5}),
            ("web.search", {"query": ""}),
        ],
        [
            ("get_weather", {"city": "Paris", "unit": "kelvin"}),
            ("get_weather", {"city": "Paris"}),
            ("add", {"a": 2}),
            ("add", {"a": 2, "b": "3"}),
            ("add", {"a": 2, "b": 3.5}),
            ("add", {"a": 2, "b": 3, "c": 4}),
            ("web.search", {"query": "much too long a query"}),
            ("web.search", {"query": "x", "limit": 11}),
            ("web.search", {"query": "x", "limit": 0}),
            ("web.search", {"limit": 3}),
        ],
    ),
    "no-parameters": (
        [NO_PARAMETERS],
        [("get_time", {})],
        [("get_time", []), ("get_time", "now"), ("get_time", None)],
    ),
    "nested": (
        [EVENT, NO_PARAMETERS],
        [
            (
                "create_event",
                {
                    "event": {
                        "title": "Standup",
                        "attendees": [{"name": "Ana", "optional": True}, {"name": "Bo"}],
                    },
                    "tags": ["daily"],
                },
            ),
            ("create_event", {"event": {"title": "Solo", "attendees": []}}),
            ("get_time", {}),
        ],
        [
            ("create_event", {"event": {"title": "x", "attendees": [{"optional": True}]}}),
            ("create_event", {"event": {"title": "x"}}),
            ("create_event", {"event": {"title": "x", "attendees": [{"name": 3}]}}),
            ("create_event", {"event": {"title": "x", "attendees": []}, "tags": ["a", "b", "c"]}),
            ("create_event", {}),
        ],
    ),
}
SETS = list(TOOL_SETS)
SYNTAX_LIST = list(SYNTAXES.values())


def render(syntax: CallSyntax, calls: list[Example]) -> str:
    """Calls written the way each family's model writes them."""
    if syntax.named_args:
        return "".join(f"[TOOL_CALLS]{name}[ARGS]{json.dumps(args)}" for name, args in calls)
    objects = [
        json.dumps({"name": name, syntax.arguments_key: args}, ensure_ascii=False)
        for name, args in calls
    ]
    if syntax is HERMES:
        return "\n".join(f"<tool_call>\n{o}\n</tool_call>" for o in objects)
    if syntax is LLAMA3:
        return "<|python_tag|>" + "; ".join(objects)
    return f"{syntax.lead}{', '.join(objects)}{syntax.trail}"


_grammars: dict[tuple[str, str, bool, bool], tuple[str, Grammar]] = {}


def grammar_for(
    tool_set: str, syntax: CallSyntax, *, parallel: bool, allow_text: bool = False
) -> tuple[str, Grammar]:
    key = (tool_set, syntax.name, parallel, allow_text)
    if key not in _grammars:
        tools = TOOL_SETS[tool_set][0]
        text = tool_calls_gbnf(tools, syntax, parallel=parallel, allow_text=allow_text)
        _grammars[key] = (text, Grammar(text))
    return _grammars[key]


# -- llama.cpp reads every grammar ---------------------------------------------------------------


@pytest.mark.parametrize("syntax", SYNTAX_LIST, ids=SYNTAXES.keys())
@pytest.mark.parametrize("tool_set", SETS)
def test_llama_cpp_parses_the_grammar(vocab: int, tool_set: str, syntax: CallSyntax) -> None:
    for parallel in (False, True):
        text, _ = grammar_for(tool_set, syntax, parallel=parallel)
        assert llama_parses(vocab, text), text
    if syntax.empty_allowed:
        text, _ = grammar_for(tool_set, syntax, parallel=True, allow_text=True)
        assert llama_parses(vocab, text), text


# -- hand-written answers ------------------------------------------------------------------------


@pytest.mark.parametrize("syntax", SYNTAX_LIST, ids=SYNTAXES.keys())
@pytest.mark.parametrize("tool_set", SETS)
def test_accepts_valid_calls(tool_set: str, syntax: CallSyntax) -> None:
    _, valid, _ = TOOL_SETS[tool_set]
    _, single = grammar_for(tool_set, syntax, parallel=False)
    _, parallel = grammar_for(tool_set, syntax, parallel=True)
    for call in valid:
        text = render(syntax, [call])
        assert single.accepts(text), text
        assert parallel.accepts(text), text
        assert single.accepts(text + "\n"), "a newline after the call may end the answer"
        parsed = parse_tool_output(text, syntax)
        assert [(c.name, c.arguments) for c in parsed.tool_calls] == [call]
    several = render(syntax, valid)
    assert parallel.accepts(several), several
    assert not single.accepts(several) or len(valid) == 1


@pytest.mark.parametrize("syntax", SYNTAX_LIST, ids=SYNTAXES.keys())
@pytest.mark.parametrize("tool_set", SETS)
def test_rejects_invalid_calls(tool_set: str, syntax: CallSyntax) -> None:
    _, valid, invalid = TOOL_SETS[tool_set]
    _, grammar = grammar_for(tool_set, syntax, parallel=True)
    rejected = [render(syntax, [call]) for call in invalid]
    rejected.append(render(syntax, [("delete_everything", {})]))
    rejected.append(render(syntax, [valid[0], ("unknown_tool", valid[0][1])]))
    rejected.append("Sure! " + render(syntax, valid[:1]))  # text before the calls
    rejected.append("")
    for text in rejected:
        assert not grammar.accepts(text), text


@pytest.mark.parametrize("syntax", SYNTAX_LIST, ids=SYNTAXES.keys())
def test_call_count(syntax: CallSyntax) -> None:
    call = ("add", {"a": 1, "b": 2})
    _, single = grammar_for("three", syntax, parallel=False)
    _, parallel = grammar_for("three", syntax, parallel=True)
    assert single.accepts(render(syntax, [call]))
    assert not single.accepts(render(syntax, [call, call]))
    assert parallel.accepts(render(syntax, [call] * MAX_PARALLEL_CALLS))
    assert not parallel.accepts(render(syntax, [call] * (MAX_PARALLEL_CALLS + 1)))


def test_whitespace_around_markers() -> None:
    _, grammar = grammar_for("three", HERMES, parallel=True)
    call = '{"name": "add", "arguments": {"a": 1, "b": 2}}'
    assert grammar.accepts(f"<tool_call>{call}</tool_call><tool_call> {call}\n</tool_call>")
    assert not grammar.accepts(f"<tool_call>{call}</tool_call> Done.")
    _, grammar = grammar_for("three", LLAMA3, parallel=True)
    assert grammar.accepts(f"{call};{call}".replace('"arguments"', '"parameters"'))
    assert not grammar.accepts(call), "llama3 calls use the 'parameters' key"
    _, grammar = grammar_for("three", MISTRAL, parallel=True)
    assert grammar.accepts(f"[TOOL_CALLS][\n  {call},\n  {call}\n]")
    assert not grammar.accepts(f"[TOOL_CALLS] [{call}]"), "lead is one literal"


# -- allow_text ----------------------------------------------------------------------------------


def test_allow_text_accepts_an_empty_list_then_a_reply() -> None:
    _, grammar = grammar_for("three", TOOL_CALL_LIST, parallel=True, allow_text=True)
    call = '{"name": "add", "arguments": {"a": 1, "b": 2}}'
    accepted = [
        "<tool_call>[]</tool_call> Hello there",
        "<tool_call>[ ]</tool_call>\nHello there",
        "<tool_call>[]</tool_call>Hi. I can't <tool_cal that </tool_call> 中文 😀",
        f"<tool_call>[{call}]</tool_call>",
        f"<tool_call>[{call}, {call}]</tool_call>",
    ]
    rejected = [
        "<tool_call>[]</tool_call>",
        "<tool_call>[]</tool_call>   ",
        "<tool_call>[]</tool_call>\n\n",
        "<tool_call>[]</tool_call> Hello <tool_call>[]</tool_call>",
        f"<tool_call>[]</tool_call> Let me call. <tool_call>[{call}]</tool_call>",
        "<tool_call>[]</tool_call> <tool_call>",
        f"<tool_call>[{call}]</tool_call> and some text",
        "Hello there",
    ]
    for text in accepted:
        assert grammar.accepts(text), text
    for text in rejected:
        assert not grammar.accepts(text), text
    _, no_text = grammar_for("three", TOOL_CALL_LIST, parallel=True)
    assert not no_text.accepts("<tool_call>[]</tool_call> Hello there")
    assert not no_text.accepts("<tool_call>[]</tool_call>")


@pytest.mark.parametrize("syntax", [HERMES, LLAMA3, MISTRAL_ARGS], ids=lambda s: s.name)
def test_allow_text_needs_a_list_syntax(syntax: CallSyntax) -> None:
    with pytest.raises(ValueError, match="empty call lists"):
        tool_calls_gbnf([WEATHER], syntax, parallel=True, allow_text=True)


@pytest.mark.parametrize(
    "reply",
    ["[1] is the source.", ", as I said.", "] oops", "{braces} are fine", "\u2028Hi"],
    ids=["bracket", "comma", "close-bracket", "brace", "unicode-space"],
)
def test_allow_text_reply_is_read_back_whole(reply: str) -> None:
    _, grammar = grammar_for("three", TOOL_CALL_LIST, parallel=True, allow_text=True)
    text = f"<tool_call>[]</tool_call> {reply}"
    assert grammar.accepts(text)
    parsed = parse_tool_output(text, TOOL_CALL_LIST)
    assert parsed.content == reply
    assert parsed.tool_calls == ()


# -- sampling: whatever the grammar produces parses and validates --------------------------------

_EMPTY_LIST_REPLY = re.compile(r"<tool_call>\[[ \t\n\r]*\]</tool_call>[ \t\n\r]*(.*)", re.DOTALL)


def check_samples(tool_set: str, syntax: CallSyntax, *, parallel: bool, allow_text: bool) -> None:
    tools = {tool.name: tool for tool in TOOL_SETS[tool_set][0]}
    _, grammar = grammar_for(tool_set, syntax, parallel=parallel, allow_text=allow_text)
    rng = random.Random(f"{tool_set}/{syntax.name}/{parallel}/{allow_text}")
    counts: set[int] = set()
    for _ in range(200):
        text = grammar.sample(rng, budget=12)
        parsed = parse_tool_output(text, syntax)
        counts.add(len(parsed.tool_calls))
        if not parsed.tool_calls:
            assert allow_text, text
            reply = _EMPTY_LIST_REPLY.fullmatch(text)
            assert reply is not None, text
            assert parsed.content == reply.group(1), text
            continue
        assert parsed.content == "", text
        for call in parsed.tool_calls:
            assert call.name in tools, text
            assert json.loads(call.arguments_json) == call.arguments
            assert validate(call.arguments, dict(tools[call.name].parameters)), text
    assert max(counts) == 1 or parallel
    if parallel:
        assert max(counts) > 1, "sampling never produced several calls"


@pytest.mark.parametrize("syntax", SYNTAX_LIST, ids=SYNTAXES.keys())
@pytest.mark.parametrize("tool_set", SETS)
@pytest.mark.parametrize("parallel", [True, False], ids=["parallel", "single"])
def test_samples_parse_and_validate(tool_set: str, syntax: CallSyntax, parallel: bool) -> None:
    check_samples(tool_set, syntax, parallel=parallel, allow_text=False)


def test_allow_text_samples_parse() -> None:
    check_samples("three", TOOL_CALL_LIST, parallel=True, allow_text=True)


# -- marker-free text ----------------------------------------------------------------------------


def marker_free_grammar(marker: str) -> str:
    rules = GrammarRules()
    return rules.render(marker_free_text_rule(rules, marker))


@pytest.mark.parametrize("marker", ["a", "aa", "aab", "aba", "abab", "abcab", "aaa"])
def test_marker_free_text_exhaustively(vocab: int, marker: str) -> None:
    text = marker_free_grammar(marker)
    assert llama_parses(vocab, text), text
    grammar = Grammar(text)
    for length in range(8):
        for letters in itertools.product("abc", repeat=length):
            s = "".join(letters)
            assert grammar.accepts(s) == (marker not in s), (marker, s)


@pytest.mark.parametrize("marker", ["<tool_call>", "[TOOL_CALLS]", "<|python_tag|>"])
def test_marker_free_text_on_random_strings(vocab: int, marker: str) -> None:
    text = marker_free_grammar(marker)
    assert llama_parses(vocab, text), text
    grammar = Grammar(text)
    rng = random.Random(marker)
    pieces = [marker, marker, *(marker[:k] for k in range(1, len(marker))), *marker, "x", " ", "é"]
    contains = 0
    for _ in range(400):
        s = "".join(rng.choice(pieces) for _ in range(rng.randint(0, 6)))
        contains += marker in s
        assert grammar.accepts(s) == (marker not in s), (marker, s)
    assert 50 < contains < 350
    for _ in range(200):
        sampled = grammar.sample(rng, budget=40)
        assert marker not in sampled, sampled


def test_marker_free_text_rejects_non_ascii_markers() -> None:
    with pytest.raises(ValueError, match="ASCII"):
        marker_free_text_rule(GrammarRules(), "«x»")
