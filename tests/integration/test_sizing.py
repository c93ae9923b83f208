"""Sized defaults on the real engine: the context per sequence comes from the GGUF header and
the KV memory budget, is logged, and is what requests get; a CPU build offloads nothing."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from llamacpp_integrations.engine import CompletionRequest, EngineConfig
from llamacpp_integrations.engine.engine import Engine
from llamacpp_integrations.engine.sizing import host_available_memory
from llamacpp_integrations.errors import ContextOverflowError

from .helpers import GREEDY

SMOLLM_KV_BYTES_PER_TOKEN = 23040  # 30 layers x 3 KV heads x (64 + 64) dims x 2 bytes


def short_completion(prompt: list[int]) -> CompletionRequest:
    return CompletionRequest(prompt=prompt, add_bos=False, max_tokens=4, sampling=GREEDY)


def test_context_shrinks_to_the_kv_budget_and_is_logged(
    smollm_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    budget = 8 * 4096 * SMOLLM_KV_BYTES_PER_TOKEN  # eight streams of 4096 tokens
    caplog.set_level(logging.INFO, logger="llamacpp_integrations.engine")
    config = EngineConfig(model=str(smollm_path), kv_memory_budget=budget, kv_unified=False)
    with Engine(config) as engine:
        assert engine.info.n_ctx_per_seq == 4096
        assert "reduced" in engine.info.context_reason
        assert engine.info.n_gpu_layers == 0  # a CPU build of llama.cpp offloads nothing
        # Past the old 2048 default and within the chosen context: accepted.
        prompt = engine.tokenize("one two three " * 700, add_special=True)
        assert 2048 < len(prompt) < 4096 - 8
        done = engine.generate(short_completion(prompt))
        assert done.usage.prompt_tokens == len(prompt)
        with pytest.raises(ContextOverflowError):
            engine.generate(short_completion(prompt * 2))
    logged = " ".join(record.getMessage() for record in caplog.records)
    assert "context 4096 tokens x 8 sequences" in logged
    # A unified cache: an eighth of that budget holds one cache of 4096 cells for everyone.
    caplog.clear()
    unified = EngineConfig(model=str(smollm_path), kv_memory_budget=budget // 8, kv_unified=True)
    with Engine(unified) as engine:
        assert engine.info.n_ctx_per_seq == 4096 == engine.context_choice.n_cells
        assert engine.generate(short_completion(prompt)).usage.prompt_tokens == len(prompt)
    logged = " ".join(record.getMessage() for record in caplog.records)
    assert "one KV cache of 4096 cells (90 MiB) shared by 8 sequences" in logged


@pytest.mark.parametrize(("model", "trained"), [("smollm", 8192), ("gemma", 32768)])
def test_default_context_is_the_training_context_where_memory_allows(
    model: str, trained: int, smollm_path: Path, gemma_path: Path
) -> None:
    path = smollm_path if model == "smollm" else gemma_path
    available = host_available_memory()
    if available is None or available < 12 * 1024**3:
        pytest.skip("needs 12 GiB of free memory for eight full-length sequences")
    with Engine(EngineConfig(model=str(path))) as engine:
        assert engine.info.n_ctx_per_seq == trained
        assert engine.info.context_reason == "the training context, within the memory budget"
        prompt = engine.tokenize("one two three " * 700, add_special=True)
        done = engine.generate(short_completion(prompt))
        assert done.usage.prompt_tokens == len(prompt)


def test_an_explicit_context_wins(smollm_path: Path) -> None:
    with Engine(EngineConfig(model=str(smollm_path), n_ctx_per_seq=1024, n_seq_max=2)) as engine:
        assert engine.info.n_ctx_per_seq == 1024
        assert engine.info.context_reason == "set explicitly"
