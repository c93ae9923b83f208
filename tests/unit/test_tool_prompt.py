"""Tool specs and choices, and how tools and tool history are put into the prompt.

Covers the framework-neutral normalisation of tools and tool choices, the two ways earlier
calls and results are written into the history (the fallback text markup for templates that
know no tools, and the OpenAI shape for templates that do), and the fallback instructions.
"""

from __future__ import annotations

import copy
import json
import re
from types import MappingProxyType
from typing import Any

import pytest

from llamacpp_integrations.errors import InvalidRequestError
from llamacpp_integrations.tools.call_syntax import (
    HERMES,
    LLAMA3,
    MISTRAL,
    MISTRAL_ARGS,
    TOOL_CALL_LIST,
    CallSyntax,
)
from llamacpp_integrations.tools.tool_parser import parse_tool_output
from llamacpp_integrations.tools.tool_prompt import (
    NEXT_STEP,
    detect_tool_support,
    fallback_history,
    native_history,
    with_tool_instructions,
)
from llamacpp_integrations.tools.tool_spec import (
    ToolChoice,
    ToolSpec,
    normalize_tool_choice,
    normalize_tools,
)

from .tiny_model import tiny_engine

WEATHER_PARAMETERS = {
    "type": "object",
    "properties": {"city": {"type": "string"}},
    "required": ["city"],
}
WEATHER = ToolSpec("get_weather", "Current weather in a city.", WEATHER_PARAMETERS)
ADD = ToolSpec(
    "add",
    "Add two integers.",
    {"type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}}},
)
TOOLS = [WEATHER, ADD]

# -- normalize_tools -----------------------------------------------------------------------------


def test_openai_tool_with_wrapper() -> None:
    tool = {
        "type": "function",
        "function": {
            "name": "get_weather",
            "description": "Current weather in a city.",
            "parameters": WEATHER_PARAMETERS,
        },
    }
    assert normalize_tools([tool]) == [WEATHER]


def test_openai_tool_without_wrapper_and_tool_specs_mix() -> None:
    bare = {"name": "get_weather", "description": "Current weather in a city."}
    bare["parameters"] = WEATHER_PARAMETERS  # type: ignore[assignment]
    specs = normalize_tools([bare, ADD])
    assert specs == [WEATHER, ADD]
    assert specs[1] is ADD


def test_tuple_of_tools_is_a_list_of_tools() -> None:
    assert normalize_tools((WEATHER,)) == [WEATHER]
    assert normalize_tools([]) == []


@pytest.mark.parametrize(
    "tool",
    [
        {"type": "function", "function": {"name": "now"}},
        {"name": "now", "parameters": None},
        {"name": "now", "description": None, "parameters": {}},
    ],
    ids=["wrapped", "null-parameters", "empty-parameters"],
)
def test_missing_parameters_and_description_get_defaults(tool: dict[str, Any]) -> None:
    (spec,) = normalize_tools([tool])
    assert spec == ToolSpec("now", "", {"type": "object", "properties": {}})


def test_parameters_without_type_describe_an_object() -> None:
    (spec,) = normalize_tools([{"name": "f", "parameters": {"properties": {"x": {}}}}])
    assert spec.parameters == {"properties": {"x": {}}}


@pytest.mark.parametrize(
    "name",
    ["", "get weather", "x" * 65, "naïve", "a/b", "semi;colon", 42, None],
    ids=["empty", "space", "too-long", "non-ascii", "slash", "semicolon", "int", "none"],
)
def test_bad_tool_names(name: object) -> None:
    with pytest.raises(InvalidRequestError, match=r"tools\[0\]"):
        normalize_tools([{"type": "function", "function": {"name": name}}])


@pytest.mark.parametrize("name", ["a", "get_weather", "web.search-v2", "X" * 64, "2fa"])
def test_good_tool_names(name: str) -> None:
    assert normalize_tools([ToolSpec(name)])[0].name == name


def test_bad_name_in_a_tool_spec() -> None:
    with pytest.raises(InvalidRequestError, match=r"tools\[1\]"):
        normalize_tools([WEATHER, ToolSpec("no spaces please")])


def test_duplicate_names() -> None:
    tools = [WEATHER, ADD, {"name": "add"}, {"name": "get_weather"}]
    with pytest.raises(InvalidRequestError, match="unique") as caught:
        normalize_tools(tools)
    assert "add" in str(caught.value)
    assert "get_weather" in str(caught.value)


@pytest.mark.parametrize(
    "parameters",
    [{"type": "string"}, {"type": "array", "items": {}}, "an object", 3],
    ids=["string-schema", "array-schema", "string", "number"],
)
def test_parameters_must_describe_an_object(parameters: object) -> None:
    with pytest.raises(InvalidRequestError, match="parameters"):
        normalize_tools([{"name": "f", "parameters": parameters}])
    with pytest.raises(InvalidRequestError, match="parameters"):
        normalize_tools([ToolSpec("f", parameters=parameters)])  # type: ignore[arg-type]


@pytest.mark.parametrize(
    "tools",
    [
        {"name": "f"},
        "get_weather",
        b"get_weather",
        None,
        [3],
        [None],
        [{"type": "function", "function": {}}],
        [{"type": "function", "function": "f"}],
        [{"description": "no name"}],
        [{"name": "f", "description": 3}],
    ],
    ids=[
        "one-dict",
        "str",
        "bytes",
        "none",
        "number-item",
        "none-item",
        "no-name",
        "function-not-a-mapping",
        "bare-no-name",
        "description-not-str",
    ],
)
def test_not_tools(tools: Any) -> None:
    with pytest.raises(InvalidRequestError):
        normalize_tools(tools)


def test_invalid_request_error_is_a_value_error() -> None:
    with pytest.raises(ValueError):
        normalize_tools([{"name": ""}])


def test_to_openai_gives_plain_containers() -> None:
    spec = ToolSpec(
        "f",
        "d",
        MappingProxyType({"type": "object", "properties": MappingProxyType({"x": {}})}),
    )
    out = spec.to_openai()
    assert out == {
        "type": "function",
        "function": {
            "name": "f",
            "description": "d",
            "parameters": {"type": "object", "properties": {"x": {}}},
        },
    }
    assert type(out["function"]["parameters"]["properties"]) is dict
    json.dumps(out)


# -- normalize_tool_choice -----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("choice", "expected"),
    [
        (None, ToolChoice("auto")),
        ("auto", ToolChoice("auto")),
        ("AUTO", ToolChoice("auto")),
        ("none", ToolChoice("none")),
        ("required", ToolChoice("required")),
        ("Required", ToolChoice("required")),
        ("any", ToolChoice("required")),
        (True, ToolChoice("required")),
        (False, ToolChoice("none")),
        ("add", ToolChoice("required", name="add")),
        ({"type": "function", "function": {"name": "add"}}, ToolChoice("required", name="add")),
        ({"name": "get_weather"}, ToolChoice("required", name="get_weather")),
        (ToolChoice("required", name="add"), ToolChoice("required", name="add")),
    ],
    ids=lambda value: repr(value)[:40],
)
def test_tool_choice_spellings(choice: object, expected: ToolChoice) -> None:
    assert normalize_tool_choice(choice, TOOLS) == expected


