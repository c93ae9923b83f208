"""Tool-call parsing: recorded answers of each call syntax, malformed ones, and streaming.

The recorded answers are literal strings shaped like what the model families actually write
(Qwen 2.5 / Hermes, Llama 3.x, Mistral v3 and v11, and the package's own fallback list). A
property test renders random call lists in every syntax and checks that parsing gives them
back, and that streaming the same text in random pieces agrees with the one-shot parse.
"""

from __future__ import annotations

import itertools
import json
from dataclasses import dataclass
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from llamacpp_integrations.errors import ToolCallParseError
from llamacpp_integrations.tools.call_syntax import (
    HERMES,
    LLAMA3,
    MISTRAL,
    MISTRAL_ARGS,
    SYNTAXES,
    TOOL_CALL_LIST,
    CallSyntax,
)
from llamacpp_integrations.tools.tool_parser import (
    ParsedOutput,
    ToolCallStream,
    parse_tool_output,
)
from llamacpp_integrations.tools.tool_spec import ToolCallDelta

Call = tuple[str, dict[str, Any], str]  # name, arguments, arguments_json


def calls_of(parsed: ParsedOutput) -> list[Call]:
    return [(c.name, c.arguments, c.arguments_json) for c in parsed.tool_calls]


# -- streaming checker ---------------------------------------------------------------------------


def stream_pieces(pieces: list[str], syntax: CallSyntax) -> ParsedOutput:
    """Feed ``pieces`` and check every streaming promise against the final parse."""
    stream = ToolCallStream(syntax)
    texts: list[str] = []
    deltas: list[ToolCallDelta] = []
    for piece in pieces:
        text, new = stream.feed(piece)
        texts.append(text)
        deltas += new
    text, new, final = stream.finish()
    texts.append(text)
    deltas += new

    whole = "".join(pieces)
    assert stream.text == whole
    assert "".join(texts) == final.content

    indexes = [d.index for d in deltas]
    assert indexes == sorted(indexes), "deltas of an earlier call came after a later one"
    assert sorted(set(indexes)) == list(range(len(final.tool_calls)))

    first_ids: list[str] = []
    for index, call in enumerate(final.tool_calls):
        mine = [d for d in deltas if d.index == index]
        head, rest = mine[0], mine[1:]
        assert head.id is not None and head.name == call.name
        assert all(d.id is None and d.name is None for d in rest)
        assert "".join(d.arguments for d in mine) == call.arguments_json
        assert head.id == call.id
        first_ids.append(head.id)
    assert len(set(first_ids)) == len(first_ids)

    one_shot = parse_tool_output(whole, syntax)
    assert one_shot.content == final.content
    assert calls_of(one_shot) == calls_of(final)
    return final


def char_by_char(text: str, syntax: CallSyntax) -> ParsedOutput:
    return stream_pieces(list(text), syntax)


# -- recorded answers ----------------------------------------------------------------------------


@dataclass(frozen=True)
class Recorded:
    syntax: CallSyntax
    text: str
    content: str
    calls: list[Call]


