"""Anthropic's Messages API over a scripted engine: messages and fields to the engine's shape and
call options, refusals naming their field, whole bodies and streams checked against the
``anthropic`` SDK's own types (a stream accumulated by the SDK's own accumulator equals the
whole answer), stop sequences, token counts, and errors in Anthropic's shape."""

from __future__ import annotations

import json
from dataclasses import replace
from typing import Any

import pytest
from anthropic.lib.streaming._messages import accumulate_event  # the SDK's accumulator
from anthropic.types import Message, RawMessageStreamEvent
from pydantic import TypeAdapter
from starlette.testclient import TestClient

from llamacpp_integrations.errors import ImageInputNotSupportedError
from llamacpp_integrations.server import ApiError, create_app
from llamacpp_integrations.server.anthropic.messages import anthropic_messages_reader
from llamacpp_integrations.server.anthropic.options import count_options, message_options
from llamacpp_integrations.server.anthropic.schemas import (
    AnthropicMessage,
    CountTokensBody,
    MessagesBody,
)
from llamacpp_integrations.testing import ScriptedEngine
from tests.builders.reasoning_templates import QWQ
from tests.unit.tiny_model import INFO

EVENT: TypeAdapter[Any] = TypeAdapter(RawMessageStreamEvent)

WEATHER = {
    "name": "get_weather",
    "description": "The weather in a city.",
    "input_schema": {
        "type": "object",
        "properties": {"city": {"type": "string"}},
        "required": ["city"],
    },
}
# The tool-call syntax the CHATML test template falls back to (it has no tools of its own).
CALL_SCRIPT = (
    ("", '<tool_call>[{"name": "get_weather", '),
    ("", '"arguments": {"city": "Os'),
    ("", 'lo"}}]</tool_call>'),
)
HI = [{"role": "user", "content": "Hi"}]


def scripted(**fields: Any) -> ScriptedEngine:
    """The public ``ScriptedEngine``, with this module's model, and two cached prompt tokens."""
    return ScriptedEngine(**{"info": INFO, "cached_prompt_tokens": 2, **fields})


def _post(engine: ScriptedEngine, path: str = "/v1/messages", **body: Any) -> Any:
    fields = {"model": "m", "max_tokens": 16, "messages": HI, **body}
    with TestClient(create_app(engine)) as client:  # type: ignore[arg-type]
        return client.post(path, json=fields)


def _whole(engine: ScriptedEngine, **body: Any) -> dict[str, Any]:
    answer = _post(engine, **body)
    assert answer.status_code == 200, answer.text
    Message.model_validate(answer.json())
    result: dict[str, Any] = answer.json()
    return result


def _events(engine: ScriptedEngine, **body: Any) -> list[dict[str, Any]]:
    """The stream's events, each checked against the SDK's types (``event:`` names its type)."""
    answer = _post(engine, stream=True, **body)
    assert answer.status_code == 200, answer.text
    assert "[DONE]" not in answer.text
    events = []
    for block in answer.text.strip().split("\n\n"):
        name, data = block.split("\n")
        event = json.loads(data.removeprefix("data: "))
        assert name == f"event: {event['type']}"
        if event["type"] not in ("ping", "error"):
            EVENT.validate_python(event)
        events.append(event)
    return events


def _accumulated(events: list[dict[str, Any]]) -> dict[str, Any]:
    """The message the SDK's ``messages.stream()`` builds from ``events``."""
    snapshot = None
    buffers: dict[int, bytes] = {}
    for event in events:
        if event["type"] != "ping":
            parsed = EVENT.validate_python(event)
            snapshot = accumulate_event(event=parsed, current_snapshot=snapshot, json_bufs=buffers)
    assert snapshot is not None
    dumped: dict[str, Any] = Message.model_validate(snapshot.model_dump()).model_dump()
    return dumped


