"""The remote engine's pure translation: request bodies, stream events, errors, builds."""

from __future__ import annotations

import base64
import logging
import math

import pytest

from llamacpp_integrations.engine.types import ChatRequest, CompletionRequest, SamplingParams
from llamacpp_integrations.errors import (
    ContextOverflowError,
    InvalidRequestError,
    RequestTimeoutError,
    ServerUnavailableError,
)
from llamacpp_integrations.prompts.media import ImageInput
from llamacpp_integrations.remote import TESTED_BUILDS
from llamacpp_integrations.remote.builds import check_build
from llamacpp_integrations.remote.chunks import ChunkReader
from llamacpp_integrations.remote.payload import (
    TRIGGER_PATTERN,
    completion_body,
    encode_image,
    grammar_fields,
)
from llamacpp_integrations.remote.server_info import describe_server, parse_metrics, stats_from
from llamacpp_integrations.remote.transport import error_for_status, parse_event

URL = "http://127.0.0.1:8080"


def test_grammar_triggers_are_encoded_as_the_server_reads_them() -> None:
    # tools/server/server-common.h (server_grammar_trigger) reads {"type": int, "value": str};
    # common_grammar_trigger_type has PATTERN = 2, whose regex goes to the lazy grammar sampler
    # as written (what the local engine does with ours). Pinned: the server does not document it.
    assert TRIGGER_PATTERN == 2
    fields = grammar_fields('root ::= "x"', [r"<tool_call>", r"^\s*\{[\s\S]*$"])
    assert fields == {
        "grammar": 'root ::= "x"',
        "grammar_lazy": True,
        "grammar_triggers": [
            {"type": 2, "value": "<tool_call>"},
            {"type": 2, "value": r"^\s*\{[\s\S]*$"},
        ],
    }
    assert grammar_fields('root ::= "x"', []) == {"grammar": 'root ::= "x"'}
    assert grammar_fields(None, []) == {}


def test_completion_body_carries_every_setting() -> None:
    request = CompletionRequest(
        prompt="Hi",
        max_tokens=7,
        stop=["\n"],
        logprobs=0,
        ignore_eos=True,
        sampling=SamplingParams(temperature=0.0, seed=3, logit_bias={5: -math.inf, 6: 1.5}),
    )
    body = completion_body(request, "Hi")
    assert body["prompt"] == "Hi" and body["stream"] is True and body["cache_prompt"] is True
    assert body["n_predict"] == 7 and body["stop"] == ["\n"] and body["ignore_eos"] is True
    assert body["n_probs"] == 1  # logprobs=0 still needs the sampled token's
    assert body["seed"] == 3 and body["temperature"] == 0.0
    assert body["logit_bias"] == [[5, False], [6, 1.5]]
    assert "grammar" not in body
    assert completion_body(CompletionRequest(prompt=[1, 2]), [1, 2])["n_predict"] == -1


def test_images_go_as_ppm_bytes_beside_the_prompt() -> None:
    image = ImageInput(2, 1, bytes([1, 2, 3, 4, 5, 6]))
    body = completion_body(ChatRequest(messages=[]), "<m> what?", [image])
    assert body["prompt"]["prompt_string"] == "<m> what?"
    (data,) = body["prompt"]["multimodal_data"]
    assert base64.b64decode(data) == b"P6\n2 1\n255\n" + bytes([1, 2, 3, 4, 5, 6])
    assert encode_image(image) == data


def _final(stop_type: str, **extra: object) -> dict[str, object]:
    return {
        "content": "",
        "tokens": [],
        "stop": True,
        "stop_type": stop_type,
        "timings": {"cache_n": 3, "prompt_n": 5, "prompt_ms": 20.0, "predicted_ms": 30.0},
        **extra,
    }


def test_the_end_of_generation_token_is_neither_shown_nor_counted() -> None:
    reader = ChunkReader(CompletionRequest(prompt="x", logprobs=0))
    prob = {"id": 9, "bytes": [104, 105], "logprob": -0.5, "top_logprobs": []}
    first = reader.read({"content": "hi", "tokens": [9], "completion_probabilities": [prob]})
    assert first is not None and first.text == "hi" and first.token_ids == (9,)
    assert first.logprobs[0].token == "hi" and first.logprobs[0].top == ()
    eos = {"id": 0, "bytes": [], "logprob": -0.1, "top_logprobs": []}
    assert reader.read({"content": "", "tokens": [0], "completion_probabilities": [eos]}) is None
    last = reader.read(_final("eos"))
    assert last is not None and last.finish_reason == "stop"
    assert last.token_ids == () and last.logprobs == ()
    assert last.usage is not None
    assert (last.usage.prompt_tokens, last.usage.cached_prompt_tokens) == (8, 3)
    assert last.usage.completion_tokens == 1


def test_a_split_character_is_held_until_its_text_comes() -> None:
    reader = ChunkReader(CompletionRequest(prompt="x"))
    assert reader.read({"content": "", "tokens": [1]}) is None
    chunk = reader.read({"content": "é", "tokens": [2]})
    assert chunk is not None and chunk.token_ids == (1, 2) and chunk.text == "é"
    last = reader.read(_final("limit"))
    assert last is not None and last.finish_reason == "length"
    assert last.usage is not None and last.usage.completion_tokens == 2


