"""A model fetched by ``hf://`` spec from a local fake Hub, loaded by llama.cpp: a split model
from the Hugging Face cache, chosen by tag, answers as the whole file does."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from llamacpp_integrations.engine import EngineConfig
from llamacpp_integrations.langchain import ChatLlamaCpp
from llamacpp_integrations.models import resolve_model_path
from tests.builders.fake_hub import FakeHub, FakeRepo, point_huggingface_hub_at, serve_fake_hub
from tests.builders.split_gguf import split_gguf

pytest.importorskip("huggingface_hub")


@pytest.fixture
def split_hub(
    smollm_path: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> Iterator[FakeHub]:
    """A repo holding SmolLM2 split in three parts, with a projector beside it."""
    parts = split_gguf(smollm_path, tmp_path, "SmolLM2-135M-Instruct-Q4_1", 3)
    files = {f"Q4_1/{part.name}": part.read_bytes() for part in parts}
    with serve_fake_hub(FakeHub({"acme/smol-GGUF": FakeRepo(files)})) as hub:
        point_huggingface_hub_at(hub, tmp_path / "hf-cache", monkeypatch)
        yield hub


def test_split_model_from_the_hub_loads_and_answers(split_hub: FakeHub, smollm_path: Path) -> None:
    spec = "hf://acme/smol-GGUF:q4_1"
    chat = ChatLlamaCpp(model=spec, temperature=0, max_tokens=12, n_seq_max=1)
    assert split_hub.requests == []  # building fetches nothing
    whole = ChatLlamaCpp(model=str(smollm_path), temperature=0, max_tokens=12, n_seq_max=1)
    try:
        answer = chat.invoke("Name a colour.").text
        config = EngineConfig(model=spec).resolved()
        assert config.model is not None and config.model.endswith("-00001-of-00003.gguf")
        assert "snapshots" in config.model  # the cache's names, so the parts sit side by side
        assert chat._get_engine().info.path == config.model
        assert answer and answer == whole.invoke("Name a colour.").text
    finally:
        for model in (chat, whole):
            loaded = model.binding.loaded()
            if loaded is not None:
                loaded.close()
    assert sorted(p.name for p in resolve_model_path(spec, download=False).parent.iterdir()) == [
        f"SmolLM2-135M-Instruct-Q4_1-0000{i}-of-00003.gguf" for i in (1, 2, 3)
    ]
