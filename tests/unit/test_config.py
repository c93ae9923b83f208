"""EngineConfig validation and derived settings."""

from __future__ import annotations

import pytest

from llamacpp_integrations.engine import EngineConfig
from llamacpp_integrations.errors import InvalidRequestError


def test_flash_attention_defaults_off_on_cpu_and_to_llama_cpp_with_a_gpu() -> None:
    assert EngineConfig().flash_attention_for(0) is False
    assert EngineConfig().flash_attention_for(-1) is None
    assert EngineConfig(flash_attention=True).flash_attention_for(0) is True


def test_bad_values_are_named() -> None:
    with pytest.raises(InvalidRequestError, match="n_seq_max"):
        EngineConfig(n_seq_max=0)
    with pytest.raises(InvalidRequestError, match="n_batch"):
        EngineConfig(n_batch=1)
    with pytest.raises(InvalidRequestError, match="max_queued"):
        EngineConfig(max_queued=0)  # no request could ever be queued
    with pytest.raises(InvalidRequestError, match="n_gpu_layers"):
        EngineConfig(n_gpu_layers=-2)
    with pytest.raises(InvalidRequestError, match="kv_memory_budget"):
        EngineConfig(kv_memory_budget=-1)


def test_configs_are_hashable_keys() -> None:
    assert {EngineConfig(model="a"): 1}[EngineConfig(model="a")] == 1
    assert EngineConfig(model="a") != EngineConfig(model="a", kv_unified=True)
