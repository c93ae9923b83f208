"""The Responses API (``POST /v1/responses``) on the real model, with the official ``openai``
client and LangChain's ``ChatOpenAI(use_responses_api=True)``: answers with usage, streams whose
events come in order and add up to the final response, forced and required function calls, a
function result given back, JSON valid for a schema, a cut answer, a refused tool, and a
reasoning template's thinking as a ``reasoning`` item."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import openai
import pytest
from langchain_core.tools import tool
from langchain_openai import ChatOpenAI
from pydantic import BaseModel, Field

from llamacpp_integrations.engine import EngineConfig
from llamacpp_integrations.engine.engine import Engine
from tests.builders.reasoning_templates import QWQ
from tests.integration.serve_helpers import running_server

WEATHER = {
    "type": "function",
    "name": "get_weather",
    "description": "The weather in a city.",
    "parameters": {
        "type": "object",
        "properties": {"city": {"type": "string", "maxLength": 12}},
        "required": ["city"],
        "additionalProperties": False,
    },
    "strict": True,
}
TIME = {
    "type": "function",
    "name": "get_time",
    "description": "The time in a time zone.",
    "parameters": {
        "type": "object",
        "properties": {"zone": {"type": "string", "maxLength": 12}},
        "required": ["zone"],
        "additionalProperties": False,
    },
    "strict": True,
}
PERSON = {
    "type": "object",
    "properties": {
        "name": {"type": "string", "maxLength": 12},
        "age": {"type": "integer", "minimum": 0, "maximum": 120},
    },
    "required": ["name", "age"],
    "additionalProperties": False,
}


class Person(BaseModel):
    """A person."""

    name: str = Field(max_length=12)
    age: int = Field(ge=0, le=120)


def get_time(zone: str) -> str:
    """The time in a time zone."""
    return f"Noon in {zone}"


def get_weather(city: str) -> str:
    """The weather in a city."""
    return f"Sunny in {city}"


@pytest.fixture(scope="module")
def base(engine: Engine) -> Iterator[str]:
    with running_server(engine) as url:
        yield f"{url}/v1"


@pytest.fixture(scope="module")
def client(base: str) -> openai.OpenAI:
    return openai.OpenAI(base_url=base, api_key="unused", max_retries=0)


def test_an_answer_with_usage(client: openai.OpenAI) -> None:
    response = client.responses.create(
        model="m", input="Say hello.", max_output_tokens=12, temperature=0
    )
    assert response.object == "response" and response.id.startswith("resp_")
    assert response.status in ("completed", "incomplete")
    assert response.output_text and response.output[-1].type == "message"
    usage = response.usage
    assert usage is not None and 0 < usage.output_tokens <= 12 and usage.input_tokens > 0
    assert usage.total_tokens == usage.input_tokens + usage.output_tokens


def test_a_stream_adds_up_to_its_final_response(client: openai.OpenAI) -> None:
    with client.responses.stream(
        model="m", input="Say hello.", instructions="Be brief.", max_output_tokens=16
    ) as stream:
        events = list(stream)
    last = events[-1]
    # The SDK's get_final_response() takes response.completed only; a cut answer ends with
    # response.incomplete, carrying the response as well.
    assert last.type in ("response.completed", "response.incomplete")
    final = last.response
    kinds = [event.type for event in events]
    assert kinds[:2] == ["response.created", "response.in_progress"]
    assert [event.sequence_number for event in events] == list(range(len(events)))
    text = "".join(e.delta for e in events if e.type == "response.output_text.delta")
    assert text and text == final.output_text
    added = kinds.index("response.output_item.added")
    done = kinds.index("response.output_item.done")
    assert added < kinds.index("response.output_text.delta") < done
    assert final.usage is not None and final.usage.output_tokens > 0


def test_a_named_function_is_called_with_schema_valid_arguments(client: openai.OpenAI) -> None:
    response = client.responses.create(
        model="m",
        input="What time is it in Paris?",
        tools=[WEATHER, TIME],  # type: ignore[list-item]
        tool_choice={"type": "function", "name": "get_weather"},
        max_output_tokens=40,  # the call's markup counts too
        temperature=0,
    )
    (call,) = response.output
    assert call.type == "function_call" and call.name == "get_weather"
    assert call.status == "completed" and call.call_id
    arguments = json.loads(call.arguments)
    assert set(arguments) == {"city"} and isinstance(arguments["city"], str)


def test_required_calls_an_offered_function_streamed(client: openai.OpenAI) -> None:
    with client.responses.stream(
        model="m",
        input="Weather in Oslo?",
        tools=[WEATHER, TIME],  # type: ignore[list-item]
        tool_choice="required",
        parallel_tool_calls=False,
        max_output_tokens=40,
        temperature=0,
    ) as stream:
        events = list(stream)
        final = stream.get_final_response()
    calls = [item for item in final.output if item.type == "function_call"]
    assert len(calls) == 1 and calls[0].name in ("get_weather", "get_time")
    deltas = "".join(e.delta for e in events if e.type == "response.function_call_arguments.delta")
    assert json.loads(deltas) == json.loads(calls[0].arguments)
    assert calls[0].parsed_arguments is not None  # strict tools are parsed by the SDK


def test_a_function_result_is_answered(client: openai.OpenAI) -> None:
    history = [
        {"role": "user", "content": "Weather in Oslo?"},
        {
            "type": "function_call",
            "call_id": "call_1",
            "name": "get_weather",
            "arguments": '{"city": "Oslo"}',
        },
        {"type": "function_call_output", "call_id": "call_1", "output": "Sunny, 20 C"},
    ]
    response = client.responses.create(
        model="m",
        input=history,  # type: ignore[arg-type]
        tools=[WEATHER],  # type: ignore[list-item]
        tool_choice="none",
        max_output_tokens=16,
    )
    assert response.output_text
    assert not [item for item in response.output if item.type == "function_call"]
    alone = client.responses.create(model="m", input="Weather in Oslo?", max_output_tokens=1)
    assert response.usage is not None and alone.usage is not None
    assert response.usage.input_tokens > alone.usage.input_tokens  # the call and result count


def test_a_json_schema_answer_conforms(client: openai.OpenAI) -> None:
    response = client.responses.create(
        model="m",
        input="Invent a person.",
        text={
            "format": {"type": "json_schema", "name": "person", "schema": PERSON, "strict": True}
        },
        # Greedy, with room to spare (20 tokens here): a sampled path of the tiny model can run
        # past a small budget inside the document; what is tested is conformance.
        max_output_tokens=60,
        temperature=0,
    )
    assert response.status == "completed", response.incomplete_details
    Person.model_validate(json.loads(response.output_text))
    assert response.text is not None and response.text.format is not None
    assert response.text.format.type == "json_schema"


def test_functions_with_a_json_format_call_or_answer_in_the_schema(client: openai.OpenAI) -> None:
    """What the Agents SDK sends for an agent with an output type: an answer is calls, or a
    document following the format."""
    response = client.responses.create(
        model="m",
        input="Invent a person.",
        tools=[WEATHER],  # type: ignore[list-item]
        text={
            "format": {"type": "json_schema", "name": "person", "schema": PERSON, "strict": True}
        },
        max_output_tokens=60,
        temperature=0,
    )
    assert response.status == "completed", response.incomplete_details
    calls = [item for item in response.output if item.type == "function_call"]
    if calls:
        assert all(call.name == "get_weather" for call in calls)
        assert not response.output_text
    else:
        Person.model_validate(json.loads(response.output_text))


def test_a_cut_answer_is_incomplete(client: openai.OpenAI) -> None:
    response = client.responses.create(
        model="m", input="Write a long story about a dragon.", max_output_tokens=2, temperature=0
    )
    assert response.status == "incomplete"
    assert response.incomplete_details is not None
    assert response.incomplete_details.reason == "max_output_tokens"
    assert response.usage is not None and response.usage.output_tokens == 2
    assert response.output[-1].status == "incomplete"


def test_a_hosted_tool_is_refused_naming_it(client: openai.OpenAI) -> None:
    with pytest.raises(openai.BadRequestError) as refused:
        client.responses.create(
            model="m",
            input="Search the web.",
            tools=[WEATHER, {"type": "web_search"}],  # type: ignore[list-item]
        )
    body = refused.value.body
    assert isinstance(body, dict) and body["param"] == "tools[1].type"
    assert "web_search" in body["message"]


# ---- a reasoning template -------------------------------------------------------------------


@pytest.fixture(scope="module")
def thinker(smollm_path: Path) -> Iterator[openai.OpenAI]:
    """SmolLM2 behind a QwQ-style template, whose answers start inside their thinking."""
    config = EngineConfig(
        model=str(smollm_path), chat_template=QWQ, n_seq_max=2, n_ctx_per_seq=1024
    )
    with Engine(config) as engine, running_server(engine) as url:
        yield openai.OpenAI(base_url=f"{url}/v1", api_key="unused", max_retries=0)


def test_thinking_comes_back_as_a_reasoning_item(thinker: openai.OpenAI) -> None:
    # low effort: a budget of a quarter of the 24 tokens, then the engine ends the thinking.
    response = thinker.responses.create(
        model="m",
        input="Tell me about the sea.",
        reasoning={"effort": "low"},
        max_output_tokens=24,
        temperature=0,
    )
    first = response.output[0]
    assert first.type == "reasoning" and first.content and first.content[0].text.strip()
    assert "<think>" not in response.output_text and "</think>" not in response.output_text
    usage = response.usage
    assert usage is not None and usage.output_tokens_details.reasoning_tokens > 0
    assert usage.output_tokens_details.reasoning_tokens < usage.output_tokens
    with thinker.responses.stream(
        model="m", input="Tell me about the sea.", reasoning={"effort": "low"}, max_output_tokens=24
    ) as stream:
        kinds = [event.type for event in stream]
    thinking = kinds.index("response.reasoning_text.delta")
    assert "response.output_text.delta" not in kinds[:thinking]


# ---- LangChain ------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def chat(base: str) -> ChatOpenAI:
    return ChatOpenAI(
        base_url=base,
        api_key="unused",  # type: ignore[arg-type]
        model="smollm",
        temperature=0,
        max_tokens=24,  # type: ignore[call-arg]
        max_retries=0,
        use_responses_api=True,
    )


def test_langchain_invoke_and_stream_agree(chat: ChatOpenAI) -> None:
    # Greedy, and every sequence has a KV stream of its own (see the engine fixture).
    whole = chat.invoke("Say hello.")
    assert whole.text and whole.response_metadata["id"].startswith("resp_")
    assert whole.usage_metadata is not None and whole.usage_metadata["output_tokens"] > 0
    chunks = list(chat.stream("Say hello."))
    assert "".join(chunk.text for chunk in chunks) == whole.text
    assert any(chunk.usage_metadata for chunk in chunks)


def test_langchain_named_tool_choice(chat: ChatOpenAI) -> None:
    bound = chat.bind_tools([tool(get_weather), tool(get_time)], tool_choice="get_time")
    (call,) = bound.invoke("What is the weather in Rome?").tool_calls
    assert call["name"] == "get_time" and isinstance(call["args"]["zone"], str)


def test_langchain_structured_output(chat: ChatOpenAI) -> None:
    structured = chat.bind(max_tokens=40).with_structured_output(Person, method="json_schema")
    assert isinstance(structured.invoke("Invent a person."), Person)