def _same_message(whole: dict[str, Any], events: list[dict[str, Any]]) -> None:
    streamed = _accumulated(events)
    expected = Message.model_validate(whole).model_dump()
    for message in (streamed, expected):  # each answer has ids of its own
        message.pop("id")
        for block in message["content"]:
            block.pop("id", None)
    assert streamed == expected


# ---- messages -------------------------------------------------------------------------------


def test_messages_become_the_templates_shape() -> None:
    messages = [
        AnthropicMessage(
            role="user",
            content=[
                {"type": "text", "text": "Weather ", "cache_control": {"type": "ephemeral"}},
                {
                    "type": "image",
                    "source": {"type": "base64", "media_type": "image/png", "data": "AA"},
                },
                {"type": "text", "text": "in Oslo?"},
            ],
        ),
        AnthropicMessage(
            role="assistant",
            content=[
                {"type": "thinking", "thinking": "Look it up.", "signature": "anything"},
                {"type": "redacted_thinking", "data": "c2VjcmV0"},
                {"type": "text", "text": "Checking."},
                {"type": "tool_use", "id": "t1", "name": "get_weather", "input": {"city": "Oslo"}},
            ],
        ),
        AnthropicMessage(
            role="user",
            content=[
                {
                    "type": "tool_result",
                    "tool_use_id": "t1",
                    "content": [{"type": "text", "text": "Sun"}],
                },
                {"type": "tool_result", "tool_use_id": "t2", "content": "down", "is_error": True},
                {"type": "text", "text": "Thanks."},
            ],
        ),
    ]
    system = [{"type": "text", "text": "You help."}, {"type": "text", "text": "Be brief."}]
    seen: list[str] = []
    out = anthropic_messages_reader(system, messages)(lambda source: seen.append(source))  # type: ignore[arg-type,func-returns-value]
    assert seen == ["data:image/png;base64,AA"]
    assert out[0] == {"role": "system", "content": "You help.\n\nBe brief."}
    assert out[1]["content"] == [
        {"type": "text", "text": "Weather "},
        {"type": "image", "image": None},
        {"type": "text", "text": "in Oslo?"},
    ]
    assert out[2] == {
        "role": "assistant",
        "content": "Checking.",
        "reasoning_content": "Look it up.",
        "tool_calls": [
            {
                "type": "function",
                "function": {"name": "get_weather", "arguments": {"city": "Oslo"}},
                "id": "t1",
            }
        ],
    }
    assert out[3] == {"role": "tool", "tool_call_id": "t1", "content": "Sun", "name": "get_weather"}
    assert out[4] == {"role": "tool", "tool_call_id": "t2", "content": "Error: down"}
    assert out[5] == {"role": "user", "content": "Thanks."}
    with pytest.raises(ImageInputNotSupportedError):
        anthropic_messages_reader(None, messages)(None)


@pytest.mark.parametrize(
    ("content", "param"),
    [
        ([{"type": "document", "source": {}}], "messages[0].content[0]"),
        (
            [{"type": "image", "source": {"type": "file", "file_id": "f"}}],
            "messages[0].content[0].source",
        ),
        ([{"type": "tool_result", "content": "x"}], "messages[0].content[0]"),
        ([{"type": "text"}], "messages[0].content[0].text"),
        ([{"type": "tool_use", "id": "t", "name": "f"}], "messages[0].content[0]"),  # a user's
    ],
)
def test_blocks_that_cannot_be_read_are_refused_by_path(
    content: list[dict[str, Any]], param: str
) -> None:
    reader = anthropic_messages_reader(None, [AnthropicMessage(role="user", content=content)])
    with pytest.raises(ApiError) as refused:
        reader(lambda source: None)  # type: ignore[arg-type,return-value]
    assert refused.value.status == 400 and refused.value.param == param


