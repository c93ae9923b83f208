"""Shared fixtures: the real test models, fetched by `make models` into .cache/models."""

from __future__ import annotations

import os
import re
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

ROOT = Path(__file__).resolve().parents[1]
os.environ.setdefault("LLAMACPP_INTEGRATIONS_MODELS", str(ROOT / ".cache" / "models"))

from llamacpp_integrations.engine import EngineConfig, InferenceEngine  # noqa: E402
from llamacpp_integrations.models import models_dir  # noqa: E402

if TYPE_CHECKING:
    from llamacpp_integrations.engine.engine import Engine
    from llamacpp_integrations.remote import RemoteEngine

SMOLLM = "SmolLM2-135M-Instruct.Q4_1.gguf"


def pytest_configure(config: pytest.Config) -> None:
    """Under pytest-xdist (`make test` runs two workers), give each worker its own share of
    the CPUs. The engine's default thread count is the CPUs a process may run on, so every
    engine, `serve` process and notebook kernel a worker starts runs on its share alone: two
    llama.cpp thread pools on the same cores would spin waiting for each other."""
    del config
    worker = os.environ.get("PYTEST_XDIST_WORKER", "")
    workers = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1"))
    if not worker.startswith("gw") or workers < 2 or not hasattr(os, "sched_setaffinity"):
        return
    cpus = sorted(os.sched_getaffinity(0))
    index = int(worker[2:])
    share = set(cpus[index % workers :: workers]) or {cpus[index % len(cpus)]}
    for thread in os.listdir("/proc/self/task"):  # threads started since inherit it from these
        os.sched_setaffinity(int(thread), share)


GEMMA = "gemma-3-270m-q4_k_m.gguf"


def _model_file(name: str) -> Path:
    path = models_dir() / name
    if not path.exists():
        pytest.fail(f"{path} is missing: run `make models` first")
    return path


@pytest.fixture(scope="session")
def smollm_path() -> Path:
    return _model_file(SMOLLM)


@pytest.fixture(scope="session")
def gemma_path() -> Path:
    return _model_file(GEMMA)


@pytest.fixture(scope="session")
def engine(smollm_path: Path) -> Iterator[Engine]:
    """One engine for the read-only tests: 8 sequences of 1024 tokens, each in a KV stream of
    its own, so that a request's greedy answer does not depend on what earlier tests left in
    the cache (the tests compare answers: a stream with its invoke, a repeat with the first)."""
    from llamacpp_integrations.engine.engine import Engine

    config = EngineConfig(model=str(smollm_path), n_seq_max=8, n_ctx_per_seq=1024, kv_unified=False)
    with Engine(config) as e:
        yield e


@pytest.fixture(scope="session")
def projector() -> Path:
    """A tiny random-weight image projector for SmolLM2 (width 576), in llava 1.5's layout:
    the one family that adds no special tokens of its own around an image (see the fixture)."""
    from tests.builders.tiny_projector import cached_tiny_projector

    return cached_tiny_projector("mlp", 576)


@pytest.fixture(scope="session")
def audio_projector() -> Path:
    """A tiny random-weight Ultravox audio projector for SmolLM2 (width 576): no marker text of
    its own around a clip, 375 embeddings per clip of up to 30 seconds."""
    from tests.builders.tiny_audio_projector import cached_tiny_audio_projector

    return cached_tiny_audio_projector(576)


# ---- the remote engine (llama-server), live or replayed from cassettes -----------------------
# See tests/live/remote_servers.py. A test takes ``any_engine`` to run on the local engine and on a
# RemoteEngine; the remote variant carries the ``vcr`` mark, so by default it replays its
# cassette, and runs against live servers under --disable-recording or a recording --record-mode.

from tests.live.remote_servers import (  # noqa: E402
    LLAMA_SERVER,
    RECORDED_EMBEDDINGS_URL,
    RECORDED_URL,
    llama_server,
    rewrite_hosts,
)

REMOTE = pytest.param("remote", marks=[pytest.mark.vcr, pytest.mark.remote], id="remote")
ENGINES = ["local", REMOTE]
_RECORDED_HOSTS: dict[str, str] = {}  # a live server's URL -> the URL its cassettes show