RECORDED: dict[str, Recorded] = {
    # Qwen 2.5 / Hermes
    "hermes-single": Recorded(
        HERMES,
        '<tool_call>\n{"name": "get_weather", "arguments": {"location": "Paris, France", '
        '"unit": "celsius"}}\n</tool_call>',
        "",
        [
            (
                "get_weather",
                {"location": "Paris, France", "unit": "celsius"},
                '{"location": "Paris, France", "unit": "celsius"}',
            )
        ],
    ),
    "hermes-parallel-with-text": Recorded(
        HERMES,
        "I'll look both cities up.\n"
        '<tool_call>\n{"name": "get_weather", "arguments": {"location": "Paris"}}\n</tool_call>\n'
        '<tool_call>\n{"name": "get_weather", "arguments": {"location": "Tokyo"}}\n</tool_call>\n'
        "One moment.",
        "I'll look both cities up.\nOne moment.",
        [
            ("get_weather", {"location": "Paris"}, '{"location": "Paris"}'),
            ("get_weather", {"location": "Tokyo"}, '{"location": "Tokyo"}'),
        ],
    ),
    "hermes-arguments-before-name": Recorded(
        HERMES,
        '<tool_call>\n{"arguments": {"a": 2, "b": 3}, "name": "add"}\n</tool_call>',
        "",
        [("add", {"a": 2, "b": 3}, '{"a": 2, "b": 3}')],
    ),
    "hermes-nested": Recorded(
        HERMES,
        '<tool_call>\n{"name": "create_event", "arguments": {"event": {"title": "Standup", '
        '"attendees": [{"name": "Ana", "optional": false}, {"name": "Bo", "optional": true}], '
        '"repeat": null}, "tags": ["daily", "team"], "duration": 0.25}}\n</tool_call>',
        "",
        [
            (
                "create_event",
                {
                    "event": {
                        "title": "Standup",
                        "attendees": [
                            {"name": "Ana", "optional": False},
                            {"name": "Bo", "optional": True},
                        ],
                        "repeat": None,
                    },
                    "tags": ["daily", "team"],
                    "duration": 0.25,
                },
                '{"event": {"title": "Standup", "attendees": [{"name": "Ana", "optional": '
                'false}, {"name": "Bo", "optional": true}], "repeat": null}, '
                '"tags": ["daily", "team"], "duration": 0.25}',
            )
        ],
    ),
    "hermes-tricky-strings": Recorded(
        HERMES,
        r'<tool_call>{"name": "search", "arguments": {"q": "a } b ] c \"quoted\" {[", '
        r'"lang": "日本語 · ünï 🚀", "path": "C:\\tmp\\", "esc": "caf\u00e9 \ud83d\ude00"}}'
        r"</tool_call>",
        "",
        [
            (
                "search",
                {
                    "q": 'a } b ] c "quoted" {[',
                    "lang": "日本語 · ünï 🚀",
                    "path": "C:\\tmp\\",
                    "esc": "café 😀",
                },
                r'{"q": "a } b ] c \"quoted\" {[", "lang": "日本語 · ünï 🚀", '
                r'"path": "C:\\tmp\\", "esc": "caf\u00e9 \ud83d\ude00"}',
            )
        ],
    ),
    "hermes-arguments-as-string": Recorded(
        HERMES,
        '<tool_call>\n{"name": "add", "arguments": "{\\"a\\": 1, \\"b\\": 2}"}\n</tool_call>',
        "",
        [("add", {"a": 1, "b": 2}, '{"a": 1, "b": 2}')],
    ),
    "hermes-no-arguments": Recorded(
        HERMES,
        '<tool_call>\n{"name": "list_files"}\n</tool_call>',
        "",
        [("list_files", {}, "{}")],
    ),
    "hermes-parameters-key": Recorded(
        HERMES,
        '<tool_call>\n{"name": "add", "parameters": {"a": 1}}\n</tool_call>',
        "",
        [("add", {"a": 1}, '{"a": 1}')],
    ),
    "hermes-plain-answer": Recorded(
        HERMES,
        "The capital of France is Paris. Use <b>bold</b> or {braces} freely.",
        "The capital of France is Paris. Use <b>bold</b> or {braces} freely.",
        [],
    ),
    # Llama 3.1 - 3.3
    "llama3-python-tag": Recorded(
        LLAMA3,
        '<|python_tag|>{"name": "get_weather", "parameters": {"city": "Berlin"}}',
        "",
        [("get_weather", {"city": "Berlin"}, '{"city": "Berlin"}')],
    ),
    "llama3-bare": Recorded(
        LLAMA3,
        '{"name": "get_weather", "parameters": {"city": "Berlin", "days": 3}}',
        "",
        [("get_weather", {"city": "Berlin", "days": 3}, '{"city": "Berlin", "days": 3}')],
    ),
    "llama3-several": Recorded(
        LLAMA3,
        '{"name": "get_weather", "parameters": {"city": "Berlin"}}; '
        '{"name": "get_time", "parameters": {"timezone": "Europe/Berlin"}}',
        "",
        [
            ("get_weather", {"city": "Berlin"}, '{"city": "Berlin"}'),
            ("get_time", {"timezone": "Europe/Berlin"}, '{"timezone": "Europe/Berlin"}'),
        ],
    ),
    "llama3-tag-no-space": Recorded(
        LLAMA3,
        '\n<|python_tag|>{"name": "a", "parameters": {}};{"name": "b", "parameters": {"x": [1]}}',
        "",
        [("a", {}, "{}"), ("b", {"x": [1]}, '{"x": [1]}')],
    ),
    "llama3-text": Recorded(
        LLAMA3,
        "It is sunny in Berlin today.",
        "It is sunny in Berlin today.",
        [],
    ),
    "llama3-text-then-brace": Recorded(
        LLAMA3,
        'Here is the object you asked for: {"name": "x", "parameters": {}}',
        'Here is the object you asked for: {"name": "x", "parameters": {}}',
        [],
    ),
    # Mistral v3
    "mistral-two": Recorded(
        MISTRAL,
        '[TOOL_CALLS][{"name": "get_weather", "arguments": {"city": "Lyon"}}, '
        '{"name": "get_time", "arguments": {"tz": "CET"}}]',
        "",
        [
            ("get_weather", {"city": "Lyon"}, '{"city": "Lyon"}'),
            ("get_time", {"tz": "CET"}, '{"tz": "CET"}'),
        ],
    ),
    "mistral-spaced": Recorded(
        MISTRAL,
        '[TOOL_CALLS] [{"name": "add", "arguments": {"a": 1, "b": 2}}]',
        "",
        [("add", {"a": 1, "b": 2}, '{"a": 1, "b": 2}')],
    ),
    "mistral-text": Recorded(
        MISTRAL, "Bonjour ! [1] est une note.", "Bonjour ! [1] est une note.", []
    ),
    # Mistral v11
    "mistral-args-two": Recorded(
        MISTRAL_ARGS,
        '[TOOL_CALLS]get_weather[ARGS]{"city": "Lyon"}[TOOL_CALLS]get_time[ARGS]{"tz": "CET"}',
        "",
        [
            ("get_weather", {"city": "Lyon"}, '{"city": "Lyon"}'),
            ("get_time", {"tz": "CET"}, '{"tz": "CET"}'),
        ],
    ),
    "mistral-args-empty": Recorded(
        MISTRAL_ARGS,
        "[TOOL_CALLS]list_files[ARGS]{}",
        "",
        [("list_files", {}, "{}")],
    ),
    "mistral-args-dotted-name": Recorded(
        MISTRAL_ARGS,
        '[TOOL_CALLS]web.search-v2[ARGS] {"q": "x}"}',
        "",
        [("web.search-v2", {"q": "x}"}, '{"q": "x}"}')],
    ),
    "mistral-args-space-before-name": Recorded(
        MISTRAL_ARGS,
        '[TOOL_CALLS] f[ARGS]{"x": 1}',
        "",
        [("f", {"x": 1}, '{"x": 1}')],
    ),
    # the fallback list
    "list-two": Recorded(
        TOOL_CALL_LIST,
        '<tool_call>[{"name": "get_weather", "arguments": {"city": "Oslo"}}, '
        '{"name": "add", "arguments": {"a": 1, "b": 2}}]</tool_call>',
        "",
        [
            ("get_weather", {"city": "Oslo"}, '{"city": "Oslo"}'),
            ("add", {"a": 1, "b": 2}, '{"a": 1, "b": 2}'),
        ],
    ),
    "list-empty-then-reply": Recorded(
        TOOL_CALL_LIST,
        "<tool_call>[]</tool_call> Hello! How can I help you today?",
        "Hello! How can I help you today?",
        [],
    ),
    "list-empty": Recorded(TOOL_CALL_LIST, "<tool_call>[]</tool_call>", "", []),
    "list-newlines": Recorded(
        TOOL_CALL_LIST,
        '<tool_call>[\n  {"name": "f", "arguments": {}}\n]</tool_call>\n',
        "",
        [("f", {}, "{}")],
    ),
}