@pytest.mark.parametrize(
    ("content", "param"),
    [
        (
            [{"type": "text", "text": "x"}, {"type": "tool_use", "id": "t"}],
            "messages[0].content[1].name",
        ),
        ([{"type": "tool_use", "name": "f", "input": [1]}], "messages[0].content[0].input"),
        ([{"type": "server_tool_use", "id": "s", "name": "web_search"}], "messages[0].content[0]"),
        ([{"type": "image", "source": {"type": "base64", "data": "AA"}}], "messages[0].content[0]"),
    ],
)
def test_assistant_blocks_that_cannot_be_read_are_refused_by_path(
    content: list[dict[str, Any]], param: str
) -> None:
    turns = [
        AnthropicMessage(role="assistant", content=content),
        AnthropicMessage(role="user", content="?"),
    ]
    reader = anthropic_messages_reader(None, turns)
    with pytest.raises(ApiError) as refused:
        reader(lambda source: None)  # type: ignore[arg-type,return-value]
    assert refused.value.status == 400 and refused.value.param == param


def test_a_conversation_ending_with_the_assistant_is_refused() -> None:
    turns = [
        AnthropicMessage(role="user", content="Hi"),
        AnthropicMessage(role="assistant", content="I"),
    ]
    with pytest.raises(ApiError, match="prefill") as refused:
        anthropic_messages_reader(None, turns)
    assert refused.value.param == "messages[1]"


# ---- options --------------------------------------------------------------------------------


def _body(**fields: Any) -> MessagesBody:
    return MessagesBody.model_validate({"model": "m", "max_tokens": 9, "messages": HI, **fields})


def test_fields_become_call_options() -> None:
    options = message_options(
        _body(
            temperature=0,
            top_p=0.5,
            top_k=3,
            stop_sequences=["END"],
            tools=[WEATHER],
            tool_choice={"type": "any", "disable_parallel_tool_use": True},
            thinking={"type": "enabled", "budget_tokens": 12},
            metadata={"user_id": "u"},
            service_tier="auto",
        ),
        timeout=5.0,
    )
    assert (options.max_tokens, options.timeout, options.stop) == (9, 5.0, ("END",))
    assert (options.sampling.temperature, options.sampling.top_p, options.sampling.top_k) == (
        0,
        0.5,
        3,
    )
    assert options.logprobs is None  # the engine names the stop string that ended it
    assert (
        options.tools is not None
        and options.tools[0]["function"]["parameters"] == WEATHER["input_schema"]
    )
    assert options.tool_choice == "required" and not options.parallel_tool_calls
    assert options.reasoning is True and options.reasoning_budget == 12
    named = message_options(
        _body(tools=[WEATHER], tool_choice={"type": "tool", "name": "get_weather"}), timeout=None
    )
    assert named.tool_choice == {"name": "get_weather"} and named.logprobs is None
    assert message_options(_body(thinking={"type": "disabled"}), timeout=None).reasoning is False
    assert message_options(_body(thinking={"type": "adaptive"}), timeout=None).reasoning is None
    schema = {"type": "object", "properties": {"a": {"type": "integer"}}}
    formatted = count_options(
        CountTokensBody.model_validate(
            {"messages": HI, "output_config": {"format": {"type": "json_schema", "schema": schema}}}
        )
    )
    assert formatted.response_format is not None and formatted.response_format.schema == schema


@pytest.mark.parametrize(
    ("fields", "param"),
    [
        ({"mcp_servers": [{"type": "url", "url": "http://x", "name": "x"}]}, "mcp_servers"),
        (
            {"context_management": {"edits": [{"type": "clear_tool_uses_20250919"}]}},
            "context_management",
        ),
        ({"output_config": {"effort": "high"}}, "output_config.effort"),
        ({"tools": [{"type": "web_search_20250305", "name": "web_search"}]}, "tools[0].type"),
        ({"tool_choice": {"type": "any"}}, "tool_choice"),
        ({"tools": [WEATHER], "tool_choice": {"type": "tool"}}, "tool_choice.name"),
        ({"output_config": {"format": {"type": "xml"}}}, "output_config.format"),
    ],
)
def test_fields_that_cannot_be_honoured_are_refused_by_name(
    fields: dict[str, Any], param: str
) -> None:
    with pytest.raises(ApiError) as refused:
        message_options(_body(**fields), timeout=None)
    assert refused.value.status == 400 and refused.value.param == param


