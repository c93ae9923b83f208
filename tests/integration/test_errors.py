"""Each error, triggered on purpose, fails only its own request; the engine keeps serving."""

from __future__ import annotations

import logging
import threading
from pathlib import Path

import pytest

from llamacpp_integrations.engine import (
    ChatMessage,
    ChatRequest,
    CompletionRequest,
    Engine,
    EngineConfig,
    SamplingParams,
)
from llamacpp_integrations.errors import (
    ChatTemplateError,
    ContextOverflowError,
    EngineClosedError,
    EngineOverloadedError,
    InvalidRequestError,
    LlamaCppIntegrationError,
    ModelLoadError,
)

from .helpers import chat, idle_and_freed, wait_for


def _still_serving(engine: Engine) -> None:
    assert engine.generate(chat("Say hi.", max_tokens=4)).finish_reason in ("stop", "length")
    assert idle_and_freed(wait_for(engine, idle_and_freed))


@pytest.mark.parametrize(
    "request_",
    [
        chat("x", sampling=SamplingParams(temperature=-1)),
        chat("x", sampling=SamplingParams(top_p=0)),
        chat("x", sampling=SamplingParams(min_p=2)),
        chat("x", sampling=SamplingParams(temperature=float("nan"))),
        chat("x", sampling=SamplingParams(logit_bias={10**9: 1.0})),
        chat("x", sampling=SamplingParams(seed=-5)),
        chat("x", max_tokens=0),
        chat("x", stop=[""]),
        chat("x", timeout=-1),
        chat("x", grammar="   "),
        chat("x", grammar='root ::= "unterminated'),
        chat("x", grammar='root ::= "a" | undefined_rule'),
        ChatRequest(messages=[]),
        ChatRequest(messages=[{"content": "no role"}]),
        CompletionRequest(prompt=[1, 2, 10**9]),
        CompletionRequest(prompt="", add_bos=False),
    ],
    ids=lambda r: type(r).__name__,
)
def test_invalid_requests_raise_before_generating(engine: Engine, request_: ChatRequest) -> None:
    with pytest.raises(InvalidRequestError) as caught:
        engine.submit(request_)
    assert str(caught.value)
    _still_serving(engine)


def test_context_overflow_names_the_sizes(engine: Engine) -> None:
    long_prompt = "word " * 2000
    with pytest.raises(ContextOverflowError) as caught:
        engine.generate(chat(long_prompt))
    assert caught.value.n_ctx == engine.n_ctx_per_seq
    assert caught.value.n_prompt_tokens > engine.n_ctx_per_seq
    with pytest.raises(ContextOverflowError):
        engine.generate(chat("Hello", max_tokens=engine.n_ctx_per_seq))
    _still_serving(engine)


def test_generation_without_max_tokens_stops_at_the_context(smollm_path: Path) -> None:
    with Engine(EngineConfig(model=str(smollm_path), n_seq_max=1, n_ctx_per_seq=128)) as engine:
        request = chat("Write an endless story.", ignore_eos=True)
        result = engine.generate(request)
        assert result.finish_reason == "length"
        assert result.usage.prompt_tokens + result.usage.completion_tokens == 128


def test_overloaded_queue_raises_then_recovers(smollm_path: Path) -> None:
    config = EngineConfig(model=str(smollm_path), n_seq_max=1, max_queued=1, n_ctx_per_seq=512)
    with Engine(config) as engine:
        running = engine.submit(chat("Write a long essay.", max_tokens=300, ignore_eos=True))
        wait_for(engine, lambda s: s.running == 1)
        waiting = engine.submit(chat("Second.", max_tokens=2))
        with pytest.raises(EngineOverloadedError):
            engine.submit(chat("Third.", max_tokens=2))
        # Embeddings wait for room too, as long as their timeout allows.
        with pytest.raises(EngineOverloadedError):
            engine.embed(["no room"], timeout=0.2)
        # A caller willing to wait gets in once there is room.
        unblock = threading.Timer(0.2, running.cancel)
        unblock.start()
        third = engine.submit(chat("Third.", max_tokens=2), queue_timeout=60)
        assert waiting.result().finish_reason in ("stop", "length")
        assert third.result().finish_reason in ("stop", "length")
        _still_serving(engine)


