"""What the adapters report of their model beside LangChain's profile and LlamaIndex's metadata
window: where the engine put it (``ChatLlamaCpp.placement``, ``metadata.placement``: doctor's
machine facts, from ``ModelInfo.placement``) and whether requests may carry images (an
``ollama://`` vision model's projector counts), read without loading anything. Scripted
engines stand for loaded ones; Ollama's store is laid out in a temporary folder."""

from __future__ import annotations

import warnings
from dataclasses import replace
from pathlib import Path

import pytest

from llamacpp_integrations.client.model_facts import placement_facts
from llamacpp_integrations.engine import EngineConfig
from llamacpp_integrations.engine.machine import placement_of
from llamacpp_integrations.engine.sizing import ContextChoice, OffloadChoice
from llamacpp_integrations.langchain import ChatLlamaCpp
from llamacpp_integrations.llama_index import LlamaCpp
from llamacpp_integrations.testing import SCRIPTED_INFO, ScriptedEngine
from tests.builders.model_stores import ollama_store
from tests.unit.test_model_stores import stores  # noqa: F401  (the fixture)

GiB = 1024**3
PLACEMENT = placement_of(
    EngineConfig(flash_attention=True, n_threads=4),
    n_layer=32,
    offload=OffloadChoice(-1, "set explicitly"),
    gpu_offload=True,
    kv=ContextChoice(8192, 1, GiB // 8192, None, "set explicitly", False, 8192),
    gpu_backend="CUDA",
)
PLACED = replace(SCRIPTED_INFO, placement=PLACEMENT)


def test_facts_are_the_engines_placement() -> None:
    facts = placement_facts(ScriptedEngine(info=PLACED))
    assert facts == {
        "runs": "local", "server": None, "backend": "CUDA", "n_layer": 32, "n_gpu_layers": -1,
        "layers_offloaded": 32, "offload_reason": "set explicitly", "kv_location": "device",
        "kv_bytes": GiB, "kv_cells": 8192, "type_k": "f16", "type_v": "f16",
        "flash_attention": True, "n_threads": 4,
    }  # fmt: skip


def test_a_cpu_build_says_cpu() -> None:
    on_cpu = placement_of(
        EngineConfig(),
        n_layer=32,
        offload=OffloadChoice(-1, "default"),
        gpu_offload=False,
        kv=ContextChoice(4096, 1, 1024, None, "set explicitly", False, 4096),
        gpu_backend=None,
    )
    facts = placement_facts(ScriptedEngine(info=replace(SCRIPTED_INFO, placement=on_cpu)))
    assert facts is not None and facts["backend"] == "CPU" and facts["layers_offloaded"] == 0
    assert facts["kv_location"] == "host"
    assert facts["n_threads"] == EngineConfig().threads >= 1  # the default: this machine's cores


def test_no_engine_or_no_placement_is_none_and_a_server_says_where() -> None:
    assert placement_facts(None) is None  # nothing loaded: nothing decided yet
    assert placement_facts(ScriptedEngine()) is None  # an engine that reports none
    remote = ScriptedEngine(info=replace(SCRIPTED_INFO, path="http://127.0.0.1:8080"))
    facts = placement_facts(remote)
    assert facts is not None and facts["runs"] == "remote"
    assert facts["server"] == "http://127.0.0.1:8080"
    # llama-server's /props does not tell its offload, KV cache or attention kernel.
    assert facts["backend"] is None and facts["layers_offloaded"] is None
    assert facts["kv_bytes"] is None and facts["flash_attention"] is None
    assert facts["n_threads"] is None


def test_langchain_reports_placement_beside_a_profile_langchain_knows() -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # langchain-core warns on profile keys it does not know
        llm = ChatLlamaCpp(engine=ScriptedEngine(info=PLACED))
    assert llm.placement == placement_facts(llm.engine)
    assert llm.profile is not None and "placement" not in llm.profile
    assert llm.profile["image_inputs"] is False


def test_llama_index_metadata_reports_placement() -> None:
    llm = LlamaCpp(engine=ScriptedEngine(info=PLACED))
    metadata = llm.metadata
    assert metadata.placement == placement_facts(llm.engine)
    assert metadata.image_inputs is False
    assert metadata.context_window > 0  # LlamaIndex's own fields as before


def test_unloaded_adapters_report_no_placement_and_load_nothing(smollm_path: Path) -> None:
    chat = ChatLlamaCpp(model=str(smollm_path))
    assert chat.placement is None and chat.binding.loaded() is None
    index = LlamaCpp(model=str(smollm_path))
    assert index.metadata.placement is None and index.binding.loaded() is None
    assert index.metadata.image_inputs is False


def test_ollama_vision_model_reports_image_input(
    stores: Path,  # noqa: F811
    smollm_path: Path,
) -> None:
    ollama_store(stores / "ollama", smollm_path, projector=b"projector")
    ollama_store(stores / "ollama", smollm_path, "registry.ollama.ai/library/text/latest")
    chat = ChatLlamaCpp(model="ollama://smollm2:135m")
    assert chat.profile is not None and chat.profile["image_inputs"] is True
    assert LlamaCpp(model="ollama://smollm2:135m").metadata.image_inputs is True
    # The user's mmproj=None (a text-only engine) wins over the manifest's projector.
    text_only = ChatLlamaCpp(model="ollama://smollm2:135m", mmproj=None)
    assert text_only.profile is not None and text_only.profile["image_inputs"] is False
    plain = ChatLlamaCpp(model="ollama://text")
    assert plain.profile is not None and plain.profile["image_inputs"] is False
    assert LlamaCpp(model="ollama://text").metadata.image_inputs is False
    assert chat.binding.loaded() is None  # nothing loaded to say so


@pytest.mark.parametrize("mmproj", ["/models/mmproj.gguf", "auto"])
def test_a_set_projector_is_image_input(smollm_path: Path, mmproj: str) -> None:
    llm = LlamaCpp(model=str(smollm_path), mmproj=mmproj)
    # "auto" with no projector beside the file: not known until the engine loads.
    assert llm.metadata.image_inputs is (True if mmproj != "auto" else None)