def test_must_call() -> None:
    assert not ToolChoice("auto").must_call
    assert not ToolChoice("none").must_call
    assert ToolChoice("required").must_call
    assert ToolChoice("required", name="add").must_call


@pytest.mark.parametrize(
    "choice",
    [
        "delete_everything",
        {"type": "function", "function": {"name": "delete_everything"}},
        {"name": "delete_everything"},
        ToolChoice("required", name="delete_everything"),
    ],
    ids=["str", "openai", "bare", "tool-choice"],
)
def test_unknown_tool_name(choice: object) -> None:
    with pytest.raises(InvalidRequestError, match="delete_everything") as caught:
        normalize_tool_choice(choice, TOOLS)
    assert "get_weather" in str(caught.value), "the error lists the tools offered"


@pytest.mark.parametrize(
    "choice",
    [
        {"type": "function", "function": {}},
        {"type": "function", "function": {"name": 3}},
        {"type": "function", "function": "add"},
        {"type": "auto"},
        3,
        ["add"],
    ],
    ids=["no-name", "name-int", "function-str", "type-only", "int", "list"],
)
def test_tool_choice_not_understood(choice: object) -> None:
    with pytest.raises(InvalidRequestError):
        normalize_tool_choice(choice, TOOLS)


@pytest.mark.parametrize("choice", ["required", "any", True, "add", {"name": "add"}])
def test_calling_needs_tools(choice: object) -> None:
    with pytest.raises(InvalidRequestError):
        normalize_tool_choice(choice, [])


@pytest.mark.parametrize("choice", ["none", False])
def test_none_needs_no_tools(choice: object) -> None:
    assert normalize_tool_choice(choice, []) == ToolChoice("none")


# -- histories -----------------------------------------------------------------------------------