# ---- answers --------------------------------------------------------------------------------


def test_a_whole_answer_and_its_stream_agree() -> None:
    engine = scripted()
    whole = _whole(engine)
    assert whole["content"] == [{"type": "text", "text": "Hello there"}]
    assert (whole["stop_reason"], whole["stop_sequence"]) == ("end_turn", None)
    assert whole["usage"] == {
        "input_tokens": 5,
        "cache_creation_input_tokens": 0,
        "cache_read_input_tokens": 2,
        "output_tokens": 2,
    }
    assert whole["id"].startswith("msg_") and whole["model"] == "tiny-Q8_0"
    events = _events(engine)
    kinds = [e["type"] for e in events]
    assert kinds == [
        "message_start",
        "ping",
        "content_block_start",
        "content_block_delta",
        "content_block_delta",
        "content_block_stop",
        "message_delta",
        "message_stop",
    ]
    prompt = engine.render_chat(engine.requests[-1])  # type: ignore[arg-type]
    assert events[0]["message"]["usage"]["input_tokens"] == len(prompt)  # counted up front
    _same_message(whole, events)


def test_thinking_comes_first_signed_and_can_be_omitted() -> None:
    engine = scripted(
        info=replace(INFO, chat_template=QWQ), script=(("Hmm", ""), (" ok", ""), ("", "Hi"))
    )
    whole = _whole(engine, thinking={"type": "enabled", "budget_tokens": 4})
    assert whole["content"][0] == {
        "type": "thinking",
        "thinking": "Hmm ok",
        "signature": "llamacpp-integrations:unsigned",
    }
    assert whole["content"][1] == {"type": "text", "text": "Hi"}
    assert whole["usage"]["output_tokens_details"] == {"thinking_tokens": 2}
    events = _events(engine, thinking={"type": "enabled", "budget_tokens": 4})
    deltas = [e["delta"]["type"] for e in events if e["type"] == "content_block_delta"]
    assert deltas == ["thinking_delta", "thinking_delta", "signature_delta", "text_delta"]
    _same_message(whole, events)
    hidden = {"type": "enabled", "budget_tokens": 4, "display": "omitted"}
    assert _whole(engine, thinking=hidden)["content"][0]["thinking"] == ""
    omitted = _events(engine, thinking=hidden)
    assert "thinking_delta" not in json.dumps(omitted)
    assert _accumulated(omitted)["content"][0]["signature"] == "llamacpp-integrations:unsigned"


def test_tool_calls_whole_and_streamed() -> None:
    engine = scripted(script=CALL_SCRIPT)
    whole = _whole(engine, tools=[WEATHER], tool_choice={"type": "any"})
    (call,) = whole["content"]
    assert call["type"] == "tool_use" and call["name"] == "get_weather"
    assert call["input"] == {"city": "Oslo"} and whole["stop_reason"] == "tool_use"
    events = _events(engine, tools=[WEATHER], tool_choice={"type": "any"})
    starts = [e["content_block"] for e in events if e["type"] == "content_block_start"]
    assert [s["type"] for s in starts] == ["tool_use"] and starts[0]["input"] == {}
    _same_message(whole, events)


def test_a_call_cut_by_max_tokens_keeps_what_it_wrote() -> None:
    engine = scripted(script=CALL_SCRIPT[:2], finish="length")
    whole = _whole(engine, tools=[WEATHER], tool_choice={"type": "tool", "name": "get_weather"})
    (call,) = whole["content"]
    assert call["name"] == "get_weather" and call["input"] == {"city": "Os"}
    assert whole["stop_reason"] == "max_tokens"
    events = _events(engine, tools=[WEATHER], tool_choice={"type": "tool", "name": "get_weather"})
    assert events[-2]["delta"]["stop_reason"] == "max_tokens"