@pytest.mark.parametrize("case", RECORDED.values(), ids=RECORDED.keys())
def test_recorded_output_parses(case: Recorded) -> None:
    parsed = parse_tool_output(case.text, case.syntax)
    assert parsed.content == case.content
    assert calls_of(parsed) == case.calls
    for call in parsed.tool_calls:
        assert json.loads(call.arguments_json) == call.arguments
        assert call.id.startswith("call_")
    assert len({call.id for call in parsed.tool_calls}) == len(parsed.tool_calls)


@pytest.mark.parametrize("case", RECORDED.values(), ids=RECORDED.keys())
def test_recorded_output_streamed_char_by_char(case: Recorded) -> None:
    final = char_by_char(case.text, case.syntax)
    assert final.content == case.content
    assert calls_of(final) == case.calls


@pytest.mark.parametrize("case", RECORDED.values(), ids=RECORDED.keys())
def test_every_prefix_parses_or_raises_the_parse_error(case: Recorded) -> None:
    # What max_tokens leaves of an answer: never an exception other than ToolCallParseError
    # (streamed pieces take the same path: parse_tool_output is a one-piece stream).
    for end in range(len(case.text) + 1):
        prefix = case.text[:end]
        try:
            parse_tool_output(prefix, case.syntax)
        except ToolCallParseError as error:
            assert error.partial_text == prefix
            assert 0 <= error.position <= len(prefix)


