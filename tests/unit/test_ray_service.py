"""What crosses a Ray handle pickles whole, and ``EngineService`` is the engine as methods.

A Serve handle pickles every argument, result and raised error: the requests, results and each
typed error must come back equal (errors: same class, message and attributes, though their
``__init__`` takes keyword-only arguments). ``EngineService`` runs here over a scripted engine
(no model, no Ray).
"""

from __future__ import annotations

import asyncio
import pickle
from dataclasses import dataclass
from typing import Any

import pytest

from llamacpp_integrations import errors
from llamacpp_integrations.engine import EngineConfig
from llamacpp_integrations.engine.cpu_budget import CpuBudget
from llamacpp_integrations.engine.results import Completion, StreamChunk, Usage
from llamacpp_integrations.engine.types import (
    ChatMessage,
    ChatRequest,
    CompletionRequest,
    SamplingParams,
)
from llamacpp_integrations.prompts.media import ImageInput
from llamacpp_integrations.prompts.reasoning import ReasoningFormat, ReasoningSpec
from llamacpp_integrations.ray import engine_service, reservation
from llamacpp_integrations.ray.engine_service import EngineService
from llamacpp_integrations.testing import ScriptedEngine
from llamacpp_integrations.testing.scripted import SCRIPTED_TIMINGS

ERRORS: list[errors.LlamaCppIntegrationError] = [
    errors.ContextOverflowError("too long", n_prompt_tokens=900, n_ctx=512, request_id="r1"),
    errors.ModelLoadError("/m.gguf", "truncated"),
    errors.MissingDependencyError("ray", package="ray", extra="ray", needed_for="Ray"),
    errors.SchemaNotSupportedError("no $ref", path="$.a", request_id="r2"),
    errors.ImageLoadError("bad", reason="decode-failed"),
    errors.ServerUnavailableError("503", url="http://h:1", retryable=False),
    errors.ServerAuthenticationError("401", url="http://h:1"),
    errors.ServerFeatureError("no", feature="rerank", url="http://h:1", build="b1"),
    errors.RequestCancelledError("cancelled", request_id="r3", partial_text="Hel"),
    errors.KVCacheFullError("full", partial_text="x"),
    errors.ToolCallParseError("broken", position=4, partial_text="<tool"),
    errors.UnmatchedRequestError("none", kind="stream", differences=("a",)),
    errors.CassetteFormatError("corrupt", path="c.jsonl", line=3),
    errors.EngineClosedError("closed"),
    errors.InvalidRequestError("bad", request_id="r4"),
]


@pytest.mark.parametrize("error", ERRORS, ids=lambda e: type(e).__name__)
def test_typed_errors_pickle_whole(error: errors.LlamaCppIntegrationError) -> None:
    back = pickle.loads(pickle.dumps(error))
    assert type(back) is type(error)
    assert str(back) == str(error)
    assert back.args == error.args
    assert vars(back) == vars(error)
    if isinstance(error, ImportError):
        assert isinstance(back, ImportError) and back.name == error.name


PIXEL = ImageInput(1, 1, b"\x00\x01\x02")


def test_requests_and_results_pickle() -> None:
    think = ReasoningFormat(family="think-tags", start="<think>", end="</think>")
    chat = ChatRequest(
        messages=[
            ChatMessage(role="user", content=[{"type": "image", "image": PIXEL}]),
            {"role": "assistant", "content": "", "tool_calls": [{"name": "f"}]},
        ],
        tools=[{"type": "function", "function": {"name": "f", "parameters": {}}}],
        grammar='root ::= "a"',
        grammar_triggers=("<tool_call>",),
        sampling=SamplingParams(temperature=0.0, seed=3),
        reasoning=ReasoningSpec(format=think, enabled=True, budget=8),
        stop=("\n",),
        logprobs=2,
    )
    raw = CompletionRequest(prompt=[1, 2, 3], max_tokens=4)
    usage = Usage(prompt_tokens=3, completion_tokens=2)
    chunk = StreamChunk("r", "Hi", (5,), "stop", usage, SCRIPTED_TIMINGS, reasoning="hm")
    done = Completion("r", "Hi", (5,), "stop", usage, SCRIPTED_TIMINGS)
    for value in (chat, raw, chunk, done, ScriptedEngine().info):
        assert pickle.loads(pickle.dumps(value)) == value