def test_the_stop_sequence_that_ended_the_answer_is_named() -> None:
    engine = scripted(stop_string="END")
    body = {"stop_sequences": ["STOP", "END"]}
    whole = _whole(engine, **body)
    assert (whole["stop_reason"], whole["stop_sequence"]) == ("stop_sequence", "END")
    assert _events(engine, **body)[-2]["delta"] == {
        "stop_reason": "stop_sequence",
        "stop_sequence": "END",
    }
    plain = _whole(scripted(), **body)  # an end of generation: no stop string
    assert (plain["stop_reason"], plain["stop_sequence"]) == ("end_turn", None)


def test_count_tokens_counts_the_prompt_with_its_tools() -> None:
    engine = scripted()
    plain = _post(engine, "/v1/messages/count_tokens", max_tokens=None, system="Be brief.")
    assert plain.status_code == 200
    with_tools = _post(engine, "/v1/messages/count_tokens", tools=[WEATHER]).json()
    assert set(plain.json()) == {"input_tokens"}
    assert with_tools["input_tokens"] > plain.json()["input_tokens"] > 0
    assert engine.requests == []  # nothing was generated


# ---- errors ---------------------------------------------------------------------------------


def _error(answer: Any, status: int, kind: str) -> str:
    assert answer.status_code == status
    body = answer.json()
    assert body["type"] == "error" and body["error"]["type"] == kind
    message: str = body["error"]["message"]
    return message


def test_bad_bodies_are_answered_in_anthropics_shape_naming_the_field() -> None:
    engine = scripted()
    assert "max_tokens" in _error(_post(engine, max_tokens=None), 400, "invalid_request_error")
    assert "messages" in _error(_post(engine, messages=[]), 400, "invalid_request_error")
    role = _post(engine, messages=[{"role": "system", "content": "x"}])
    assert "messages.0.role" in _error(role, 400, "invalid_request_error")
    assert "mcp_servers" in _error(
        _post(engine, mcp_servers=[{"name": "x"}]), 400, "invalid_request_error"
    )
    with TestClient(create_app(engine)) as client:  # type: ignore[arg-type]
        broken = client.post(
            "/v1/messages", content=b"{", headers={"content-type": "application/json"}
        )
    _error(broken, 400, "invalid_request_error")


def test_an_error_mid_stream_is_an_error_event() -> None:
    events = _events(scripted(fail_at=1))
    assert events[-1] == {
        "type": "error",
        "error": {"type": "api_error", "message": "the model failed"},
    }
    assert "message_stop" not in [e["type"] for e in events]


def test_the_key_is_read_from_x_api_key_and_refusals_take_the_apis_shape() -> None:
    with TestClient(create_app(scripted(), api_key="k", max_body_bytes=400)) as client:  # type: ignore[arg-type]
        body = {"model": "m", "max_tokens": 4, "messages": HI}
        ok = client.post("/v1/messages", json=body, headers={"x-api-key": "k"})
        assert ok.status_code == 200
        _error(client.post("/v1/messages", json=body), 401, "authentication_error")
        bad = client.post("/v1/messages/count_tokens", json=body, headers={"x-api-key": "no"})
        _error(bad, 401, "authentication_error")
        big = {**body, "system": "x" * 500}
        _error(
            client.post("/v1/messages", json=big, headers={"x-api-key": "k"}),
            413,
            "request_too_large",
        )
        openai = client.get("/v1/models")  # the OpenAI endpoints keep OpenAI's shape
        assert openai.status_code == 401 and openai.json()["error"]["code"] == "invalid_api_key"
