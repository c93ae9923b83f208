"""The Responses API's translation over a scripted engine: input items to chat messages, body
fields to call options (``reasoning.effort`` included), refusals naming their field, and the
whole and streamed bodies, each checked against the ``openai`` SDK's own types."""

from __future__ import annotations

import json
from dataclasses import replace
from typing import Any

import pytest
from openai.types.responses import Response, ResponseStreamEvent
from pydantic import TypeAdapter
from starlette.testclient import TestClient

from llamacpp_integrations.engine import (
    ChatRequest,
)
from llamacpp_integrations.server import create_app
from llamacpp_integrations.server.reasoning_effort import reasoning_switch
from llamacpp_integrations.server.responses_api.inputs import chat_messages
from llamacpp_integrations.server.responses_api.options import responses_options
from llamacpp_integrations.server.responses_api.schemas import ResponsesBody
from llamacpp_integrations.testing import ScriptedEngine
from tests.builders.reasoning_templates import QWQ

from .tiny_model import INFO

EVENTS: TypeAdapter[Any] = TypeAdapter(ResponseStreamEvent)

WEATHER = {
    "type": "function",
    "name": "get_weather",
    "description": "The weather in a city.",
    "parameters": {
        "type": "object",
        "properties": {"city": {"type": "string"}},
        "required": ["city"],
    },
    "strict": True,
}
CALL_SCRIPT = (
    ("", '<tool_call>[{"name": "get_weather", '),
    ("", '"arguments": {"city": "Os'),
    ("", 'lo"}}]</tool_call>'),
)


def scripted(**fields: Any) -> ScriptedEngine:
    """The public ``ScriptedEngine``, with this module's model."""
    return ScriptedEngine(**{"info": INFO, **fields})


def _post(engine: ScriptedEngine, **body: Any) -> Any:
    with TestClient(create_app(engine)) as client:  # type: ignore[arg-type]
        return client.post("/v1/responses", json={"model": "m", "input": "Hi", **body})


def _events(engine: ScriptedEngine, **body: Any) -> list[dict[str, Any]]:
    """The stream's events, each checked against the SDK's types (``event:`` names its
    ``type``)."""
    answer = _post(engine, stream=True, **body)
    assert answer.status_code == 200
    assert "[DONE]" not in answer.text
    events = []
    for block in answer.text.strip().split("\n\n"):
        name, data = block.split("\n")
        event = json.loads(data.removeprefix("data: "))
        assert name == f"event: {event['type']}"
        EVENTS.validate_python(event)
        events.append(event)
    assert [e["sequence_number"] for e in events] == list(range(len(events)))
    return events


# ---- input ----------------------------------------------------------------------------------


def test_input_items_become_chat_messages_one_assistant_turn_per_answer() -> None:
    items = [
        {"role": "developer", "content": "Be brief."},
        {
            "type": "message",
            "role": "user",
            "content": [
                {"type": "input_text", "text": "Weather "},
                {"type": "input_image", "image_url": "data:image/png;base64,AAAA"},
            ],
        },
        {
            "type": "reasoning",
            "id": "rs_1",
            "summary": [],
            "content": [{"type": "reasoning_text", "text": "Look it up."}],
        },
        {
            "type": "message",
            "role": "assistant",
            "content": [{"type": "output_text", "text": "Checking.", "annotations": []}],
        },
        {
            "type": "function_call",
            "call_id": "c1",
            "name": "get_weather",
            "arguments": '{"city": "Os',
        },  # a call cut short comes back as it was
        {"type": "function_call_output", "call_id": "c1", "output": "Sunny"},
        {"role": "assistant", "content": "It is sunny."},
    ]
    messages = chat_messages("You help.", items)
    assert messages[0] == {"role": "system", "content": "You help."}
    assert messages[1] == {"role": "developer", "content": "Be brief."}
    assert messages[2]["content"][1] == {
        "type": "image_url",
        "image_url": {"url": "data:image/png;base64,AAAA"},
    }
    turn = messages[3]
    assert turn["reasoning_content"] == "Look it up." and turn["content"] == "Checking."
    assert turn["tool_calls"] == [
        {
            "id": "c1",
            "type": "function",
            "function": {"name": "get_weather", "arguments": {"city": "Os"}},
        }
    ]
    assert messages[4] == {
        "role": "tool",
        "tool_call_id": "c1",
        "content": "Sunny",
        "name": "get_weather",
    }
    assert messages[5] == {"role": "assistant", "content": "It is sunny."}
    assert chat_messages(None, "Hi") == [{"role": "user", "content": "Hi"}]