def agent_history() -> list[dict[str, Any]]:
    """A typical agent loop: OpenAI-shaped calls, then LangChain-shaped ones."""
    return [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "Weather in Paris and Oslo?"},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": "call_paris",
                    "type": "function",
                    "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'},
                },
                {
                    "id": "call_oslo",
                    "type": "function",
                    "function": {"name": "get_weather", "arguments": '{"city": "Oslo"}'},
                },
            ],
        },
        {"role": "tool", "tool_call_id": "call_paris", "content": "18 °C"},
        {"role": "tool", "tool_call_id": "call_oslo", "content": [{"type": "text", "text": "9"}]},
        {"role": "assistant", "content": "Paris 18, Oslo 9."},
        {"role": "user", "content": "Add 2 and 3."},
        {
            "role": "assistant",
            "content": "Let me compute.",
            "tool_calls": [{"name": "add", "args": {"a": 2, "b": 3}, "id": "lc-add-1"}],
        },
        {"role": "tool", "tool_call_id": "lc-add-1", "content": "5"},
        {"role": "user", "content": "Thanks! And in Rome?"},
    ]


def tool_responses(text: str) -> list[dict[str, Any]]:
    found = re.findall(r"<tool_response>\n(.*?)\n</tool_response>", text, re.DOTALL)
    return [json.loads(item) for item in found]


def test_fallback_history_writes_calls_and_results_as_text() -> None:
    history = agent_history()
    before = copy.deepcopy(history)
    out = fallback_history(history)
    assert history == before, "the input is not modified"

    assert [m["role"] for m in out] == [
        "system",
        "user",
        "assistant",
        "user",
        "assistant",
        "user",
        "assistant",
        "user",
    ]
    assert out[0] == {"role": "system", "content": "Be brief."}
    assert out[1] == {"role": "user", "content": "Weather in Paris and Oslo?"}
    assert out[2] == {
        "role": "assistant",
        "content": '<tool_call>[{"name": "get_weather", "arguments": {"city": "Paris"}}, '
        '{"name": "get_weather", "arguments": {"city": "Oslo"}}]</tool_call>',
    }
    # both results in one user turn, each naming the call it answers
    assert out[3]["content"].count("<tool_response>") == 2
    assert tool_responses(out[3]["content"]) == [
        {"name": "get_weather", "arguments": {"city": "Paris"}, "content": "18 °C"},
        {"name": "get_weather", "arguments": {"city": "Oslo"}, "content": "9"},
    ]
    assert "18 °C" in out[3]["content"], "non-ASCII is written as is"
    assert out[4] == {"role": "assistant", "content": "Paris 18, Oslo 9."}
    assert out[6] == {
        "role": "assistant",
        "content": '<tool_call>[{"name": "add", "arguments": {"a": 2, "b": 3}}]</tool_call>\n'
        "Let me compute.",
    }
    # the result and the next user turn share one message
    assert out[7]["content"] == (
        '<tool_response>\n{"name": "add", "arguments": {"a": 2, "b": 3}, "content": "5"}\n'
        "</tool_response>\nThanks! And in Rome?"
    )
    # Only results that end the conversation ask for the next step.
    assert NEXT_STEP not in str(out)


def test_results_that_end_the_conversation_ask_for_the_next_step() -> None:
    history = agent_history()[:-1]  # ends with the add result
    out = fallback_history(history)
    assert out[-1]["role"] == "user"
    assert out[-1]["content"].endswith("</tool_response>\n" + NEXT_STEP)


def test_fallback_calls_read_back_with_the_list_syntax() -> None:
    out = fallback_history(agent_history())
    first = parse_tool_output(out[2]["content"], TOOL_CALL_LIST)
    assert [(c.name, c.arguments) for c in first.tool_calls] == [
        ("get_weather", {"city": "Paris"}),
        ("get_weather", {"city": "Oslo"}),
    ]
    assert first.content == ""
    second = parse_tool_output(out[6]["content"], TOOL_CALL_LIST)
    assert [(c.name, c.arguments) for c in second.tool_calls] == [("add", {"a": 2, "b": 3})]
    assert second.content == "Let me compute."


def test_fallback_roles_alternate_when_the_history_ends_with_results() -> None:
    history = agent_history()[:-1]
    out = fallback_history(history)
    roles = [m["role"] for m in out[1:]]
    assert roles == ["user", "assistant", "user", "assistant", "user", "assistant", "user"]
    assert out[-1]["content"].startswith("<tool_response>")