# -- malformed answers ---------------------------------------------------------------------------

MALFORMED: dict[str, tuple[CallSyntax, str]] = {
    "hermes-truncated": (
        HERMES,
        '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Par',
    ),
    "hermes-truncated-after-object": (HERMES, '<tool_call>\n{"name": "f", "arguments": {}'),
    "llama3-truncated": (LLAMA3, '{"name": "f", "parameters": {"x": 1}'),
    "mistral-truncated": (MISTRAL, '[TOOL_CALLS][{"name": "f", "argu'),
    "mistral-args-truncated": (MISTRAL_ARGS, '[TOOL_CALLS]f[ARGS]{"x": '),
    "list-truncated": (TOOL_CALL_LIST, '<tool_call>[{"name": "f", "arguments": {'),
    "hermes-name-number": (HERMES, '<tool_call>{"name": 3, "arguments": {}}</tool_call>'),
    "mistral-name-list": (MISTRAL, '[TOOL_CALLS][{"name": ["f"], "arguments": {}}]'),
    "llama3-name-null": (LLAMA3, '{"name": null, "parameters": {}}'),
    "hermes-arguments-array": (HERMES, '<tool_call>{"name": "f", "arguments": [1, 2]}</tool_call>'),
    "list-arguments-number": (
        TOOL_CALL_LIST,
        '<tool_call>[{"name": "f", "arguments": 5}]</tool_call>',
    ),
    "llama3-parameters-array": (LLAMA3, '{"name": "f", "parameters": ["a"]}'),
    "hermes-arguments-null": (HERMES, '<tool_call>{"name": "f", "arguments": null}</tool_call>'),
    "hermes-arguments-string-of-array": (
        HERMES,
        '<tool_call>{"name": "f", "arguments": "[1, 2]"}</tool_call>',
    ),
    "hermes-arguments-string-not-json": (
        HERMES,
        '<tool_call>{"name": "f", "arguments": "city=Paris"}</tool_call>',
    ),
    "hermes-bad-literal": (
        HERMES,
        '<tool_call>{"name": "f", "arguments": {"x": tru}}</tool_call>',
    ),
    "hermes-trailing-comma": (
        HERMES,
        '<tool_call>{"name": "f", "arguments": {"x": 1,}}</tool_call>',
    ),
    "hermes-single-quotes": (
        HERMES,
        '<tool_call>{"name": "f", "arguments": {\'x\': 1}}</tool_call>',
    ),
    "hermes-bad-other-member": (
        HERMES,
        '<tool_call>{"name": "f", "extra": nul, "arguments": {}}</tool_call>',
    ),
    "hermes-missing-comma": (HERMES, '<tool_call>{"name": "f" "arguments": {}}</tool_call>'),
    "hermes-missing-colon": (HERMES, '<tool_call>{"name" "f", "arguments": {}}</tool_call>'),
    "hermes-unquoted-key": (HERMES, "<tool_call>{name: 'f'}</tool_call>"),
    "llama3-unquoted-key": (LLAMA3, "{name: f}"),
    "hermes-opener-then-prose": (HERMES, "Sure! <tool_call> I cannot do that."),
    "hermes-opener-alone": (HERMES, "<tool_call>"),
    "mistral-opener-then-prose": (MISTRAL, "[TOOL_CALLS] nothing to call"),
    "mistral-args-opener-alone": (MISTRAL_ARGS, "[TOOL_CALLS]"),
    "mistral-args-junk-before-name": (MISTRAL_ARGS, '[TOOL_CALLS]"f"[ARGS]{"x": 1}'),
    "mistral-args-no-args-marker": (MISTRAL_ARGS, '[TOOL_CALLS]get_weather{"city": "Oslo"}'),
    "mistral-args-misspelt-marker": (MISTRAL_ARGS, '[TOOL_CALLS]get_weather[ARG]{"city": "x"}'),
    "mistral-args-name-only": (MISTRAL_ARGS, "[TOOL_CALLS]get_weather"),
    "mistral-args-array-arguments": (MISTRAL_ARGS, "[TOOL_CALLS]f[ARGS][1, 2]"),
    "mistral-args-bad-json": (MISTRAL_ARGS, "[TOOL_CALLS]f[ARGS]{'x': 1}"),
}