def test_tools_with_a_json_format_answer_with_calls_or_the_document() -> None:
    """What the Agents SDK sends for an agent with an output type."""
    engine = scripted(script=['{"city": "Oslo"}'])
    answer = _post(engine, tools=[WEATHER], text={"format": {"type": "json_object"}})
    assert answer.status_code == 200, answer.text
    (request,) = engine.requests
    assert request.grammar is not None and not request.grammar_triggers  # constrained at once


@pytest.mark.parametrize(
    ("body", "param"),
    [
        ({"input": []}, "input"),
        ({"input": None}, "input"),
        ({"input": [{"role": "robot", "content": "x"}]}, "input[0].role"),
        ({"input": [{"type": "web_search_call", "id": "w"}]}, "input[0].type"),
        ({"input": [{"type": "item_reference", "id": "msg_1"}]}, "input[0]"),
        ({"input": [{"role": "user", "content": [{"type": "input_file"}]}]}, "input[0].content[0]"),
        (
            {"input": [{"role": "system", "content": [{"type": "input_image", "image_url": "x"}]}]},
            "input[0].content[0]",
        ),
        (
            {"input": [{"role": "user", "content": [{"type": "input_image", "file_id": "f"}]}]},
            "input[0].content[0].file_id",
        ),
        (
            {"input": [{"type": "function_call", "call_id": "c", "name": "f", "arguments": "]"}]},
            "input[0].arguments",
        ),
        ({"input": [{"type": "function_call_output", "output": "x"}]}, "input[0].call_id"),
        ({"previous_response_id": "resp_1"}, "previous_response_id"),
        ({"conversation": "conv_1"}, "conversation"),
        ({"background": True}, "background"),
        ({"include": ["message.output_text.logprobs"]}, "include"),
        ({"text": {"verbosity": "low"}}, "text.verbosity"),
        ({"text": {"format": {"type": "json_schema", "name": "x"}}}, "text.format.schema"),
        ({"text": {"format": {"type": "xml"}}}, "text.format.type"),
        ({"tools": [WEATHER, {"type": "web_search"}]}, "tools[1].type"),
        ({"tools": [WEATHER], "tool_choice": {"type": "allowed_tools"}}, "tool_choice"),
        ({"tool_choice": "required"}, "tool_choice"),
        ({"max_output_tokens": 0}, "max_output_tokens"),
        ({"reasoning": {"effort": "extreme"}}, "reasoning.effort"),
    ],
)
def test_bad_or_unsupported_fields_are_400s_naming_them(body: dict[str, Any], param: str) -> None:
    engine = scripted()
    answer = _post(engine, **body)
    assert answer.status_code == 400, answer.text
    error = answer.json()["error"]
    assert error["param"] == param and error["type"] == "invalid_request_error"
    assert not engine.requests  # refused before the engine was asked


def test_fields_that_change_nothing_are_accepted() -> None:
    engine = scripted()
    answer = _post(
        engine,
        store=False,
        metadata={"k": "v"},
        user="u",
        truncation="disabled",
        service_tier="auto",
        include=["reasoning.encrypted_content"],
        reasoning={"summary": "auto"},
        text={"format": {"type": "text"}, "verbosity": "medium"},
        top_logprobs=0,
    )
    assert answer.status_code == 200 and answer.json()["metadata"] == {"k": "v"}


