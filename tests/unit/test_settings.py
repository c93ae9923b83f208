"""The adapters' settings fields: made from ``EngineConfig`` and ``SamplingParams`` at run time,
and written out for type checkers in ``client/settings.py``, which must say the same."""

from __future__ import annotations

import ast
import inspect
from dataclasses import MISSING, fields
from typing import Any

import pytest

from llamacpp_integrations.client import settings
from llamacpp_integrations.client.settings import (
    ENGINE_SETTINGS,
    SAMPLING_SETTINGS,
    EngineBound,
    EngineSettings,
    SamplingSettings,
)
from llamacpp_integrations.engine import EngineConfig, SamplingParams


def _declared_for_type_checkers() -> dict[str, dict[str, ast.AnnAssign]]:
    tree = ast.parse(inspect.getsource(settings))
    classes: dict[str, dict[str, ast.AnnAssign]] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and ast.unparse(node.test) == "TYPE_CHECKING":
            for item in node.body:
                if isinstance(item, ast.ClassDef):
                    classes[item.name] = {
                        stmt.target.id: stmt
                        for stmt in item.body
                        if isinstance(stmt, ast.AnnAssign) and isinstance(stmt.target, ast.Name)
                    }
    return classes


def test_engine_settings_are_every_engine_config_field_but_model_and_template() -> None:
    # Besides them, only what every adapter has for its binding (keep_alive, and the
    # llama-server a remote adapter serves from).
    own = [name for name in EngineSettings.model_fields if name not in EngineBound.model_fields]
    assert own == list(ENGINE_SETTINGS)
    assert list(EngineBound.model_fields) == [
        "keep_alive",
        "base_url",
        "embeddings_url",
        "api_key",
        "allow_untested_build",
    ]
    assert set(ENGINE_SETTINGS) == {f.name for f in fields(EngineConfig)} - {
        "model",
        "chat_template",
    }
    assert all(EngineSettings.model_fields[name].default is None for name in ENGINE_SETTINGS)
    assert all(EngineSettings.model_fields[name].description for name in ENGINE_SETTINGS)


def test_sampling_settings_are_sampling_params_with_its_defaults() -> None:
    assert list(SamplingSettings.model_fields) == list(SAMPLING_SETTINGS)
    for field in fields(SamplingParams):
        assert SamplingSettings.model_fields[field.name].default == field.default


def test_the_type_checkers_view_matches() -> None:
    declared = _declared_for_type_checkers()
    engine = declared["EngineSettings"]
    assert list(engine) == list(ENGINE_SETTINGS)
    for name, stmt in engine.items():
        assert ast.unparse(stmt.annotation).endswith("| None"), name
        assert stmt.value is not None and ast.literal_eval(stmt.value) is None
    sampling = declared["SamplingSettings"]
    assert list(sampling) == list(SAMPLING_SETTINGS)
    defaults: dict[str, Any] = {
        f.name: f.default for f in fields(SamplingParams) if f.default is not MISSING
    }
    for name, stmt in sampling.items():
        assert stmt.value is not None and ast.literal_eval(stmt.value) == defaults[name], name


def test_new_engine_settings_reach_the_adapters() -> None:
    from llamacpp_integrations.engine import LoraAdapter
    from llamacpp_integrations.llama_index import LlamaCpp

    llm = LlamaCpp(
        model="smollm2-135m",
        type_k="q8_0",
        type_v="q8_0",
        rope_freq_scale=0.5,
        lora_adapters=[{"path": "a.gguf", "scale": 0.5}],
        tensor_split=[1.0, 1.0],
    )
    assert llm._engine_settings() == {
        "type_k": "q8_0",
        "type_v": "q8_0",
        "rope_freq_scale": 0.5,
        "lora_adapters": (LoraAdapter("a.gguf", 0.5),),
        "tensor_split": (1.0, 1.0),
    }
    with pytest.raises(ValueError, match="flash attention"):
        LlamaCpp(model="smollm2-135m", type_v="q4_0", flash_attention=False)
    with pytest.raises(ValueError, match="type_k"):
        LlamaCpp(model="smollm2-135m", type_k="q3")