@pytest.mark.parametrize(("syntax", "text"), MALFORMED.values(), ids=MALFORMED.keys())
def test_malformed_output_raises_parse_error(syntax: CallSyntax, text: str) -> None:
    # Any other exception (JSONDecodeError, KeyError, IndexError, ...) escapes and fails.
    with pytest.raises(ToolCallParseError) as caught:
        parse_tool_output(text, syntax)
    error = caught.value
    assert isinstance(error.position, int)
    assert 0 <= error.position <= len(text)
    assert error.partial_text == text
    assert f"(at character {error.position})" in str(error)


@pytest.mark.parametrize(("syntax", "text"), MALFORMED.values(), ids=MALFORMED.keys())
def test_malformed_output_streamed_raises_only_at_finish(syntax: CallSyntax, text: str) -> None:
    stream = ToolCallStream(syntax)
    for char in text:
        stream.feed(char)  # never raises: the error is reported once, by finish
    with pytest.raises(ToolCallParseError) as caught:
        stream.finish()
    assert caught.value.partial_text == text


MISSING_NAME = {
    "hermes": (HERMES, '<tool_call>\n{"arguments": {"city": "Oslo"}}\n</tool_call>'),
    "llama3-plain-json-answer": (LLAMA3, '{"city": "Oslo", "temperature": 9}'),
    "mistral": (MISTRAL, '[TOOL_CALLS][{"arguments": {}}]'),
}


@pytest.mark.parametrize(("syntax", "text"), MISSING_NAME.values(), ids=MISSING_NAME.keys())
def test_call_without_name_raises_parse_error(syntax: CallSyntax, text: str) -> None:
    with pytest.raises(ToolCallParseError) as caught:
        parse_tool_output(text, syntax)
    assert caught.value.partial_text == text


@pytest.mark.parametrize(
    ("syntax", "text"),
    [
        (TOOL_CALL_LIST, '<tool_call>[{"name": "f", "arguments": {}}, 3]</tool_call>'),
        (MISTRAL, '[TOOL_CALLS][{"name": "f", "arguments": {}}, "g"]'),
    ],
    ids=["list", "mistral"],
)
def test_list_item_that_is_not_a_call_raises(syntax: CallSyntax, text: str) -> None:
    with pytest.raises(ToolCallParseError):
        parse_tool_output(text, syntax)


@pytest.mark.parametrize(
    "text",
    ["<tool_call> no list here", "Sure <tool_call>I will not.", "<tool_call>"],
    ids=["prose", "text-around", "alone"],
)
def test_list_opener_without_a_list_raises(text: str) -> None:
    with pytest.raises(ToolCallParseError) as caught:
        parse_tool_output(text, TOOL_CALL_LIST)
    assert caught.value.partial_text == text