def test_fallback_tool_names() -> None:
    history = [
        {"role": "user", "content": "q"},
        {"role": "assistant", "content": "", "tool_calls": [{"name": "f", "args": {}, "id": "1"}]},
        {"role": "tool", "tool_call_id": "1", "name": "explicit", "content": "a"},
        {"role": "tool", "tool_call_id": "unknown", "content": "b"},
        {"role": "tool", "content": "c"},
    ]
    out = fallback_history(history)
    assert [m["role"] for m in out] == ["user", "assistant", "user"]
    assert [r["name"] for r in tool_responses(out[2]["content"])] == ["explicit", "tool", "tool"]


def test_fallback_keeps_other_messages() -> None:
    history = [
        {"role": "system", "content": "S"},
        {"role": "user", "content": "Hi"},
        {"role": "assistant", "content": "Hello"},
        {"role": "user", "content": "Bye"},
    ]
    assert fallback_history(history) == history


def test_native_history_normalises_calls_and_results() -> None:
    history = agent_history()
    before = copy.deepcopy(history)
    out = native_history(history, HERMES)
    assert history == before, "the input is not modified"
    assert len(out) == len(history)
    assert out[2]["content"] == ""
    assert out[2]["tool_calls"] == [
        {
            "id": "call_paris",
            "type": "function",
            "function": {"name": "get_weather", "arguments": {"city": "Paris"}},
        },
        {
            "id": "call_oslo",
            "type": "function",
            "function": {"name": "get_weather", "arguments": {"city": "Oslo"}},
        },
    ]
    assert out[7]["content"] == "Let me compute."
    assert out[7]["tool_calls"] == [
        {
            "id": "lc-add-1",
            "type": "function",
            "function": {"name": "add", "arguments": {"a": 2, "b": 3}},
        }
    ]
    assert out[3] == {
        "role": "tool",
        "tool_call_id": "call_paris",
        "content": "18 °C",
        "name": "get_weather",
    }
    assert out[4]["name"] == "get_weather"
    assert out[8]["name"] == "add"
    for i in (0, 1, 5, 6, 9):
        assert out[i] == history[i]


def test_native_history_keeps_given_names_and_fills_missing_ids() -> None:
    history = [
        {"role": "user", "content": "q"},
        {
            "role": "assistant",
            "tool_calls": [
                {"type": "function", "function": {"name": "f", "arguments": "{}"}},
                {"name": "g", "args": {"x": 1}},
            ],
        },
        {"role": "tool", "tool_call_id": "whatever", "name": "mine", "content": "r"},
    ]
    out = native_history(history, LLAMA3)
    assert [call["id"] for call in out[1]["tool_calls"]] == ["call0", "call1"]
    assert out[1]["tool_calls"][0]["function"] == {"name": "f", "arguments": {}}
    assert out[1]["content"] == ""
    assert out[2]["name"] == "mine"


@pytest.mark.parametrize("syntax", [MISTRAL, MISTRAL_ARGS], ids=lambda s: s.name)
def test_native_history_gives_mistral_nine_character_ids(syntax: CallSyntax) -> None:
    out = native_history(agent_history(), syntax)
    call_ids = [call["id"] for m in out for call in m.get("tool_calls", ())]
    result_ids = [m["tool_call_id"] for m in out if m["role"] == "tool"]
    assert len(call_ids) == 3
    assert all(re.fullmatch(r"[A-Za-z0-9]{9}", call_id) for call_id in call_ids)
    assert len(set(call_ids)) == 3
    assert result_ids == call_ids, "each result keeps pointing at its call"
    assert native_history(agent_history(), syntax) == out, "the mapping is stable"


@pytest.mark.parametrize("syntax", [HERMES, LLAMA3], ids=lambda s: s.name)
def test_native_history_keeps_ids_for_other_syntaxes(syntax: CallSyntax) -> None:
    out = native_history(agent_history(), syntax)
    call_ids = [call["id"] for m in out for call in m.get("tool_calls", ())]
    assert call_ids == ["call_paris", "call_oslo", "lc-add-1"]


@pytest.mark.parametrize("history_fn", [fallback_history, lambda h: native_history(h, HERMES)])
def test_calls_without_a_name_are_refused(history_fn: Any) -> None:
    history = [{"role": "assistant", "tool_calls": [{"id": "1", "function": {"arguments": "{}"}}]}]
    with pytest.raises(InvalidRequestError, match="name"):
        history_fn(history)
    with pytest.raises(InvalidRequestError, match="mapping"):
        history_fn([{"role": "assistant", "tool_calls": ["f()"]}])


# -- fallback instructions -----------------------------------------------------------------------


