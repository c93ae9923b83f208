"""The server with the official ``openai`` client and raw HTTP: every endpoint, the error
shapes and statuses, the API key, the body limit, client disconnects and a full queue."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from pathlib import Path

import httpx
import openai
import pytest

from llamacpp_integrations.engine import EngineConfig
from llamacpp_integrations.engine.engine import Engine
from tests.integration.helpers import wait_for
from tests.integration.serve_helpers import WEATHER, running_server

TIME = {
    "type": "function",
    "function": {
        "name": "get_time",
        "description": "The time in a time zone.",
        "parameters": {
            "type": "object",
            "properties": {"zone": {"type": "string"}},
            "required": ["zone"],
        },
    },
}
# Bounded, so that every document the grammar allows fits in the answer's token limit: the
# request is sampled, and an unbounded string may otherwise run past it.
PERSON = {
    "type": "object",
    "properties": {
        "name": {"type": "string", "maxLength": 24},
        "age": {"type": "integer", "minimum": 0, "maximum": 150},
    },
    "required": ["name", "age"],
    "additionalProperties": False,
}
HI = [{"role": "user", "content": "Say hello."}]


@pytest.fixture(scope="module")
def base(engine: Engine) -> Iterator[str]:
    with running_server(engine, api_key=None, max_body_bytes=64 * 1024) as url:
        yield url


@pytest.fixture(scope="module")
def client(base: str) -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{base}/v1", api_key="unused", max_retries=0)


def _no_eos(engine: Engine) -> dict[str, int]:
    """A logit bias banning the end of the answer, so it runs to max_tokens."""
    (eos,) = engine.tokenize("<|im_end|>", parse_special=True)
    return {str(eos): -100}


def test_chat_answers_with_usage(client: openai.OpenAI) -> None:
    answer = client.chat.completions.create(
        model="any", messages=HI, max_tokens=12, temperature=0, seed=1
    )
    choice = answer.choices[0]
    assert answer.object == "chat.completion"
    assert choice.message.role == "assistant" and choice.message.content
    assert choice.finish_reason in ("stop", "length")
    assert answer.usage is not None and 0 < answer.usage.completion_tokens <= 12
    assert answer.usage.total_tokens == answer.usage.prompt_tokens + answer.usage.completion_tokens


def test_stream_matches_the_whole_answer(client: openai.OpenAI) -> None:
    whole = client.chat.completions.create(model="m", messages=HI, max_tokens=16, temperature=0)
    chunks = list(
        client.chat.completions.create(
            model="m",
            messages=HI,
            max_tokens=16,
            temperature=0,
            stream=True,
            stream_options={"include_usage": True},
        )
    )
    assert chunks[0].choices[0].delta.role == "assistant"
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text == whole.choices[0].message.content
    finishes = [c.choices[0].finish_reason for c in chunks if c.choices]
    assert finishes[-1] == whole.choices[0].finish_reason and not any(finishes[:-1])
    assert not chunks[-1].choices and chunks[-1].usage == whole.usage  # usage comes last


def test_named_tool_choice_is_enforced(client: openai.OpenAI) -> None:
    answer = client.chat.completions.create(
        model="m",
        messages=[{"role": "user", "content": "What time is it in Paris?"}],
        tools=[WEATHER, TIME],
        tool_choice={"type": "function", "function": {"name": "get_weather"}},
        max_tokens=64,
    )
    (call,) = answer.choices[0].message.tool_calls or []
    assert call.function.name == "get_weather"
    assert isinstance(json.loads(call.function.arguments)["city"], str)
    assert answer.choices[0].finish_reason == "tool_calls"


def test_streamed_tool_call_deltas_add_up(client: openai.OpenAI) -> None:
    chunks = list(
        client.chat.completions.create(
            model="m",
            messages=[{"role": "user", "content": "Weather in Oslo?"}],
            tools=[WEATHER],
            tool_choice="required",
            parallel_tool_calls=False,
            max_tokens=64,
            stream=True,
        )
    )
    deltas = [d for c in chunks for d in (c.choices[0].delta.tool_calls or [])]
    assert deltas[0].id and deltas[0].function and deltas[0].function.name == "get_weather"
    arguments = "".join(d.function.arguments or "" for d in deltas if d.function)
    assert set(json.loads(arguments)) == {"city"}
    assert chunks[-1].choices[0].finish_reason == "tool_calls"


def test_a_tool_result_is_answered(client: openai.OpenAI) -> None:
    answer = client.chat.completions.create(
        model="m",
        messages=[
            {"role": "user", "content": "Weather in Oslo?"},
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {
                        "id": "call_1",
                        "type": "function",
                        "function": {"name": "get_weather", "arguments": '{"city": "Oslo"}'},
                    }
                ],
            },
            {"role": "tool", "tool_call_id": "call_1", "content": "Sunny, 20 C"},
        ],
        tools=[WEATHER],
        tool_choice="none",
        max_tokens=24,
    )
    assert answer.choices[0].message.content and not answer.choices[0].message.tool_calls


def test_json_schema_answer_conforms(client: openai.OpenAI) -> None:
    answer = client.chat.completions.create(
        model="m",
        messages=[{"role": "user", "content": "Invent a person."}],
        response_format={
            "type": "json_schema",
            "json_schema": {"name": "person", "schema": PERSON, "strict": True},
        },
        max_tokens=128,
        logprobs=True,
        top_logprobs=2,
    )
    assert answer.choices[0].finish_reason == "stop"
    value = json.loads(answer.choices[0].message.content or "")
    assert set(value) == {"name", "age"} and isinstance(value["age"], int)
    logprobs = answer.choices[0].logprobs
    assert logprobs is not None and logprobs.content
    assert answer.usage is not None and len(logprobs.content) == answer.usage.completion_tokens
    assert all(len(entry.top_logprobs) == 2 for entry in logprobs.content)


def test_json_object_answer_parses(client: openai.OpenAI) -> None:
    answer = client.chat.completions.create(
        model="m",
        messages=[{"role": "user", "content": "A JSON object about a cat."}],
        response_format={"type": "json_object"},
        max_tokens=48,
    )
    choice = answer.choices[0]
    if choice.finish_reason == "stop":  # a cut answer comes back cut, as OpenAI's does
        assert isinstance(json.loads(choice.message.content or ""), dict)


def test_seed_repeats_a_sampled_answer(client: openai.OpenAI) -> None:
    def ask() -> str | None:
        answer = client.chat.completions.create(
            model="m", messages=HI, max_tokens=12, temperature=1.0, seed=7
        )
        return answer.choices[0].message.content

    assert ask() == ask()


def test_embeddings_as_floats_and_base64(client: openai.OpenAI, engine: Engine) -> None:
    packed = client.embeddings.create(model="m", input=["a cat", "a dog"])  # base64 by default
    floats = client.embeddings.create(model="m", input=["a cat", "a dog"], encoding_format="float")
    assert [d.index for d in packed.data] == [0, 1]
    assert len(packed.data[0].embedding) == engine.info.n_embd
    assert packed.data[0].embedding == pytest.approx(floats.data[0].embedding, abs=1e-6)
    assert packed.usage.prompt_tokens > 0


def test_legacy_completion_with_logprobs(client: openai.OpenAI) -> None:
    answer = client.completions.create(
        model="m", prompt="Once upon a time", max_tokens=6, temperature=0, logprobs=2
    )
    choice = answer.choices[0]
    assert choice.logprobs is not None and choice.logprobs.tokens is not None
    assert "".join(choice.logprobs.tokens) == choice.text
    streamed = client.completions.create(
        model="m", prompt="Once upon a time", max_tokens=6, temperature=0, stream=True
    )
    assert "".join(c.choices[0].text for c in streamed) == choice.text


def test_models_and_health(client: openai.OpenAI, base: str) -> None:
    (model,) = client.models.list().data
    assert model.id == "SmolLM2-135M-Instruct.Q4_1"
    assert client.models.retrieve(model.id).id == model.id
    assert httpx.get(f"{base}/health").json() == {"status": "ok"}


@pytest.mark.parametrize(
    ("body", "param", "code"),
    [
        ({"temperature": -1}, "temperature", "invalid_request"),
        ({"n": 17}, "n", "invalid_request"),
        ({"messages": []}, "messages", "invalid_request"),
        ({"tools": [WEATHER], "tool_choice": {"function": {"name": "nope"}}}, None, None),
        ({"response_format": {"type": "xml"}}, None, "invalid_request"),
        ({"messages": [{"role": "user", "content": [{"type": "input_audio"}]}]}, None, None),
        ({"messages": [{"role": "robot", "content": "hi"}]}, "messages[0].role", None),
        ({"max_tokens": 5000}, None, "context_length_exceeded"),
    ],
)
def test_bad_requests_are_400s_in_openai_shape(
    base: str, body: dict[str, object], param: str | None, code: str | None
) -> None:
    response = httpx.post(
        f"{base}/v1/chat/completions", json={"model": "m", "messages": HI, **body}
    )
    assert response.status_code == 400
    error = response.json()["error"]
    assert set(error) == {"message", "type", "param", "code"} and error["message"]
    assert error["type"] == "invalid_request_error"
    if param is not None:
        assert error["param"] == param
    if code is not None:
        assert error["code"] == code


def test_an_image_url_is_refused_by_the_default_policy(base: str) -> None:
    part = {"type": "image_url", "image_url": {"url": "http://example.com/cat.png"}}
    response = httpx.post(
        f"{base}/v1/chat/completions",
        json={"model": "m", "messages": [{"role": "user", "content": [part]}]},
    )
    assert response.status_code == 400  # this model has no projector: refused before a fetch
    assert response.json()["error"]["code"] == "image_not_supported"


def test_bodies_over_the_limit_are_413s(base: str) -> None:
    huge = {"model": "m", "messages": [{"role": "user", "content": "x" * 100_000}]}
    response = httpx.post(f"{base}/v1/chat/completions", json=huge)
    assert response.status_code == 413
    assert response.json()["error"]["code"] == "request_too_large"


def test_not_json_is_a_400(base: str) -> None:
    response = httpx.post(f"{base}/v1/chat/completions", content=b"{not json")
    assert response.status_code == 400 and response.json()["error"]["message"]


def _metric(base: str, name: str) -> float:
    for line in httpx.get(f"{base}/metrics").text.splitlines():
        key, _, value = line.rpartition(" ")
        if key == name:
            return float(value)
    return 0.0


def test_a_dropped_stream_frees_its_sequence(base: str, engine: Engine) -> None:
    body = {
        "model": "m",
        "messages": [{"role": "user", "content": "Write a long story."}],
        "max_tokens": 900,
        "logit_bias": _no_eos(engine),
        "stream": True,
    }
    gone = 'llamacpp_requests_total{endpoint="/v1/chat/completions",outcome="disconnected"}'
    before = _metric(base, gone)
    with (
        httpx.Client(timeout=30) as raw,
        raw.stream("POST", f"{base}/v1/chat/completions", json=body) as response,
    ):
        assert response.status_code == 200
        lines = response.iter_lines()
        assert next(line for line in lines if line.startswith("data:"))
        assert engine.stats().running == 1
    # the connection is closed here, a few tokens into 900
    stats = wait_for(engine, lambda s: s.running == 0 and s.waiting == 0)
    assert stats.running == 0 and stats.steps > 0
    assert _metric(base, "llamacpp_running_sequences") == 0
    assert _metric(base, "llamacpp_decode_threads") == engine.stats().decode_threads >= 1
    assert _metric(base, gone) == before + 1


def test_a_dropped_whole_request_is_cancelled(base: str, engine: Engine) -> None:
    body = {
        "model": "m",
        "messages": [{"role": "user", "content": "Write a long story."}],
        "max_tokens": 900,
        "logit_bias": _no_eos(engine),
    }
    gone = 'llamacpp_requests_total{endpoint="/v1/chat/completions",outcome="disconnected"}'
    before = _metric(base, gone)

    async def drop_once_generating() -> None:
        # The client leaves once its answer is being generated (not on a timer, which a busy
        # machine can reach before the server has read the request).
        async with httpx.AsyncClient(timeout=60) as client:
            post = asyncio.ensure_future(client.post(f"{base}/v1/chat/completions", json=body))
            await asyncio.to_thread(wait_for, engine, lambda s: s.running == 1 or post.done())
            assert not post.done(), "the answer came before the client could leave"
            post.cancel()
            await asyncio.gather(post, return_exceptions=True)

    asyncio.run(drop_once_generating())
    stats = wait_for(engine, lambda s: s.running == 0 and s.waiting == 0)
    assert stats.running == 0
    assert wait_for_metric(base, gone, before + 1)


def wait_for_metric(base: str, name: str, value: float) -> bool:
    import time

    end = time.monotonic() + 30
    while _metric(base, name) != value and time.monotonic() < end:
        time.sleep(0.05)
    return _metric(base, name) == value


def test_a_request_past_its_timeout_is_a_504(engine: Engine) -> None:
    body = {"model": "m", "messages": HI, "max_tokens": 900, "logit_bias": _no_eos(engine)}
    with running_server(engine, request_timeout=0.05) as url:
        response = httpx.post(f"{url}/v1/chat/completions", json=body, timeout=60)
    assert response.status_code == 504
    assert response.json()["error"]["code"] == "timeout"


def test_the_api_key_is_required(engine: Engine) -> None:
    with running_server(engine, api_key="s3cret") as url:
        assert httpx.get(f"{url}/health").status_code == 200  # open for orchestrators
        refused = httpx.get(f"{url}/v1/models", headers={"Authorization": "Bearer wrong"})
        assert refused.status_code == 401
        assert refused.json()["error"]["code"] == "invalid_api_key"
        assert httpx.get(f"{url}/metrics").status_code == 401
        with pytest.raises(openai.AuthenticationError):
            openai.OpenAI(base_url=f"{url}/v1", api_key="nope", max_retries=0).models.list()
        good = openai.OpenAI(base_url=f"{url}/v1", api_key="s3cret", max_retries=0)
        assert good.models.list().data


async def test_a_full_queue_answers_429_with_retry_after(smollm_path: Path) -> None:
    config = EngineConfig(model=str(smollm_path), n_seq_max=1, n_ctx_per_seq=256, max_queued=1)
    with Engine(config) as small, running_server(small) as url:
        body = {"model": "m", "messages": HI, "max_tokens": 24, "logit_bias": _no_eos(small)}
        async with httpx.AsyncClient(base_url=url, timeout=120) as http:
            answers = await asyncio.gather(
                *(http.post("/v1/chat/completions", json=body) for _ in range(8))
            )
            metrics = (await http.get("/metrics")).text
        statuses = sorted(a.status_code for a in answers)
        assert set(statuses) == {200, 429}, statuses
        for answer in answers:
            if answer.status_code == 429:
                assert answer.headers["Retry-After"] == "1"
                assert answer.json()["error"]["type"] == "rate_limit_error"
            else:
                assert answer.json()["usage"]["completion_tokens"] == 24
        assert 'outcome="overloaded"' in metrics and 'outcome="timeout"' not in metrics
        assert wait_for(small, lambda s: s.running == 0).running == 0