# -- hold-back -----------------------------------------------------------------------------------


def test_possible_marker_is_held_back_until_it_is_not_one() -> None:
    stream = ToolCallStream(HERMES)
    assert stream.feed("Hello <tool_") == ("Hello ", [])
    assert stream.feed("x") == ("<tool_x", [])
    assert stream.feed("> and <") == ("> and ", [])
    text, deltas, final = stream.finish()
    assert (text, deltas) == ("<", [])
    assert final == ParsedOutput("Hello <tool_x> and <", ())


def test_held_back_marker_that_completes_becomes_a_call() -> None:
    stream = ToolCallStream(HERMES)
    assert stream.feed("Hi <tool_") == ("Hi ", [])
    assert stream.feed('call>{"na') == ("", [])
    text, deltas = stream.feed('me": "f", "argu')  # the call is announced once its name is whole
    assert text == ""
    assert len(deltas) == 1
    assert (deltas[0].index, deltas[0].name, deltas[0].arguments) == (0, "f", "")
    assert deltas[0].id is not None
    assert stream.feed('ments": {"a"') == ("", [ToolCallDelta(0, arguments='{"a"')])
    assert stream.feed(": 1}}</tool_call>") == ("", [ToolCallDelta(0, arguments=": 1}")])
    text, deltas, final = stream.finish()
    assert (text, deltas) == ("", [])
    assert final.content == "Hi "
    assert calls_of(final) == [("f", {"a": 1}, '{"a": 1}')]


@pytest.mark.parametrize(
    ("syntax", "pieces", "shown"),
    [
        (MISTRAL, ["Voilà [TOOL_", "CALLZ"], ["Voilà ", "[TOOL_CALLZ"]),
        (MISTRAL_ARGS, ["[TOOL", "S] ok"], ["", "[TOOLS] ok"]),
        (LLAMA3, ["  <|pyth", "on is fun"], ["", "  <|python is fun"]),
        (LLAMA3, ["\n", "Sure."], ["", "\nSure."]),
        (TOOL_CALL_LIST, ["a <", "b>"], ["a ", "<b>"]),
    ],
)
def test_hold_back_per_syntax(syntax: CallSyntax, pieces: list[str], shown: list[str]) -> None:
    stream = ToolCallStream(syntax)
    assert [stream.feed(piece) for piece in pieces] == [(text, []) for text in shown]
    assert stream.finish()[2] == ParsedOutput("".join(pieces), ())


def test_arguments_as_json_string_stream_in_one_piece() -> None:
    text = '<tool_call>{"name": "add", "arguments": "{\\"a\\": 1}"}</tool_call>'
    stream = ToolCallStream(HERMES)
    deltas = [d for char in text for d in stream.feed(char)[1]]
    assert [(d.name, d.arguments) for d in deltas] == [("add", ""), (None, '{"a": 1}')]


def test_call_without_arguments_streams_empty_object_once_complete() -> None:
    stream = ToolCallStream(LLAMA3)
    _, first = stream.feed('{"name": "now"')
    assert [(d.name, d.arguments) for d in first] == [("now", "")]
    _, second = stream.feed("}")
    assert [(d.name, d.arguments) for d in second] == [(None, "{}")]
    assert calls_of(stream.finish()[2]) == [("now", {}, "{}")]


# -- property: render random calls, parse them back, stream them ---------------------------------

