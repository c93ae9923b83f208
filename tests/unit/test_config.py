"""EngineConfig validation and derived settings."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from llamacpp_integrations.engine import EngineConfig, LoraAdapter
from llamacpp_integrations.errors import InvalidRequestError


def test_flash_attention_defaults_off_on_cpu_and_to_llama_cpp_with_a_gpu() -> None:
    assert EngineConfig().flash_attention_for(0) is False
    assert EngineConfig().flash_attention_for(-1) is None
    assert EngineConfig(flash_attention=True).flash_attention_for(0) is True
    # A unified cache on the CPU: on, so that tokens skip other sequences' cells.
    assert EngineConfig(kv_unified=True).flash_attention_for(0) is True
    assert EngineConfig(kv_unified=True, flash_attention=False).flash_attention_for(0) is False


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


def test_cache_types_and_choices_are_checked_by_name() -> None:
    assert EngineConfig(type_k="q8_0", type_v="q4_0").type_k == "q8_0"
    with pytest.raises(InvalidRequestError, match=r"type_k must be one of .*'q8_0'.*got 'q3'"):
        EngineConfig(type_k="q3")  # type: ignore[arg-type]
    with pytest.raises(InvalidRequestError, match="split_mode must be one of"):
        EngineConfig(split_mode="columns")  # type: ignore[arg-type]
    with pytest.raises(InvalidRequestError, match="rope_scaling_type must be one of"):
        EngineConfig(rope_scaling_type="ntk")  # type: ignore[arg-type]
    with pytest.raises(InvalidRequestError, match="rope_freq_scale"):
        EngineConfig(rope_freq_scale=0.0)


def test_a_quantized_v_cache_turns_flash_attention_on() -> None:
    assert EngineConfig(type_v="q8_0").flash_attention_for(0) is True
    assert EngineConfig(type_v="q8_0").flash_attention_for(-1) is True
    assert EngineConfig(type_k="q4_0").flash_attention_for(0) is False  # a quantized K needs none
    with pytest.raises(InvalidRequestError, match=r"type_v='q4_0'.*flash attention"):
        EngineConfig(type_v="q4_0", flash_attention=False)


def test_lora_adapters_are_normalized_and_hashable() -> None:
    config = EngineConfig(lora_adapters=["a.gguf", ("b.gguf", 0.5), {"path": "c.gguf"}])  # type: ignore[list-item]
    assert config.lora_adapters == (
        LoraAdapter("a.gguf", 1.0),
        LoraAdapter("b.gguf", 0.5),
        LoraAdapter("c.gguf", 1.0),
    )
    assert hash(config) == hash(EngineConfig(lora_adapters=config.lora_adapters))
    with pytest.raises(InvalidRequestError, match="lora_adapters"):
        EngineConfig(lora_adapters="a.gguf")  # type: ignore[arg-type]
    with pytest.raises(InvalidRequestError, match="scale must be a number"):
        EngineConfig(lora_adapters=[("a.gguf", "high")])  # type: ignore[list-item]


def test_gpu_split_settings_identify_the_weights() -> None:
    base = EngineConfig(model="/m.gguf")
    split = EngineConfig(model="/m.gguf", tensor_split=[3, 1], split_mode="row", main_gpu=1)  # type: ignore[arg-type]
    assert split.tensor_split == (3.0, 1.0)
    assert split.weights != base.weights
    assert EngineConfig(model="/m.gguf", use_mlock=True).weights != base.weights
    # Serving settings (cache types, RoPE, adapters) share the loaded weights.
    served = EngineConfig(
        model="/m.gguf",
        type_k="q8_0",
        rope_freq_base=20000.0,
        lora_adapters=["a"],  # type: ignore[list-item]
    )
    assert served.weights == base.weights
    with pytest.raises(InvalidRequestError, match="tensor_split"):
        EngineConfig(tensor_split=(0.0, 0.0))


def test_draft_speculation_needs_a_draft_model_and_only_it_takes_one() -> None:
    with pytest.raises(InvalidRequestError, match="speculative_draft_model"):
        EngineConfig(speculative="draft")
    for mode in (None, "ngram"):
        with pytest.raises(InvalidRequestError, match='only used with speculative="draft"'):
            EngineConfig(speculative=mode, speculative_draft_model="draft.gguf")  # type: ignore[arg-type]
    with pytest.raises(InvalidRequestError, match="speculative must be one of"):
        EngineConfig(speculative="model")  # type: ignore[arg-type]
    config = EngineConfig(speculative="draft", speculative_draft_model="draft.gguf")
    assert hash(config) != hash(EngineConfig(speculative="draft", speculative_draft_model="b"))


def test_the_draft_model_is_resolved_as_the_model_is(tmp_path: Path) -> None:
    model, draft = tmp_path / "target.gguf", tmp_path / "draft.gguf"
    model.write_bytes(b"GGUF")
    draft.write_bytes(b"GGUF")
    config = EngineConfig(
        model=str(model), speculative="draft", speculative_draft_model=str(draft)
    ).resolved()
    assert config.speculative_draft_model == str(draft.resolve())


def test_the_unified_cache_settings_are_checked() -> None:
    with pytest.raises(InvalidRequestError, match="deterministic"):
        EngineConfig(deterministic=True, kv_unified=True)
    with pytest.raises(InvalidRequestError, match="kv_unified=True"):
        EngineConfig(kv_cells=4096)
    with pytest.raises(InvalidRequestError, match="kv_cells"):
        EngineConfig(kv_unified=True, kv_cells=0)
    with pytest.raises(InvalidRequestError, match="prefill_per_step"):
        EngineConfig(prefill_per_step=0)
    assert EngineConfig(prefill_per_step=10).prefill_step_tokens == 64  # at least a block
    assert EngineConfig().prefill_step_tokens == 512  # n_batch: no bound


@pytest.mark.skipif(not hasattr(os, "sched_setaffinity"), reason="no CPU affinity here")
def test_default_threads_are_the_cpus_this_process_may_run_on() -> None:
    """A container's or taskset's share, not the host's count: a thread pool larger than the CPUs
    it may use spins waiting for threads that cannot run. Checked in a child process pinned to
    one CPU, so this process keeps its own affinity."""
    script = (
        "import os; from llamacpp_integrations.engine import EngineConfig; "
        "os.sched_setaffinity(0, {min(os.sched_getaffinity(0))}); "
        "print(EngineConfig().threads, EngineConfig(n_threads=3).threads)"
    )
    result = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, check=True
    )
    assert result.stdout.split() == ["1", "3"]
