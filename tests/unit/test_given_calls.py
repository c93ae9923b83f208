"""One reader of tool calls handed over in loose OpenAI shapes, one policy: every shape the
frameworks and OpenAI clients use is read the same way, and a malformed call raises
``InvalidRequestError`` (never skipped) in every place that reads calls."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from llama_index.core.base.llms.types import ChatMessage
from pydantic import BaseModel

from llamacpp_integrations.errors import InvalidRequestError
from llamacpp_integrations.llama_index.messages import to_engine_message
from llamacpp_integrations.llama_index.responses import tool_selections
from llamacpp_integrations.server.chat_messages import messages_reader
from llamacpp_integrations.tools import GivenToolCall, read_tool_calls
from llamacpp_integrations.tools.tool_prompt import calls_of


class SdkFunction(BaseModel):
    name: str
    arguments: str


class SdkCall(BaseModel):
    """An OpenAI SDK tool call object (what llama-index-llms-openai keeps)."""

    id: str
    type: str
    function: SdkFunction


WANTED = GivenToolCall("c1", "add", {"a": 1})


@pytest.mark.parametrize(
    "call",
    [
        {"id": "c1", "type": "function", "function": {"name": "add", "arguments": '{"a": 1}'}},
        {"id": "c1", "function": {"name": "add", "arguments": {"a": 1}}},
        {"id": "c1", "name": "add", "arguments": {"a": 1}},  # flat
        {"id": "c1", "name": "add", "args": {"a": 1}, "type": "tool_call"},  # LangChain's
        {"id": "c1", "function": {"name": "add", "arguments": '{"a": 1'}},  # cut while streamed
        SdkCall(id="c1", type="function", function=SdkFunction(name="add", arguments='{"a":1}')),
    ],
)
def test_every_shape_reads_the_same(call: Any) -> None:
    assert read_tool_calls([call], where="calls") == [WANTED]


def test_missing_parts_have_their_defaults() -> None:
    (call,) = read_tool_calls([{"function": {"name": "now", "arguments": " "}}], where="c")
    assert call == GivenToolCall(None, "now", {})  # no id: paired with any tool result
    assert call.to_template() == {"type": "function", "function": {"name": "now", "arguments": {}}}
    assert read_tool_calls([{"id": "", "name": "now"}], where="c")[0].id is None


@pytest.mark.parametrize(
    ("calls", "match"),
    [
        ("not a list", r"calls must be a list of tool calls"),
        ([42], r"calls\[0\] must be a mapping"),
        ([{"id": "x"}], r"calls\[0\] has no name"),
        ([{"function": {"name": ""}}], r"calls\[0\] has no name"),
        ([{"function": "add"}], r"calls\[0\]\.function must be"),
        ([{"type": "custom", "name": "add"}], r"calls\[0\] is a 'custom' call"),
        (
            [{"name": "add", "arguments": "not json"}],
            r"calls\[0\]\.function\.arguments is not JSON",
        ),
        ([{"name": "add", "arguments": "[1, 2]"}], r"arguments must be a JSON object"),
    ],
)
def test_malformed_calls_raise_naming_the_entry(calls: Any, match: str) -> None:
    with pytest.raises(InvalidRequestError, match=match):
        read_tool_calls(calls, where="calls")


# -- every reader of calls uses it -----------------------------------------------------------------


def _llama_index_history(calls: list[Any]) -> list[tuple[str | None, str, Any]]:
    message = ChatMessage(role="assistant", content="", additional_kwargs={"tool_calls": calls})
    engine_message = to_engine_message(message)
    return [
        (c.get("id"), c["function"]["name"], c["function"]["arguments"])
        for c in engine_message.tool_calls or ()
    ]


def _llama_index_response(calls: list[Any]) -> list[tuple[str | None, str, Any]]:
    message = ChatMessage(role="assistant", content="", additional_kwargs={"tool_calls": calls})
    return [(s.tool_id, s.tool_name, s.tool_kwargs) for s in tool_selections(message)]


def _server(calls: list[Any]) -> list[tuple[str | None, str, Any]]:
    (message,) = messages_reader([{"role": "assistant", "content": "", "tool_calls": calls}])(None)
    return [
        (c.get("id"), c["function"]["name"], c["function"]["arguments"])
        for c in message["tool_calls"]
    ]


def _tool_prompt(calls: list[Any]) -> list[tuple[str | None, str, Any]]:
    return calls_of({"role": "assistant", "tool_calls": calls})


READERS: list[Callable[[list[Any]], list[tuple[str | None, str, Any]]]] = [
    _llama_index_history,
    _llama_index_response,
    _server,
    _tool_prompt,
]


@pytest.mark.parametrize("read", READERS)
def test_every_reader_reads_a_call_the_same(read: Callable[[list[Any]], Any]) -> None:
    call = {"id": "c1", "type": "function", "function": {"name": "add", "arguments": '{"a": 1}'}}
    assert read([call]) == [("c1", "add", {"a": 1})]


@pytest.mark.parametrize("read", READERS)
@pytest.mark.parametrize(
    "bad",
    [
        {"id": "x", "function": {"arguments": "{}"}},  # no name
        {"id": "x", "function": {"name": "add", "arguments": "nope"}},  # arguments not JSON
        "a string",
    ],
)
def test_every_reader_refuses_a_malformed_call(read: Callable[[list[Any]], Any], bad: Any) -> None:
    good = {"id": "c1", "function": {"name": "add", "arguments": "{}"}}
    with pytest.raises(InvalidRequestError):  # raised, never skipped
        read([good, bad])
