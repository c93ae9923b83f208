"""The loop guard's bookkeeping without a model: which calls are answered, canonical
arguments, and how streamed calls are held back, released and dropped."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from llamacpp_integrations.engine import ChatRequest
from llamacpp_integrations.tools import HERMES, LLAMA3, TOOL_CALL_LIST, ToolCall, ToolCallDelta
from llamacpp_integrations.tools.loop_guard import (
    RepeatFilter,
    answered_calls,
    call_key,
    canonical_arguments,
    follow_up_request,
)


def _assistant(*calls: tuple[str, str, dict[str, Any]]) -> dict[str, Any]:
    return {
        "role": "assistant",
        "content": "",
        "tool_calls": [
            {"id": i, "type": "function", "function": {"name": n, "arguments": json.dumps(a)}}
            for i, n, a in calls
        ],
    }


def test_a_call_counts_as_answered_once_its_result_is_in_the_conversation() -> None:
    history = [
        {"role": "user", "content": "6 times 7?"},
        _assistant(("c1", "multiply", {"a": 6, "b": 7}), ("c2", "add", {"a": 1, "b": 2})),
        {"role": "tool", "tool_call_id": "c1", "content": "42"},
    ]
    assert answered_calls(history) == {call_key("multiply", {"b": 7, "a": 6.0})}
    history.append({"role": "tool", "tool_call_id": "c2", "content": "3"})
    assert answered_calls(history) == {
        call_key("multiply", {"a": 6, "b": 7}),
        call_key("add", {"a": 1, "b": 2}),
    }
    # Frameworks that give no ids: a call is answered by the tool message after it.
    no_ids = [
        {"role": "assistant", "tool_calls": [{"name": "f", "args": {"x": 1}}]},
        {"role": "tool", "content": "ok"},
    ]
    assert answered_calls(no_ids) == {call_key("f", {"x": 1})}


def test_canonical_arguments() -> None:
    assert canonical_arguments({"b": 7, "a": 6.0}) == canonical_arguments('{"a": 6, "b": 7}')
    assert canonical_arguments({"a": [1.0, {"z": 2, "y": 1}]}) == '{"a":[1,{"y":1,"z":2}]}'
    assert canonical_arguments({"a": 6.5}) != canonical_arguments({"a": 6})


def _deltas(call_id: str, name: str, arguments: str, index: int = 0) -> list[ToolCallDelta]:
    pieces = [arguments[i : i + 3] for i in range(0, len(arguments), 3)]
    return [ToolCallDelta(index, call_id, name, pieces[0])] + [
        ToolCallDelta(index, arguments=piece) for piece in pieces[1:]
    ]


def _call(call_id: str, name: str, arguments: dict[str, Any]) -> ToolCall:
    return ToolCall(call_id, name, arguments, json.dumps(arguments))


def _stream(guard: RepeatFilter, deltas: list[ToolCallDelta]) -> list[ToolCallDelta]:
    shown: list[ToolCallDelta] = []
    for delta in deltas:
        shown += guard.deltas([delta])
    return shown


def _joined(deltas: list[ToolCallDelta]) -> dict[int, tuple[str | None, str]]:
    calls: dict[int, tuple[str | None, str]] = {}
    for delta in deltas:
        name, arguments = calls.get(delta.index, (delta.name, ""))
        calls[delta.index] = (name, arguments + delta.arguments)
    return calls


ANSWERED = frozenset({call_key("multiply", {"a": 6, "b": 7})})


def test_a_repeat_is_held_while_it_may_be_one_then_dropped() -> None:
    guard = RepeatFilter(ANSWERED)
    shown = _stream(guard, _deltas("x", "multiply", '{"a": 6, "b": 7}'))
    assert shown == []  # agreed with the answered call all the way
    last, calls = guard.finish([], [_call("x", "multiply", {"a": 6, "b": 7})])
    assert last == [] and calls == () and guard.prevented == 1


def test_a_call_is_shown_as_soon_as_it_cannot_be_a_repeat() -> None:
    guard = RepeatFilter(ANSWERED)
    deltas = _deltas("x", "multiply", '{"a": 6, "b": 8}')
    shown = _stream(guard, deltas[:-1])
    assert _joined(shown) == {0: ("multiply", '{"a": 6, "b": 8')}  # "8" settled it
    last, calls = guard.finish(deltas[-1:], [_call("x", "multiply", {"a": 6, "b": 8})])
    assert _joined(shown + last) == {0: ("multiply", '{"a": 6, "b": 8}')}
    assert len(calls) == 1 and guard.prevented == 0
    # Other tools are never held.
    other = RepeatFilter(ANSWERED)
    assert _joined(_stream(other, _deltas("y", "add", '{"a": 6}'))) == {0: ("add", '{"a": 6}')}


def test_calls_after_a_dropped_repeat_are_renumbered_and_keep_their_order() -> None:
    guard = RepeatFilter(ANSWERED)
    deltas = _deltas("x", "multiply", '{"a": 6, "b": 7}') + _deltas("y", "add", '{"a": 1}', 1)
    shown = _stream(guard, deltas)
    assert shown == []  # the add call waits behind the held multiply
    finished = [_call("x", "multiply", {"a": 6, "b": 7}), _call("y", "add", {"a": 1})]
    last, calls = guard.finish([], finished)
    assert _joined(last) == {0: ("add", '{"a": 1}')}
    assert [c.name for c in calls] == ["add"] and guard.prevented == 1


@given(
    st.dictionaries(
        st.sampled_from("abc"), st.one_of(st.integers(-20, 20), st.text("xyz", max_size=3))
    )
)
def test_streamed_and_whole_agree(arguments: dict[str, Any]) -> None:
    answered = frozenset({call_key("f", {"a": 1, "b": "x"})})
    text = json.dumps(arguments)
    guard = RepeatFilter(answered)
    shown = _stream(guard, _deltas("i", "f", text))
    last, calls = guard.finish([], [_call("i", "f", arguments)])
    repeat = call_key("f", arguments) in answered
    assert guard.prevented == int(repeat)
    assert _joined(shown + last) == ({} if repeat else {0: ("f", text)})
    assert len(calls) == int(not repeat)


def _request(max_tokens: int | None) -> ChatRequest:
    return ChatRequest(messages=[{"role": "user", "content": "x"}], max_tokens=max_tokens)


@pytest.mark.parametrize("syntax", [TOOL_CALL_LIST, HERMES, LLAMA3])
def test_the_follow_up_continues_the_answer_with_a_reply(syntax: Any) -> None:
    follow = follow_up_request(
        _request(100), syntax, prompt="PROMPT", answer_so_far="So far.", generated_tokens=30
    )
    assert follow is not None and follow.max_tokens == 70
    assert follow.grammar is not None and "root" in follow.grammar
    if syntax is TOOL_CALL_LIST:
        assert follow.prompt == "PROMPT<tool_call>[]</tool_call>"  # "no call", then the reply
    else:
        assert follow.prompt == "PROMPT" + "So far."
    assert (
        follow_up_request(_request(30), syntax, prompt="P", answer_so_far="", generated_tokens=30)
        is None
    )
    assert (
        follow_up_request(_request(None), syntax, prompt="P", answer_so_far="", generated_tokens=30)
        is not None
    )


def test_a_call_repeating_an_earlier_call_of_the_same_answer_is_dropped() -> None:
    guard = RepeatFilter(frozenset())
    first = _deltas("x", "multiply", '{"a": 10, "b": 20}')
    second = _deltas("y", "multiply", '{"a": 10, "b": 20}', 1)
    third = _deltas("z", "multiply", '{"a": 10, "b": 21}', 2)
    shown = _stream(guard, first + second + third)
    finished = [
        _call("x", "multiply", {"a": 10, "b": 20}),
        _call("y", "multiply", {"a": 10, "b": 20}),
        _call("z", "multiply", {"a": 10, "b": 21}),
    ]
    last, calls = guard.finish([], finished)
    assert [c.id for c in calls] == ["x", "z"] and guard.prevented == 1
    assert _joined(shown + last) == {
        0: ("multiply", '{"a": 10, "b": 20}'),
        1: ("multiply", '{"a": 10, "b": 21}'),
    }


def test_with_the_guard_off_every_call_passes_as_written() -> None:
    guard = RepeatFilter(None)
    first = _deltas("x", "multiply", '{"a": 10, "b": 20}')
    second = _deltas("y", "multiply", '{"a": 10, "b": 20}', 1)
    shown = _stream(guard, first + second)
    finished = [
        _call("x", "multiply", {"a": 10, "b": 20}),
        _call("y", "multiply", {"a": 10, "b": 20}),
    ]
    last, calls = guard.finish([], finished)
    assert [c.id for c in calls] == ["x", "y"] and guard.prevented == 0
    assert last == [] and len(_joined(shown)) == 2  # nothing was held back