@pytest.mark.parametrize(("stop_type", "reason"), [("word", "stop"), ("limit", "length")])
def test_stop_types_become_finish_reasons(stop_type: str, reason: str) -> None:
    last = ChunkReader(CompletionRequest(prompt="x")).read(_final(stop_type))
    assert last is not None and last.finish_reason == reason


def test_http_errors_become_typed_errors() -> None:
    overflow = error_for_status(
        400,
        {
            "error": {
                "message": "too long",
                "type": "exceed_context_size_error",
                "n_prompt_tokens": 9,
                "n_ctx": 4,
            }
        },
        url=URL,
    )
    assert isinstance(overflow, ContextOverflowError) and overflow.n_ctx == 4
    bad = error_for_status(400, {"error": {"message": "failed to parse grammar"}}, url=URL)
    assert isinstance(bad, InvalidRequestError)
    loading = error_for_status(503, {"error": {"message": "Loading model"}}, url=URL)
    assert isinstance(loading, ServerUnavailableError) and loading.retryable and loading.url == URL
    late = error_for_status(500, "boom", url=URL, delivered=True)
    assert isinstance(late, ServerUnavailableError) and not late.retryable
    key = error_for_status(401, {"error": {"message": "Invalid API Key"}}, url=URL)
    assert isinstance(key, ServerUnavailableError) and not key.retryable
    assert not isinstance(RequestTimeoutError("t"), ServerUnavailableError)


def test_events_are_read_from_sse_lines() -> None:
    assert parse_event('data: {"content": "a"}') == {"content": "a"}
    assert parse_event('error: {"error": {"code": 500}}') == {"error": {"code": 500}}
    assert parse_event("") is None and parse_event("data: [DONE]") is None


def test_an_unknown_build_is_used_with_one_log_line(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, "llamacpp_integrations.remote")
    for build in TESTED_BUILDS:
        check_build(build, URL)
    assert not caplog.records
    check_build("b9999-abcdef0", URL, allow_untested=True)
    assert [r.getMessage().count("b9999-abcdef0") for r in caplog.records] == [1]


def test_server_description_and_stats() -> None:
    props = {
        "build_info": "b0-llama-cpp-python-0.3.36",
        "model_path": "/models/SmolLM2.gguf",
        "chat_template": "{{ messages }}",
        "bos_token": "<s>",
        "eos_token": "</s>",
        "modalities": {"vision": True},
        "media_marker": "<__media__>",
        "total_slots": 2,
        "default_generation_settings": {"n_ctx": 1024},
    }
    models = {"data": [{"meta": {"n_vocab": 100, "n_ctx_train": 8192, "n_embd": 64}}]}
    desc = describe_server(URL, props, models)
    assert desc.info.n_ctx_per_seq == 1024 and desc.info.n_vocab == 100
    assert desc.info.supports_images and desc.media_marker == "<__media__>"
    assert desc.info.name == "SmolLM2" and desc.info.path == URL
    metrics = parse_metrics("# HELP x\nllamacpp:requests_deferred 2\nllamacpp:n_decode_total 40\n")
    stats = stats_from(
        [{"id": 0, "is_processing": True}, {"id": 1, "is_processing": False}], metrics
    )
    assert (stats.running, stats.waiting, stats.steps, len(stats.slots)) == (1, 2, 40, 2)


def test_the_api_key_is_a_bearer_token_and_stays_secret() -> None:
    from pydantic import SecretStr

    from llamacpp_integrations.remote import RemoteEngine, connect

    engine = RemoteEngine(URL, api_key="s3cret", embeddings_url=URL + "1")
    assert "s3cret" not in repr(engine) and "s3cret" not in repr(vars(engine))
    for transport in (engine._gen, engine._emb):
        assert transport.client().headers["Authorization"] == "Bearer s3cret"
    engine.close()
    assert engine.closed
    keyed = connect(URL, api_key=SecretStr("k"))
    assert isinstance(keyed, RemoteEngine)
    with pytest.raises(InvalidRequestError):
        RemoteEngine("localhost:8080")


def test_adapters_take_a_base_url_without_a_model() -> None:
    from llamacpp_integrations.langchain import ChatLlamaCpp, LlamaCppEmbeddings
    from llamacpp_integrations.llama_index import LlamaCpp, LlamaCppEmbedding
    from llamacpp_integrations.remote import RemoteEngine

    for adapter in (
        ChatLlamaCpp(base_url=URL, api_key="k"),
        LlamaCppEmbeddings(base_url=URL, embeddings_url=URL + "1"),
        LlamaCpp(base_url=URL),
        LlamaCppEmbedding(base_url=URL),
    ):
        engine = adapter.binding.loaded()  # made, not contacted
        assert isinstance(engine, RemoteEngine) and engine.base_url == URL
        assert "api_key" not in adapter.model_dump()
