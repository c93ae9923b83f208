"""A model of Ollama's store, loaded where it lies and answering through ChatLlamaCpp and the
``chat`` command, with the options its manifest keeps (tests/builders/model_stores.py lays the
store out as Ollama does); ChatLlamaCpp's ``placement`` is the loaded engine's."""

from __future__ import annotations

import base64
import io
import os
from pathlib import Path
from typing import Any

import pytest
from langchain_core.messages import HumanMessage
from PIL import Image

from llamacpp_integrations.cli import main
from llamacpp_integrations.client import model_display_name
from llamacpp_integrations.langchain import ChatLlamaCpp
from tests.builders.model_stores import ollama_store


def test_chat_model_over_an_ollama_store(
    tmp_path: Path, smollm_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    root = tmp_path / "ollama"
    monkeypatch.setenv("OLLAMA_MODELS", str(root))
    # Ollama's params as `ollama create` writes them: its stop words, and greedy, short answers.
    params = {"stop": ["<|im_end|>", "."], "temperature": 0, "num_predict": 24, "num_ctx": 512}
    blob = ollama_store(root, smollm_path, params=params)
    with ChatLlamaCpp(model="ollama://smollm2:135m", n_seq_max=1) as llm:
        answer = llm.invoke("Name the capital of France in one sentence.")
        engine = llm.binding.loaded()
        assert engine is not None
        assert os.path.samefile(engine.info.path, blob)  # the blob itself, in place
        assert engine.info.n_ctx_per_seq == 512  # num_ctx
        assert model_display_name(engine.info.path) == "smollm2:135m"  # what serve calls it
        # Where the engine put it: doctor's facts, read from the engine's own placement.
        placement = engine.info.placement
        assert placement is not None and llm.placement is not None
        assert llm.placement["backend"] == "CPU" and llm.placement["layers_offloaded"] == 0
        assert llm.placement["n_layer"] == placement.n_layer
        assert llm.placement["kv_location"] == "host"
        assert llm.placement["kv_bytes"] == placement.kv_bytes
    text = str(answer.content)
    assert text.strip() and "." not in text  # stopped at the manifest's stop word
    assert answer.response_metadata["finish_reason"] == "stop"
    assert answer.usage_metadata is not None and answer.usage_metadata["output_tokens"] <= 24


def test_chat_command_over_an_ollama_store(
    tmp_path: Path,
    smollm_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    root = tmp_path / "ollama"
    monkeypatch.setenv("OLLAMA_MODELS", str(root))
    params = {"stop": ["<|im_end|>", "."], "temperature": 0, "num_predict": 24, "num_ctx": 512}
    ollama_store(root, smollm_path, params=params)
    questions = iter(["Name the capital of France in one sentence."])
    monkeypatch.setattr("builtins.input", lambda _prompt: next(questions, ""))
    assert main(["chat", "--model", "ollama://smollm2:135m"]) == 0
    answer = capsys.readouterr().out.split("\n")[1]  # after the greeting line
    assert answer.strip() and "." not in answer  # stopped at the manifest's stop word


def test_ollama_vision_model_uses_its_projector_blob(
    tmp_path: Path, smollm_path: Path, projector: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    root = tmp_path / "ollama"
    monkeypatch.setenv("OLLAMA_MODELS", str(root))
    # SmolLM2 with the tiny random projector as its manifest's projector layer.
    name = "registry.ollama.ai/library/vision/latest"
    params = {"temperature": 0, "num_predict": 4}
    ollama_store(root, smollm_path, name, projector=projector.read_bytes(), params=params)
    png = io.BytesIO()
    Image.new("RGB", (32, 32), "red").save(png, format="PNG")
    image = f"data:image/png;base64,{base64.b64encode(png.getvalue()).decode()}"
    with ChatLlamaCpp(model="ollama://vision", n_seq_max=1, n_ctx_per_seq=1024) as llm:
        assert llm.profile is not None and llm.profile["image_inputs"] is True  # before loading
        question: list[str | dict[str, Any]] = [
            {"type": "image_url", "image_url": {"url": image}},
            "What is this?",
        ]
        answer = llm.invoke([HumanMessage(content=question)])
        engine = llm.binding.loaded()
        assert engine is not None and engine.info.supports_images
        assert engine.info.mmproj is not None
        used = Path(engine.info.mmproj)  # the projector's blob, in place
        assert used.parent == (root / "blobs").resolve() and used.name.startswith("sha256-")
        assert used.read_bytes() == projector.read_bytes()
    assert answer.usage_metadata is not None and answer.usage_metadata["output_tokens"] <= 4