def remote_is_live(config: pytest.Config) -> bool:
    """Whether remote tests talk to real servers (live or recording), not to cassettes."""
    mode = config.getoption("--record-mode", default=None) or "none"
    return bool(config.getoption("--disable-recording", default=False)) or mode != "none"


def _normalise_request(request: Any) -> Any:
    return rewrite_hosts(request, _RECORDED_HOSTS)


# Tool call ids are random (``call_`` + 24 hex digits): a prompt that sends a call back differs
# in them from run to run, and only in them.
_CALL_ID = re.compile(rb"call_[0-9a-f]{24}")


def _same_body(recorded: Any, incoming: Any) -> None:
    def normalised(request: Any) -> bytes:
        body = request.body or b""
        body = body.encode() if isinstance(body, str) else body
        return _CALL_ID.sub(b"call_ID", body)

    if normalised(recorded) != normalised(incoming):
        raise AssertionError("the bodies differ")


def pytest_recording_configure(config: pytest.Config, vcr: Any) -> None:
    vcr.register_matcher("body_without_call_ids", _same_body)


@pytest.fixture(scope="module")
def vcr_config() -> dict[str, Any]:
    """Cassettes match on method, path and body (never host or port); keys are not kept."""
    return {
        "match_on": ["method", "path", "body_without_call_ids"],
        "before_record_request": _normalise_request,
        "filter_headers": ["authorization"],
        "decode_compressed_response": True,
    }


@pytest.fixture(scope="module")
def vcr_cassette_dir(request: pytest.FixtureRequest) -> str:
    """tests/cassettes/<suite>/<module>/: module names repeat across suites (unit and
    integration both have a test_logprobs.py), so the suite keeps their cassettes apart."""
    path = request.node.path
    return str(ROOT / "tests" / "cassettes" / path.parent.name / path.stem)


@pytest.fixture(scope="module")
def llamacpp_cassette_dir(request: pytest.FixtureRequest) -> Path:
    """The llamacpp cassettes (llamacpp_integrations.testing) go beside the HTTP ones."""
    path = request.node.path
    return ROOT / "tests" / "cassettes" / path.parent.name / path.stem


@pytest.fixture(scope="session")
def remote_urls(
    request: pytest.FixtureRequest, smollm_path: Path, projector: Path
) -> Iterator[tuple[str, str]]:
    """A generation server (4 slots of 1024 tokens, with the tiny projector) and an embeddings
    server (mean pooling; two slots, where requests sent together would get wrong vectors, so
    the tests see the engine keep its own apart), or the recorded URLs when the cassettes
    answer."""
    if not remote_is_live(request.config):
        yield RECORDED_URL, RECORDED_EMBEDDINGS_URL
        return
    if not LLAMA_SERVER.exists():
        pytest.skip(f"no llama-server at {LLAMA_SERVER} (make llama-server)")
    generation_args = ["--metrics", "--mmproj", str(projector)]
    embedding_args = ["--embeddings", "--pooling", "mean"]
    with (
        llama_server(smollm_path, slots=4, n_ctx_per_slot=1024, args=generation_args) as generation,
        llama_server(smollm_path, slots=2, n_ctx_per_slot=512, args=embedding_args) as embeddings,
    ):
        _RECORDED_HOSTS.update({generation: RECORDED_URL, embeddings: RECORDED_EMBEDDINGS_URL})
        yield generation, embeddings


@pytest.fixture
def remote_engine(remote_urls: tuple[str, str]) -> Iterator[RemoteEngine]:
    """A fresh RemoteEngine per test, so each cassette holds the whole exchange."""
    from llamacpp_integrations.remote import RemoteEngine

    generation, embeddings = remote_urls
    with RemoteEngine(generation, embeddings_url=embeddings) as remote:
        yield remote


@pytest.fixture
def live_remote(request: pytest.FixtureRequest) -> None:
    """Skip a remote test that cannot be replayed (cancellation, timeouts) unless live."""
    if not remote_is_live(request.config):
        pytest.skip("cancellation and timeouts are not replayable: make test-live runs them")


@pytest.fixture(params=ENGINES)
def any_engine(request: pytest.FixtureRequest) -> InferenceEngine:
    """The local engine (8 sequences of 1024 tokens) and a RemoteEngine on a llama-server."""
    name = "engine" if request.param == "local" else "remote_engine"
    engine: InferenceEngine = request.getfixturevalue(name)
    return engine
