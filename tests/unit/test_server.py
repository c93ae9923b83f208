"""The server's pure parts: error mapping, request translation, response shapes, metrics, the
gatekeepers, and the completions and embeddings routes over a scripted engine."""

from __future__ import annotations

import base64
import gc
import json
import struct
from dataclasses import replace
from typing import Any

import pytest
from starlette.testclient import TestClient

from llamacpp_integrations.engine import Timings
from llamacpp_integrations.errors import (
    ContextOverflowError,
    EngineOverloadedError,
    ImageLoadError,
    InvalidRequestError,
    LlamaCppIntegrationError,
    RequestTimeoutError,
)
from llamacpp_integrations.server import ERROR_TABLE, ApiError, create_app
from llamacpp_integrations.server.chat_messages import messages_reader
from llamacpp_integrations.server.errors import api_error_of
from llamacpp_integrations.server.metrics import ServerMetrics
from llamacpp_integrations.server.openai.options import chat_options
from llamacpp_integrations.server.openai.schemas import ChatCompletionBody
from llamacpp_integrations.testing import Answer, ScriptedEngine

from .tiny_model import INFO as TINY

INFO = replace(TINY, chat_template=None)  # the tiny model, without a chat template
TIMINGS = Timings(0.0, 0.01, 0.05, 0.01, 0.04)


def scripted(**fields: Any) -> ScriptedEngine:
    """The public ``ScriptedEngine`` serving ``INFO``: "Hello there" in two chunks, after a
    prompt of four tokens."""
    return ScriptedEngine(**{"info": INFO, "timings": TIMINGS, "prompt_tokens": 4, **fields})


def test_every_error_row_is_reachable_and_statuses_are_right() -> None:
    for row in ERROR_TABLE:  # no row is shadowed by an earlier, broader one
        first = next(r for r in ERROR_TABLE if issubclass(row.error, r.error))
        assert first is row, row
    assert api_error_of(InvalidRequestError("x")).status == 400
    overflow = api_error_of(ContextOverflowError("x", n_prompt_tokens=9, n_ctx=8))
    assert (overflow.status, overflow.code) == (400, "context_length_exceeded")
    overloaded = api_error_of(EngineOverloadedError("full"))
    assert overloaded.status == 429 and ("Retry-After", "1") in overloaded.headers
    assert api_error_of(RequestTimeoutError("late")).status == 504
    assert api_error_of(ImageLoadError("no", reason="remote-disabled")).code == (
        "image_load_failed:remote-disabled"
    )
    assert api_error_of(LlamaCppIntegrationError("?")).status == 500
    unknown = api_error_of(KeyError("secret internals"))
    assert unknown.status == 500 and "secret" not in unknown.message


def test_chat_options_read_openai_fields() -> None:
    body = ChatCompletionBody.model_validate(
        {
            "messages": [{"role": "user", "content": "hi"}],
            "temperature": 0,
            "seed": 3,
            "stop": "END",
            "max_completion_tokens": 7,
            "logprobs": True,
            "top_logprobs": 2,
            "logit_bias": {"5": -100},
            "response_format": {"type": "json_object"},
        }
    )
    options = chat_options(body, timeout=9.0)
    assert options.sampling.temperature == 0 and options.sampling.seed == 3
    assert options.sampling.logit_bias == {5: -100}
    assert options.stop == ("END",) and options.max_tokens == 7 and options.timeout == 9.0
    assert options.logprobs == 2 and options.response_format is not None
    # n answers are n calls of these options (server/choices.py), so n leaves them unchanged.
    assert chat_options(body.model_copy(update={"n": 3}), timeout=9.0) == options
    with pytest.raises(ApiError, match="tool_choice needs tools"):
        chat_options(body.model_copy(update={"tool_choice": "required"}), timeout=None)