def described_tools(text: str) -> list[dict[str, Any]]:
    match = re.search(r"<tools>(.*?)</tools>", text, re.DOTALL)
    assert match is not None, text
    described: list[dict[str, Any]] = json.loads(match.group(1))
    return described


def test_instructions_are_merged_into_the_system_message() -> None:
    messages = [
        {"role": "system", "content": "Be brief.", "name": "policy"},
        {"role": "user", "content": "Hi"},
    ]
    before = copy.deepcopy(messages)
    out = with_tool_instructions(messages, TOOLS, ToolChoice("auto"), True)
    assert messages == before
    assert len(out) == 2
    assert out[1] == messages[1]
    assert out[0]["role"] == "system"
    assert out[0]["name"] == "policy", "other keys of the system message are kept"
    assert out[0]["content"].startswith("Be brief.\n\n")
    assert described_tools(out[0]["content"]) == [
        {"name": t.name, "description": t.description, "parameters": dict(t.parameters)}
        for t in TOOLS
    ]


def test_instructions_become_the_system_message() -> None:
    messages = [{"role": "user", "content": "Hi"}]
    out = with_tool_instructions(messages, TOOLS, ToolChoice("auto"), True)
    assert [m["role"] for m in out] == ["system", "user"]
    assert out[1] == messages[0]
    assert "<tools>" in out[0]["content"]
    empty_system = [{"role": "system", "content": ""}, *messages]
    merged = with_tool_instructions(empty_system, TOOLS, ToolChoice("auto"), True)
    assert merged[0]["content"] == out[0]["content"]
    assert with_tool_instructions([], TOOLS, ToolChoice("auto"), True) == out[:1]


def test_instructions_name_every_tool() -> None:
    out = with_tool_instructions([], TOOLS, ToolChoice("auto"), True)
    text = out[0]["content"]
    for tool in TOOLS:
        assert f'"name": "{tool.name}"' in text
        assert tool.description in text
    assert "<tool_call>[]</tool_call>" in text, "auto says how to answer without a call"
    assert "<tool_response>" in text


def test_instructions_for_each_choice() -> None:
    def text(choice: ToolChoice, parallel: bool = True) -> str:
        content: str = with_tool_instructions([], TOOLS, choice, parallel)[0]["content"]
        return content

    named = text(ToolChoice("required", name="add"))
    assert 'Call the tool "add".' in named
    assert "<tool_call>[]</tool_call>" not in named
    required = text(ToolChoice("required"))
    assert "Call at least one tool." in required
    assert "<tool_call>[]</tool_call>" not in required
    assert "single call" in text(ToolChoice("auto"), parallel=False)
    assert "single call" not in text(ToolChoice("auto"), parallel=True)


def test_instructions_handle_read_only_schemas() -> None:
    spec = ToolSpec("f", "", MappingProxyType({"type": "object", "properties": {}}))
    out = with_tool_instructions([], [spec], ToolChoice("auto"), True)
    assert described_tools(out[0]["content"])[0]["parameters"] == {
        "type": "object",
        "properties": {},
    }


# -- detect_tool_support -------------------------------------------------------------------------

# A Llama 3 header template that lists tools as JSON (so "parameters" is in the prompt) but
# writes calls its own way, as firefunction v2 does: not the Llama 3 call syntax.
FUNCTOOLS_STYLE = (
    "{% for m in messages %}<|start_header_id|>{{ m.role }}<|end_header_id|>\n\n"
    "{% if loop.first and tools %}{{ tools|tojson }}\n{% endif %}{{ m.content }}"
    "{% if m.tool_calls %} functools[{% for c in m.tool_calls %}{{ c.function|tojson }}"
    "{% endfor %}]{% endif %}<|eot_id|>{% endfor %}"
)
LLAMA3_CALLS = FUNCTOOLS_STYLE.replace(
    " functools[{% for c in m.tool_calls %}{{ c.function|tojson }}{% endfor %}]",
    '{% for c in m.tool_calls %}{"name": "{{ c.function.name }}", "parameters": '
    "{{ c.function.arguments|tojson }}}{% endfor %}",
)


@pytest.mark.parametrize(("template", "syntax"), [(FUNCTOOLS_STYLE, None), (LLAMA3_CALLS, LLAMA3)])
def test_llama3_syntax_is_read_off_the_rendered_call(
    template: str, syntax: CallSyntax | None
) -> None:
    support = detect_tool_support(tiny_engine(), template)
    assert support.renders_tools and support.renders_tool_calls and support.renders_tool_results
    assert support.syntax == syntax