@dataclass
class _Hold:
    engine: Any
    released: bool = False

    def release(self, keep_alive: float | None = None) -> None:
        self.released = True


@pytest.fixture
def held(monkeypatch: pytest.MonkeyPatch) -> list[tuple[str | None, dict[str, Any]]]:
    """Every registry request the service makes; each gets a fresh scripted engine."""
    asked: list[tuple[str | None, dict[str, Any]]] = []

    def hold(model: str | None, settings: dict[str, Any]) -> _Hold:
        asked.append((model, dict(settings)))
        return _Hold(ScriptedEngine(script=("Hello", " there")))

    monkeypatch.setattr(engine_service, "hold_engine", hold)
    return asked


def test_service_takes_a_config_or_a_model_and_settings(held: list[Any]) -> None:
    EngineService(model="m.gguf", n_seq_max=2)
    EngineService(EngineConfig(model="c.gguf", n_seq_max=3))
    assert held[0] == ("m.gguf", {"n_seq_max": 2})
    assert held[1][0] == "c.gguf" and held[1][1]["n_seq_max"] == 3
    with pytest.raises(errors.InvalidRequestError):
        EngineService(EngineConfig(model="c.gguf"), model="m.gguf")


def test_a_replica_decodes_on_the_cpus_ray_reserved(
    held: list[Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(reservation, "actor_threads", lambda: 3)
    EngineService(model="m.gguf")
    EngineService(EngineConfig(model="c.gguf"))
    EngineService(model="m.gguf", n_threads=1)  # a choice of the user's stands
    assert [settings["n_threads"] for _, settings in held] == [3, 3, 1]
    monkeypatch.setattr(reservation, "actor_threads", lambda: None)  # not in a Ray actor
    EngineService(model="m.gguf")
    assert "n_threads" not in held[-1][1]


def test_a_reservation_past_the_cores_gets_the_cores(monkeypatch: pytest.MonkeyPatch) -> None:
    # Eight CPUs reserved on a node whose process may use two cores (four hyperthreads).
    monkeypatch.setattr(reservation, "actor_cpus", lambda: 8)
    monkeypatch.setattr(reservation, "read_cpu_budget", lambda: CpuBudget(allowed=4, cores=2))
    assert reservation.actor_threads() == 2
    monkeypatch.setattr(reservation, "actor_cpus", lambda: 1)
    assert reservation.actor_threads() == 1
    monkeypatch.setattr(reservation, "actor_cpus", lambda: None)
    assert reservation.actor_threads() is None


def test_service_answers_as_the_engine(held: list[Any]) -> None:
    service = EngineService(model="m.gguf")
    request = ChatRequest(messages=[{"role": "user", "content": "Hi"}])
    assert service.info() == ScriptedEngine().info
    assert service.media_marker() is None
    assert service.chunks_long_texts() is False
    assert service.generate(request).text == "Hello there"
    assert service.detokenize(service.tokenize("ab")) == "ab"
    assert service.render_chat(request).endswith("assistant\n")

    async def run() -> tuple[str, list[str], list[list[float]]]:
        done = await service.agenerate(request)
        pieces = [chunk.text async for chunk in service.stream(request)]
        return done.text, pieces, await service.aembed(["a"])

    text, pieces, vectors = asyncio.run(run())
    assert text == "".join(pieces) == "Hello there"
    assert vectors == service.embed(["a"])
    with pytest.raises(errors.InvalidRequestError, match="cannot rerank"):
        service.rerank("q", ["d"])
    with pytest.raises(errors.InvalidRequestError, match="token pieces"):
        service.token_piece(1)


def test_health_fails_once_closed(held: list[Any]) -> None:
    service = EngineService(model="m.gguf")
    service.check_health()
    service.close()
    assert service.closed()
    with pytest.raises(errors.EngineClosedError):
        service.check_health()
    with pytest.raises(errors.EngineClosedError):
        service.info()
