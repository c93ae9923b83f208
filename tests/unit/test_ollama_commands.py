"""An ``ollama://`` model through the commands: ``serve``, ``chat`` and ``doctor`` take what its
manifest keeps (the projector as ``mmproj``, ``num_ctx``; ``stop``, ``temperature``,
``num_predict``...) as the model's defaults, and the user's flags and a request's fields win.
Ollama's store is laid out in a temporary folder as Ollama lays it out, holding the test
model's file; a scripted engine stands for the loaded one behind the server."""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any

from starlette.testclient import TestClient

from llamacpp_integrations.cli import build_parser, serve_call_defaults, serve_config
from llamacpp_integrations.cli_stores import command_call_options, store_engine_defaults
from llamacpp_integrations.engine import EngineConfig
from llamacpp_integrations.server import create_app
from llamacpp_integrations.testing import ScriptedEngine
from tests.builders.model_stores import ollama_store
from tests.unit.test_model_stores import PARAMS, stores  # noqa: F401  (the fixture)

SPEC = "ollama://smollm2:135m"
PROJECTOR = "sha256-" + hashlib.sha256(b"projector").hexdigest()


def _serve(*argv: str) -> tuple[EngineConfig, dict[str, Any]]:
    args = build_parser().parse_args(["serve", *argv])
    return serve_config(args), serve_call_defaults(args)


def test_serve_takes_the_manifest_under_the_flags(
    stores: Path,  # noqa: F811
    smollm_path: Path,
) -> None:
    ollama_store(stores / "ollama", smollm_path, params=PARAMS, projector=b"projector")
    config, calls = _serve(SPEC)
    assert config.mmproj is not None and config.mmproj.endswith(PROJECTOR)
    assert config.n_ctx_per_seq == 2048
    assert calls == {
        "stop": ["<|im_start|>", "<|im_end|>"], "temperature": 0.2, "top_k": 20,
        "penalty_last_n": 32, "max_tokens": 64,
    }  # fmt: skip
    # A flag wins over the manifest.
    config, _ = _serve(SPEC, "--ctx", "512", "--mmproj", "/elsewhere/mmproj.gguf")
    assert config.n_ctx_per_seq == 512
    assert config.mmproj == "/elsewhere/mmproj.gguf"
    # Several models: one manifest's settings are not the others'.
    config, calls = _serve(SPEC, str(smollm_path))
    assert config.mmproj is None and calls == {}
    # Another spec has no store, so nothing changes.
    config, calls = _serve(str(smollm_path))
    assert config.mmproj is None and calls == {}


def test_served_requests_take_the_manifest_parameters_they_leave_out(
    stores: Path,  # noqa: F811
    smollm_path: Path,
) -> None:
    ollama_store(stores / "ollama", smollm_path, params=PARAMS)
    _, calls = _serve(SPEC)
    engine = ScriptedEngine()
    with TestClient(create_app(engine, call_defaults=calls)) as client:
        chat = {"model": "m", "messages": [{"role": "user", "content": "hi"}]}
        assert client.post("/v1/chat/completions", json=chat).status_code == 200
        own = {**chat, "temperature": 0.9, "max_tokens": 5, "stop": ["x"]}
        assert client.post("/v1/chat/completions", json=own).status_code == 200
        completion = {"model": "m", "prompt": "hi"}
        assert client.post("/v1/completions", json=completion).status_code == 200
        message = {**chat, "max_tokens": 7}
        assert client.post("/v1/messages", json=message).status_code == 200
        response = {"model": "m", "input": "hi"}
        assert client.post("/v1/responses", json=response).status_code == 200
    plain, mine, completed, anthropic, responded = engine.requests
    for request in (plain, completed, responded):
        assert request.sampling.temperature == 0.2 and request.sampling.top_k == 20
        assert request.sampling.penalty_last_n == 32
        assert list(request.stop) == ["<|im_start|>", "<|im_end|>"]
    assert plain.max_tokens == 64  # num_predict
    assert completed.max_tokens == 16  # the legacy completions API's own default, as OpenAI's
    # What a request sets is its own.
    assert mine.sampling.temperature == 0.9 and mine.max_tokens == 5 and list(mine.stop) == ["x"]
    assert anthropic.max_tokens == 7 and anthropic.sampling.temperature == 0.2


def test_chat_and_doctor_take_the_manifest(
    stores: Path,  # noqa: F811
    smollm_path: Path,
) -> None:
    ollama_store(stores / "ollama", smollm_path, params=PARAMS, projector=b"projector")
    # Engine settings: the command's own choices go over the manifest's, flags over both.
    chat = store_engine_defaults(SPEC, {"n_seq_max": 1})
    assert chat["n_seq_max"] == 1 and chat["n_ctx_per_seq"] == 2048
    assert chat["mmproj"].endswith(PROJECTOR)
    doctor = store_engine_defaults(SPEC, {"n_seq_max": 1, "n_ctx_per_seq": 4096})
    assert doctor["n_ctx_per_seq"] == 4096 and doctor["mmproj"].endswith(PROJECTOR)
    # Call options: the flags over the manifest over the command's fallback length.
    options = command_call_options(SPEC, {"max_tokens": 200}, {}, owner="chat")
    assert options.max_tokens == 64 and options.stop == ("<|im_start|>", "<|im_end|>")
    assert options.sampling.temperature == 0.2
    given = command_call_options(SPEC, {"max_tokens": 200}, {"max_tokens": 9}, owner="chat")
    assert given.max_tokens == 9
    plain = command_call_options(str(smollm_path), {"max_tokens": 200}, {}, owner="chat")
    assert plain.max_tokens == 200 and plain.stop == ()
    assert store_engine_defaults(str(smollm_path), {"n_seq_max": 1}) == {"n_seq_max": 1}