def test_messages_translate_with_calls_parsed_and_images_refused_without_a_reader() -> None:
    messages = [
        {
            "role": "developer",
            "content": [{"type": "text", "text": "Be "}, {"type": "text", "text": "brief."}],
        },
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {"id": "c1", "type": "function", "function": {"name": "f", "arguments": '{"a": 1}'}}
            ],
        },
        {"role": "tool", "tool_call_id": "c1", "content": "42"},
    ]
    out = messages_reader(messages)(None)
    assert out[0] == {"role": "system", "content": "Be brief."}
    assert out[1]["tool_calls"][0]["function"]["arguments"] == {"a": 1}
    assert out[2] == {"role": "tool", "content": "42", "tool_call_id": "c1"}
    image = [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": "data:,"}}]}]
    with pytest.raises(InvalidRequestError, match="no image projector"):
        messages_reader(image)(None)
    seen: list[str] = []
    messages_reader(image)(lambda url: seen.append(url))  # type: ignore[arg-type,func-returns-value]
    assert seen == ["data:,"]


def test_histograms_are_cumulative_and_metrics_render() -> None:
    metrics = ServerMetrics()
    for value in (0.005, 0.03, 50.0):
        metrics.ttft.observe(value)
    metrics.finished("/v1/x", "ok")
    text = metrics.render(None)
    ttft = "llamacpp_time_to_first_token_seconds_bucket"
    assert f'{ttft}{{le="0.01"}} 1.0' in text and f'{ttft}{{le="0.05"}} 2.0' in text
    assert f'{ttft}{{le="+Inf"}} 3.0' in text
    # Each app counts in a registry of its own.
    assert ServerMetrics().value("llamacpp_requests_total", endpoint="/v1/x", outcome="ok") == 0
    assert 'llamacpp_requests_total{endpoint="/v1/x",outcome="ok"} 1' in text
    assert "llamacpp_queue_depth" not in text  # no engine stats, no engine gauges


def _client(engine: ScriptedEngine, **options: object) -> TestClient:
    return TestClient(create_app(engine, **options))  # type: ignore[arg-type]


def test_completions_whole_and_streamed() -> None:
    engine = scripted()
    with _client(engine) as client:
        whole = client.post("/v1/completions", json={"prompt": "Hi", "max_tokens": 4}).json()
        assert whole["object"] == "text_completion" and whole["choices"][0]["text"] == "Hello there"
        assert whole["usage"]["total_tokens"] == 6 and whole["model"] == "tiny-Q8_0"
        body = {"prompt": "Hi", "stream": True, "stream_options": {"include_usage": True}}
        lines = client.post("/v1/completions", json=body).text.split("\n\n")
        events = [line.removeprefix("data: ") for line in lines if line]
        assert events[-1] == "[DONE]"
        chunks = [json.loads(e) for e in events[:-1]]
        assert "".join(c["choices"][0]["text"] for c in chunks if c["choices"]) == "Hello there"
        assert chunks[-1]["usage"]["completion_tokens"] == 2 and not chunks[-1]["choices"]
        assert engine.requests[0].max_tokens == 4


def test_a_refused_request_keeps_its_status_streamed_or_not() -> None:
    engine = scripted(answers=[Answer.refused(EngineOverloadedError("queue full"))])
    with _client(engine) as client:
        for stream in (False, True):
            answer = client.post("/v1/completions", json={"prompt": "Hi", "stream": stream})
            assert answer.status_code == 429 and answer.headers["retry-after"] == "1"
            assert answer.json()["error"]["type"] == "rate_limit_error"
        metrics = client.get("/metrics").text
        assert 'outcome="overloaded"} 2' in metrics


def test_latencies_have_one_definition_whole_or_streamed() -> None:
    # Time to first token and the gap between tokens are the engine's (Timings), recorded
    # once per answer whether it was sent whole or streamed.
    app = create_app(scripted())  # type: ignore[arg-type]
    with TestClient(app) as client:
        client.post("/v1/completions", json={"prompt": "Hi"})
        client.post("/v1/completions", json={"prompt": "Hi", "stream": True})
    metrics: ServerMetrics = app.state.endpoints.metrics
    ttft = "llamacpp_time_to_first_token_seconds"
    assert metrics.value(f"{ttft}_count") == 2
    assert metrics.value(f"{ttft}_sum") == pytest.approx(2 * 0.01)
    gap = TIMINGS.generation_s / (2 - 1)  # two tokens, one gap
    assert metrics.value("llamacpp_inter_token_seconds_count") == 2
    assert metrics.value("llamacpp_inter_token_seconds_sum") == pytest.approx(2 * gap)
    assert metrics.value("llamacpp_prompt_tokens_total") == 2 * 4
    assert metrics.value("llamacpp_completion_tokens_total") == 2 * 2


def test_embedding_inputs_are_counted_in_one_pass() -> None:
    engine = scripted()
    app = create_app(engine)  # type: ignore[arg-type]
    with TestClient(app) as client:
        answer = client.post("/v1/embeddings", json={"input": ["a b", "c"]}).json()
        ids = client.post("/v1/embeddings", json={"input": [[7, 8, 9]]}).json()
    # Each input tokenized once, to count (a token per character; ids are read back as text).
    assert engine.tokenized == ["a b", "c", "\x07\x08\t"]
    assert answer["usage"] == {"prompt_tokens": 4, "total_tokens": 4}
    assert ids["usage"]["prompt_tokens"] == 3
    assert app.state.endpoints.metrics.value("llamacpp_prompt_tokens_total") == 7


def test_embeddings_as_floats_and_base64() -> None:
    engine = scripted()
    vectors = engine.embed(["a b", "c"])
    with _client(engine) as client:
        floats = client.post("/v1/embeddings", json={"input": ["a b", "c"]}).json()
        assert [d["embedding"] for d in floats["data"]] == vectors
        packed = client.post(
            "/v1/embeddings", json={"input": "a b", "encoding_format": "base64"}
        ).json()
        raw = base64.b64decode(packed["data"][0]["embedding"])
        assert struct.unpack("<3f", raw) == pytest.approx(vectors[0], rel=1e-6)  # as float32
        refused = client.post("/v1/embeddings", json={"input": "x", "dimensions": 2})
        assert refused.status_code == 400 and refused.json()["error"]["param"] == "dimensions"


def test_the_key_the_body_limit_and_cors() -> None:
    with _client(
        scripted(), api_key="k", max_body_bytes=100, cors_origins=["http://app"]
    ) as client:
        assert client.get("/health").json() == {"status": "ok"}
        assert client.get("/v1/models").status_code == 401
        assert client.get("/v1/models", headers={"Authorization": "Bearer k"}).status_code == 200
        big = client.post(
            "/v1/completions", headers={"Authorization": "Bearer k"}, json={"prompt": "x" * 200}
        )
        assert big.status_code == 413 and big.json()["error"]["code"] == "request_too_large"
        preflight = client.options(
            "/v1/completions",
            headers={"Origin": "http://app", "Access-Control-Request-Method": "POST"},
        )
        assert preflight.headers["access-control-allow-origin"] == "http://app"
    with _client(scripted()) as client:  # CORS off by default
        answer = client.get("/v1/models", headers={"Origin": "http://app"})
        assert "access-control-allow-origin" not in answer.headers


def test_serve_freezes_what_it_made_before_it_serves(monkeypatch: pytest.MonkeyPatch) -> None:
    # The objects made before serving stay out of the collector's full passes, which would
    # otherwise hold every request up (docs/performance.md, the event loop).
    import uvicorn

    from llamacpp_integrations.server import run

    seen: list[int] = []

    class Server:
        def __init__(self, config: uvicorn.Config) -> None:
            self.config = config

        def run(self) -> None:
            seen.append(gc.get_freeze_count())

    monkeypatch.setattr(uvicorn, "Server", Server)
    try:
        run.serve(scripted())  # type: ignore[arg-type]
    finally:
        gc.unfreeze()
    assert seen and seen[0] > 0