def test_closed_engine_refuses_and_fails_running_requests(smollm_path: Path) -> None:
    engine = Engine(EngineConfig(model=str(smollm_path), n_seq_max=2, n_ctx_per_seq=512))
    running = engine.submit(chat("Write a long essay.", max_tokens=400, ignore_eos=True))
    next(iter(running))
    engine.close()
    with pytest.raises(EngineClosedError):
        running.result()
    with pytest.raises(EngineClosedError):
        engine.generate(chat("Hello"))
    with pytest.raises(EngineClosedError):
        engine.embed(["Hello"])
    assert engine.closed
    engine.close()  # idempotent


def test_model_load_errors_name_the_path_and_reason(tmp_path: Path, smollm_path: Path) -> None:
    missing = tmp_path / "nope.gguf"
    with pytest.raises(ModelLoadError, match=r"nope\.gguf"):
        Engine(EngineConfig(model=str(missing)))
    not_gguf = tmp_path / "notes.gguf"
    not_gguf.write_text("this is not a model\n" * 10)
    with pytest.raises(ModelLoadError, match=r"notes\.gguf"):
        Engine(EngineConfig(model=str(not_gguf)))
    truncated = tmp_path / "truncated.gguf"
    with smollm_path.open("rb") as src:
        truncated.write_bytes(src.read(5 * 2**20))
    with pytest.raises(ModelLoadError, match="truncat") as caught:
        Engine(EngineConfig(model=str(truncated)))
    assert caught.value.path == str(truncated)
    with pytest.raises(ModelLoadError):
        Engine(EngineConfig(model="no-such-short-name"))


def test_model_without_chat_template(gemma_path: Path) -> None:
    """Gemma 3 270M is a base model: raw completion works, chat needs an explicit template."""
    with Engine(EngineConfig(model=str(gemma_path), n_seq_max=2, n_ctx_per_seq=512)) as engine:
        assert engine.info.architecture == "gemma3"
        assert not engine.info.has_chat_template
        with pytest.raises(ChatTemplateError, match="no chat template"):
            engine.generate(chat("Hello"))
        result = engine.generate(
            CompletionRequest(
                prompt="The capital of France is",
                max_tokens=8,
                sampling=SamplingParams(temperature=0),
            )
        )
        assert result.finish_reason in ("stop", "length") and result.text.strip()
        template = (
            "{% for m in messages %}<start_of_turn>{{ m.role }}\n{{ m.content }}<end_of_turn>\n"
            "{% endfor %}{% if add_generation_prompt %}<start_of_turn>model\n{% endif %}"
        )
        answer = engine.generate(
            ChatRequest(
                messages=[ChatMessage(role="user", content="Hello")],
                chat_template=template,
                max_tokens=8,
            )
        )
        assert answer.usage.completion_tokens > 0
        # Sliding-window cache: a repeated prompt must still produce the same greedy answer.
        again = engine.generate(
            CompletionRequest(
                prompt="The capital of France is",
                max_tokens=8,
                sampling=SamplingParams(temperature=0),
            )
        )
        assert again.token_ids == result.token_ids


def test_broken_template_is_a_template_error(engine: Engine) -> None:
    with pytest.raises(ChatTemplateError):
        engine.generate(
            ChatRequest(messages=[ChatMessage(role="user", content="x")], chat_template="{% for %}")
        )
    with pytest.raises(ChatTemplateError, match="nope"):
        engine.generate(
            ChatRequest(
                messages=[ChatMessage(role="user", content="x")],
                chat_template="{{ raise_exception('nope') }}",
            )
        )
    _still_serving(engine)


def test_every_error_is_a_package_error() -> None:
    for error in (ModelLoadError, InvalidRequestError, EngineOverloadedError, EngineClosedError):
        assert issubclass(error, LlamaCppIntegrationError)


def test_llama_cpp_logs_go_to_python_logging(
    smollm_path: Path, caplog: pytest.LogCaptureFixture, capfd: pytest.CaptureFixture[str]
) -> None:
    """llama.cpp's own lines reach the ``llamacpp_integrations.llama_cpp`` logger, not stderr."""
    config = EngineConfig(model=str(smollm_path), n_seq_max=1, n_ctx_per_seq=256)
    with (
        caplog.at_level(logging.DEBUG, logger="llamacpp_integrations.llama_cpp"),
        Engine(config) as engine,
    ):
        engine.generate(chat("Hi", max_tokens=2))
    records = [r for r in caplog.records if r.name == "llamacpp_integrations.llama_cpp"]
    assert any("llama" in r.getMessage() for r in records)
    assert capfd.readouterr().err == ""