# ---- options --------------------------------------------------------------------------------


def test_sampling_limits_format_and_tools_reach_the_request() -> None:
    engine = scripted()
    schema = {"type": "object", "properties": {"a": {"type": "integer"}}, "required": ["a"]}
    _post(
        engine,
        temperature=0.2,
        top_p=0.5,
        seed=3,
        max_output_tokens=9,
        text={"format": {"type": "json_schema", "name": "a", "schema": schema, "strict": True}},
    )
    (request,) = engine.requests
    assert request.sampling.temperature == 0.2 and request.sampling.top_p == 0.5
    assert request.sampling.seed == 3 and request.max_tokens == 9
    assert request.grammar is not None  # the schema's grammar
    engine.requests.clear()
    _post(engine, tools=[WEATHER], tool_choice={"type": "function", "name": "get_weather"})
    (request,) = engine.requests
    assert request.grammar is not None and "get_weather" in request.grammar


@pytest.mark.parametrize(
    ("effort", "switch"),
    [
        (None, (None, None)),
        ("none", (False, None)),
        ("minimal", (False, None)),
        ("low", (True, 25)),
        ("medium", (True, 50)),
        ("high", (True, None)),
        ("xhigh", (True, None)),
    ],
)
def test_reasoning_effort_maps_to_the_switch_and_a_budget(
    effort: Any, switch: tuple[bool | None, int | None]
) -> None:
    assert reasoning_switch(effort, 100) == switch
    body = ResponsesBody.model_validate(
        {"input": "x", "max_output_tokens": 100, "reasoning": {"effort": effort}}
    )
    options = responses_options(body, context=1000, timeout=None)
    assert (options.reasoning, options.reasoning_budget) == switch


def test_effort_reaches_a_reasoning_template_and_the_context_bounds_its_budget() -> None:
    engine = scripted(info=replace(INFO, chat_template=QWQ))
    _post(engine, reasoning={"effort": "medium"})
    (request,) = engine.requests
    assert isinstance(request, ChatRequest) and request.reasoning is not None
    assert request.reasoning.enabled is True
    assert request.reasoning.budget == INFO.n_ctx_per_seq // 2  # no max_output_tokens


# ---- whole answers --------------------------------------------------------------------------


def test_a_whole_answer_has_reasoning_then_message_and_usage() -> None:
    engine = scripted(script=(("Think.", ""), ("", "Hello"), ("", "!")))
    body = _post(engine, instructions="Be nice.", temperature=0).json()
    response = Response.model_validate(body)
    assert response.status == "completed" and response.id.startswith("resp_")
    assert [item.type for item in response.output] == ["reasoning", "message"]
    assert body["output"][0]["content"] == [{"type": "reasoning_text", "text": "Think."}]
    assert response.output_text == "Hello!"
    assert response.usage is not None
    assert (response.usage.input_tokens, response.usage.output_tokens) == (7, 3)
    assert response.usage.output_tokens_details.reasoning_tokens == 1
    assert response.usage.total_tokens == 10
    assert response.instructions == "Be nice." and response.temperature == 0


def test_a_whole_call_and_a_cut_one() -> None:
    engine = scripted(script=CALL_SCRIPT)
    body = _post(engine, tools=[WEATHER], tool_choice="required").json()
    response = Response.model_validate(body)
    (call,) = response.output
    assert call.type == "function_call" and call.status == "completed"
    assert call.name == "get_weather" and json.loads(call.arguments) == {"city": "Oslo"}
    assert call.call_id and call.id and call.id != call.call_id
    assert response.tools[0].type == "function" and response.tool_choice == "required"
    cut = scripted(script=CALL_SCRIPT[:2], finish="length")
    body = _post(cut, tools=[WEATHER], tool_choice="required", max_output_tokens=2).json()
    response = Response.model_validate(body)
    assert response.status == "incomplete"
    assert response.incomplete_details is not None
    assert response.incomplete_details.reason == "max_output_tokens"
    (call,) = response.output
    assert call.type == "function_call" and call.status == "incomplete"
    assert call.arguments == '{"city": "Os'


