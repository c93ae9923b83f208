"""Anthropic's Messages API on the server, with the official ``anthropic`` SDK over SmolLM2-135M:
whole and streamed messages (the SDK's accumulated stream is the whole message), forced and
required tool use, a tool result sent back, thinking with a budget, max_tokens and stop
sequences as stop reasons, token counts, errors in Anthropic's shape, and the ``x-api-key``.

The SDK takes no sampling keywords of its own any more, so greedy decoding goes in
``extra_body`` (as LangChain's ChatAnthropic sends it)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anthropic
import httpx
import pytest

from llamacpp_integrations.engine import EngineConfig
from llamacpp_integrations.engine.engine import Engine
from tests.builders.reasoning_templates import QWQ
from tests.integration.serve_helpers import running_server

GREEDY = {"temperature": 0}
HI: list[Any] = [{"role": "user", "content": "Say hello."}]
WEATHER = {
    "name": "get_weather",
    "description": "The weather in a city.",
    "input_schema": {
        "type": "object",
        "properties": {"city": {"type": "string"}},
        "required": ["city"],
    },
}
TIME = {
    "name": "get_time",
    "description": "The time in a time zone.",
    "input_schema": {
        "type": "object",
        "properties": {"zone": {"type": "string"}},
        "required": ["zone"],
    },
}


@pytest.fixture(scope="module")
def base(engine: Engine) -> Iterator[str]:
    with running_server(engine) as url:
        yield url


@pytest.fixture(scope="module")
def client(base: str) -> anthropic.Anthropic:
    return anthropic.Anthropic(base_url=base, api_key="unused", max_retries=0)


def test_create_answers_a_message_with_usage(client: anthropic.Anthropic) -> None:
    message = client.messages.create(
        model="claude-any", max_tokens=16, messages=HI, system="Be brief.", extra_body=GREEDY
    )
    assert message.type == "message" and message.role == "assistant"
    assert message.id.startswith("msg_") and message.model == "SmolLM2-135M-Instruct.Q4_1"
    (block,) = message.content
    assert block.type == "text" and block.text
    assert message.stop_reason in ("end_turn", "max_tokens") and message.stop_sequence is None
    usage = message.usage
    assert usage.input_tokens + (usage.cache_read_input_tokens or 0) > 0
    assert 0 < usage.output_tokens <= 16


def test_the_stream_accumulates_into_the_whole_message(client: anthropic.Anthropic) -> None:
    # Greedy answers of the same prompt are the same whole and streamed: each of the session
    # engine's sequences has a KV stream of its own (see the ``engine`` fixture).
    whole = client.messages.create(model="m", max_tokens=16, messages=HI, extra_body=GREEDY)
    with client.messages.stream(model="m", max_tokens=16, messages=HI, extra_body=GREEDY) as stream:
        events = list(stream)
        streamed = stream.get_final_message()
    kinds = [event.type for event in events]
    assert kinds[0] == "message_start" and kinds[-1] == "message_stop"
    assert kinds[-2] == "message_delta" and kinds[-3] == "content_block_stop"
    text = "".join(e.delta.text for e in events if e.type == "content_block_delta")  # type: ignore[union-attr]
    assert streamed.content[0].text == text == whole.content[0].text  # type: ignore[union-attr]
    assert streamed.stop_reason == whole.stop_reason
    assert streamed.usage.output_tokens == whole.usage.output_tokens


def test_a_named_tool_is_used(client: anthropic.Anthropic) -> None:
    message = client.messages.create(
        model="m",
        max_tokens=48,
        messages=[{"role": "user", "content": "What time is it in Paris?"}],
        tools=[WEATHER, TIME],  # type: ignore[list-item]
        tool_choice={"type": "tool", "name": "get_weather"},
        extra_body=GREEDY,
    )
    (call,) = [block for block in message.content if block.type == "tool_use"]
    assert call.name == "get_weather" and isinstance(call.input["city"], str)
    assert message.stop_reason == "tool_use"


def test_any_tool_streamed_adds_up_to_a_call_offered(client: anthropic.Anthropic) -> None:
    with client.messages.stream(
        model="m",
        max_tokens=48,
        messages=[{"role": "user", "content": "Weather in Oslo?"}],
        tools=[WEATHER, TIME],  # type: ignore[list-item]
        tool_choice={"type": "any", "disable_parallel_tool_use": True},
        extra_body=GREEDY,
    ) as stream:
        events = list(stream)
        message = stream.get_final_message()
    (call,) = [block for block in message.content if block.type == "tool_use"]
    assert call.name in ("get_weather", "get_time") and call.input
    pieces = [e.delta.partial_json for e in events if e.type == "content_block_delta"]  # type: ignore[union-attr]
    assert json.loads("".join(pieces)) == call.input
    assert message.stop_reason == "tool_use"


def test_a_tool_result_goes_back_and_the_answer_is_text(client: anthropic.Anthropic) -> None:
    messages: list[Any] = [
        {"role": "user", "content": "Weather in Oslo?"},
        {
            "role": "assistant",
            "content": [
                {
                    "type": "tool_use",
                    "id": "toolu_1",
                    "name": "get_weather",
                    "input": {"city": "Oslo"},
                }
            ],
        },
        {
            "role": "user",
            "content": [
                {
                    "type": "tool_result",
                    "tool_use_id": "toolu_1",
                    "content": [{"type": "text", "text": "Sunny, 21 C"}],
                },
                {"type": "text", "text": "So, what is the weather?"},
            ],
        },
    ]
    message = client.messages.create(
        model="m",
        max_tokens=24,
        messages=messages,
        tools=[WEATHER],  # type: ignore[list-item]
        tool_choice={"type": "none"},
        extra_body=GREEDY,
    )
    assert [block.type for block in message.content] == ["text"]
    assert message.stop_reason in ("end_turn", "max_tokens")


def test_an_output_format_is_followed(client: anthropic.Anthropic) -> None:
    schema = {
        "type": "object",
        "properties": {"age": {"type": "integer"}, "adult": {"type": "boolean"}},
        "required": ["age", "adult"],
        "additionalProperties": False,
    }
    message = client.messages.create(
        model="m",
        max_tokens=24,
        messages=[{"role": "user", "content": "How old is a grown-up? Answer in JSON."}],
        output_config={"format": {"type": "json_schema", "schema": schema}},
        extra_body=GREEDY,
    )
    (block,) = message.content
    assert block.type == "text" and message.stop_reason == "end_turn"
    value = json.loads(block.text)
    assert set(value) == {"age", "adult"}
    assert isinstance(value["age"], int) and isinstance(value["adult"], bool)


def test_max_tokens_cuts_the_answer(client: anthropic.Anthropic) -> None:
    prompt = [{"role": "user", "content": "Write a long story about the sea."}]
    message = client.messages.create(model="m", max_tokens=3, messages=prompt, extra_body=GREEDY)  # type: ignore[arg-type]
    assert message.stop_reason == "max_tokens" and message.usage.output_tokens == 3


def test_a_stop_sequence_is_named(client: anthropic.Anthropic) -> None:
    # Any answer to a greeting has a space or a line break within its first tokens.
    stops = [" ", "\n"]
    message = client.messages.create(
        model="m", max_tokens=24, messages=HI, stop_sequences=stops, extra_body=GREEDY
    )
    assert message.stop_reason == "stop_sequence" and message.stop_sequence in stops
    text = "".join(block.text for block in message.content if block.type == "text")
    assert not any(stop in text for stop in stops)
    with client.messages.stream(
        model="m", max_tokens=24, messages=HI, stop_sequences=stops, extra_body=GREEDY
    ) as stream:
        streamed = stream.get_final_message()
    assert (streamed.stop_reason, streamed.stop_sequence) == (
        "stop_sequence",
        message.stop_sequence,
    )


def test_count_tokens_is_the_prompt_generation_reads(client: anthropic.Anthropic) -> None:
    question: list[Any] = [{"role": "user", "content": "What is the weather in Rome?"}]
    counted = client.messages.count_tokens(model="m", messages=question, system="Be brief.")
    message = client.messages.create(
        model="m", max_tokens=1, messages=question, system="Be brief.", extra_body=GREEDY
    )
    usage = message.usage
    assert counted.input_tokens == usage.input_tokens + (usage.cache_read_input_tokens or 0)
    with_tools = client.messages.count_tokens(
        model="m",
        messages=question,
        system="Be brief.",
        tools=[WEATHER],  # type: ignore[list-item]
    )
    assert with_tools.input_tokens > counted.input_tokens


def test_bad_requests_are_refused_in_anthropics_shape(
    base: str, client: anthropic.Anthropic
) -> None:
    missing = httpx.post(f"{base}/v1/messages", json={"model": "m", "messages": HI})
    assert missing.status_code == 400
    body = missing.json()
    assert body["type"] == "error" and body["error"]["type"] == "invalid_request_error"
    assert "max_tokens" in body["error"]["message"]
    with pytest.raises(anthropic.BadRequestError, match=r"output_config\.effort"):
        client.messages.create(
            model="m", max_tokens=4, messages=HI, output_config={"effort": "high"}
        )
    with pytest.raises(anthropic.BadRequestError, match="prefill"):
        client.messages.create(
            model="m", max_tokens=4, messages=[*HI, {"role": "assistant", "content": "Hel"}]
        )


def test_the_key_comes_as_x_api_key(engine: Engine) -> None:
    with running_server(engine, api_key="secret") as url:
        good = anthropic.Anthropic(base_url=url, api_key="secret", max_retries=0)
        assert good.messages.count_tokens(model="m", messages=HI).input_tokens > 0
        bad = anthropic.Anthropic(base_url=url, api_key="wrong", max_retries=0)
        with pytest.raises(anthropic.AuthenticationError) as refused:
            bad.messages.count_tokens(model="m", messages=HI)
        assert refused.value.body["error"]["type"] == "authentication_error"  # type: ignore[index]


# ---- thinking, on SmolLM2 behind a QwQ-style template (every answer opens its thinking) -------

BUDGET = 8


@pytest.fixture(scope="module")
def thinker(smollm_path: Path) -> Iterator[anthropic.Anthropic]:
    config = EngineConfig(
        model=str(smollm_path), n_seq_max=2, n_ctx_per_seq=1024, kv_unified=False, chat_template=QWQ
    )
    with Engine(config) as engine, running_server(engine) as url:
        yield anthropic.Anthropic(base_url=url, api_key="unused", max_retries=0)


def test_thinking_with_a_budget_comes_first_whole_and_streamed(
    thinker: anthropic.Anthropic,
) -> None:
    asked: dict[str, Any] = {
        "model": "m",
        "max_tokens": 24,
        "messages": [{"role": "user", "content": "Tell me about the sea."}],
        "thinking": {"type": "enabled", "budget_tokens": BUDGET},
        "extra_body": GREEDY,
    }
    whole = thinker.messages.create(**asked)
    thinking, *rest = whole.content
    assert thinking.type == "thinking" and thinking.thinking.strip() and thinking.signature
    assert all(block.type == "text" for block in rest)
    details = whole.usage.output_tokens_details
    assert details is not None and BUDGET <= details.thinking_tokens < whole.usage.output_tokens
    with thinker.messages.stream(**asked) as stream:
        kinds = [e.delta.type for e in stream if e.type == "content_block_delta"]  # type: ignore[union-attr]
        streamed = stream.get_final_message()
    assert (
        kinds[0] == "thinking_delta"
        and "thinking_delta" not in kinds[kinds.index("signature_delta") :]
    )
    # Greedy, each sequence in a KV stream of its own: the same answer both ways.
    assert _blocks(streamed) == _blocks(whole)
    assert streamed.usage.output_tokens_details == details


def _blocks(message: anthropic.types.Message) -> list[tuple[str, str]]:
    return [
        (block.type, block.thinking if block.type == "thinking" else getattr(block, "text", ""))
        for block in message.content
    ]