NAMES = st.text(alphabet="ab_.-1Z", min_size=1, max_size=6)
STRING_CHARS = st.sampled_from([*'ab }]{["\\/\n\t<>,:é中😀', "\u2028"])
JSON_TEXT = st.text(alphabet=STRING_CHARS, max_size=6)
JSON_VALUES = st.recursive(
    st.one_of(
        st.none(),
        st.booleans(),
        st.integers(-(10**12), 10**12),
        st.floats(allow_nan=False, allow_infinity=False),
        JSON_TEXT,
    ),
    lambda children: (
        st.lists(children, max_size=3) | st.dictionaries(JSON_TEXT, children, max_size=3)
    ),
    max_leaves=8,
)
ARGUMENTS = st.dictionaries(JSON_TEXT, JSON_VALUES, max_size=4)
WS = st.sampled_from(["", "", " ", "\n", "  ", "\n  ", "\t"])
SEPARATORS = st.sampled_from([(", ", ": "), (",", ":"), (",", ": ")])
BEFORE = st.lists(
    st.sampled_from(
        ["Sure", " ", "\n", "<", "<tool", "<tool_", "<tool_x>", "</tool_call", "{", "é"]
    ),
    max_size=5,
).map("".join)
AFTER = st.sampled_from(["", "Done.", "Anything else?", "Résultat : 5 <b>"])


@st.composite
def rendered(draw: st.DrawFn, syntax: CallSyntax) -> tuple[str, str, list[Call]]:
    """An answer in ``syntax``: (text, expected content, expected calls)."""

    def ws() -> str:
        return draw(WS)

    count = draw(st.integers(0 if syntax.empty_allowed else 1, 4))
    expected: list[Call] = []
    written: list[str] = []
    for _ in range(count):
        name, arguments = draw(NAMES), draw(ARGUMENTS)
        arguments_json = json.dumps(
            arguments,
            ensure_ascii=draw(st.booleans()),
            separators=draw(SEPARATORS),
            indent=draw(st.sampled_from([None, 2])),
        )
        if syntax.named_args:
            written.append(f"[TOOL_CALLS]{name}[ARGS]{ws()}{arguments_json}")
            expected.append((name, arguments, arguments_json))
            continue
        form = draw(st.sampled_from(["object", "object", "string", "missing"]))
        if form == "missing" and arguments:
            form = "object"
        members = [f'"name"{ws()}:{ws()}{json.dumps(name)}']
        if form != "missing":
            value = arguments_json if form == "object" else json.dumps(arguments_json)
            key = draw(st.sampled_from([syntax.arguments_key, "arguments", "parameters"]))
            member = f'"{key}"{ws()}:{ws()}{value}'
            members.insert(draw(st.integers(0, 1)), member)
        call = "{" + ws() + f"{ws()},{ws()}".join(members) + ws() + "}"
        written.append(call)
        expected.append((name, arguments, "{}" if form == "missing" else arguments_json))

    before = after = ""
    if syntax is HERMES:
        before = draw(BEFORE)
        text = before + ws().join(f"<tool_call>{ws()}{c}{ws()}</tool_call>" for c in written)
    elif syntax is LLAMA3:
        lead = draw(st.sampled_from(["", "<|python_tag|>"])) + ws()
        text = lead + f"{ws()};{ws()}".join(written)
    elif syntax is MISTRAL:
        text = f"[TOOL_CALLS]{ws()}[{ws()}" + f"{ws()},{ws()}".join(written) + f"{ws()}]"
    elif syntax is MISTRAL_ARGS:
        text = ws().join(written)
    else:
        listed = f"{ws()},{ws()}".join(written)
        text = f"<tool_call>{ws()}[{ws()}{listed}{ws()}]{ws()}</tool_call>"
    if syntax in (HERMES, TOOL_CALL_LIST):
        after = draw(AFTER)
        text += ws() + after
    if not after:
        text += ws()
    return text, before + after, expected


@pytest.mark.parametrize("syntax", SYNTAXES.values(), ids=SYNTAXES.keys())
@settings(
    max_examples=120,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
@given(data=st.data())
def test_random_calls_round_trip_and_stream(syntax: CallSyntax, data: st.DataObject) -> None:
    text, content, expected = data.draw(rendered(syntax), label="answer")
    parsed = parse_tool_output(text, syntax)
    assert parsed.content == content
    assert calls_of(parsed) == expected

    cuts = sorted(data.draw(st.lists(st.integers(0, len(text)), max_size=8), label="cuts"))
    bounds = [0, *cuts, len(text)]
    pieces = [text[a:b] for a, b in itertools.pairwise(bounds)]
    final = stream_pieces(pieces, syntax)
    assert final.content == content
    assert calls_of(final) == expected