def test_a_cut_text_answer_is_incomplete() -> None:
    body = _post(scripted(finish="length"), max_output_tokens=2).json()
    response = Response.model_validate(body)
    assert response.status == "incomplete" and response.completed_at is None
    assert response.output[0].status == "incomplete" and response.output_text == "Hello there"


# ---- streams --------------------------------------------------------------------------------


def test_a_stream_opens_fills_and_closes_each_item_in_order() -> None:
    engine = scripted(script=(("Think", ""), (" more.", ""), ("", "Hel"), ("", "lo")))
    events = _events(engine)
    assert [e["type"] for e in events] == [
        "response.created",
        "response.in_progress",
        "response.output_item.added",
        "response.content_part.added",
        "response.reasoning_text.delta",
        "response.reasoning_text.delta",
        "response.reasoning_text.done",
        "response.content_part.done",
        "response.output_item.done",
        "response.output_item.added",
        "response.content_part.added",
        "response.output_text.delta",
        "response.output_text.delta",
        "response.output_text.done",
        "response.content_part.done",
        "response.output_item.done",
        "response.completed",
    ]
    assert events[0]["response"]["status"] == "in_progress"
    assert events[0]["response"]["output"] == [] and events[0]["response"]["usage"] is None
    final = Response.model_validate(events[-1]["response"])
    assert final.output_text == "".join(
        e["delta"] for e in events if e["type"] == "response.output_text.delta"
    )
    thought = "".join(e["delta"] for e in events if e["type"] == "response.reasoning_text.delta")
    assert events[-1]["response"]["output"][0]["content"][0]["text"] == thought == "Think more."
    assert [e["item"] for e in events if e["type"] == "response.output_item.done"] == (
        events[-1]["response"]["output"]
    )
    assert final.usage is not None and final.usage.output_tokens == 4


def test_a_streamed_call_and_a_cut_one() -> None:
    events = _events(scripted(script=CALL_SCRIPT), tools=[WEATHER], tool_choice="auto")
    (added,) = [e for e in events if e["type"] == "response.output_item.added"]
    assert added["item"]["name"] == "get_weather" and added["item"]["arguments"] == ""
    deltas = [e["delta"] for e in events if e["type"] == "response.function_call_arguments.delta"]
    (done,) = [e for e in events if e["type"] == "response.function_call_arguments.done"]
    assert json.loads("".join(deltas)) == {"city": "Oslo"} == json.loads(done["arguments"])
    assert events[-1]["type"] == "response.completed"
    (call,) = events[-1]["response"]["output"]
    assert call["status"] == "completed" and call["call_id"] == added["item"]["call_id"]
    cut = _events(
        scripted(script=CALL_SCRIPT[:2], finish="length"),
        tools=[WEATHER],
        tool_choice="required",
    )
    assert cut[-1]["type"] == "response.incomplete"
    response = cut[-1]["response"]
    assert response["incomplete_details"] == {"reason": "max_output_tokens"}
    (call,) = response["output"]
    assert call["status"] == "incomplete" and call["arguments"] == '{"city": "Os'


def test_an_error_after_the_stream_began_is_an_error_event() -> None:
    events = _events(scripted(fail_at=1))
    assert events[-2]["type"] == "response.output_text.delta"
    error = events[-1]
    assert error["type"] == "error" and error["code"] == "engine_error"
    assert "failed" in error["message"]


def test_an_error_before_the_stream_began_is_a_status() -> None:
    answer = _post(scripted(fail_at=0), stream=True)
    assert answer.status_code == 500
    assert answer.json()["error"]["code"] == "engine_error"
