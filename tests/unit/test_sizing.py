"""Default context and offload sizing: arithmetic on real and synthetic GGUF headers."""

from __future__ import annotations

from pathlib import Path

import pytest

from llamacpp_integrations.engine import EngineConfig
from llamacpp_integrations.engine.sizing import (
    CONTEXT_STEP,
    MIN_CONTEXT,
    UNKNOWN_TRAINING_CONTEXT,
    KVShape,
    cache_type_bytes,
    choose_context,
    choose_offload,
    context_for,
    kv_budget,
    stream_start_cells,
)
from llamacpp_integrations.errors import InvalidRequestError
from llamacpp_integrations.models import read_gguf_info
from tests.builders.model_headers import LLAMA_8B, LLAMA_70B, write_header

GiB = 1024**3
KIB = 1024


def shape_of(path: Path) -> KVShape:
    shape = KVShape.from_gguf(read_gguf_info(path))
    assert shape is not None
    return shape


def test_kv_bytes_per_cell_of_the_test_models(smollm_path: Path, gemma_path: Path) -> None:
    # SmolLM2-135M: 30 layers x 3 KV heads x (64 + 64) dims x 2 bytes.
    assert shape_of(smollm_path).kv_bytes_per_cell() == 30 * 3 * 128 * 2 == 23040
    # Gemma 3 270M: 18 layers x 1 KV head x (256 + 256) (its key_length and value_length).
    assert shape_of(gemma_path).kv_bytes_per_cell() == 18 * 1 * 512 * 2 == 18432
    # q8_0 stores 32 values in 34 bytes, q4_0 in 18.
    assert shape_of(smollm_path).kv_bytes_per_cell("q8_0", "q8_0") == 30 * 3 * 128 * 34 // 32
    assert shape_of(smollm_path).kv_bytes_per_cell("q4_0", "q4_0") == 30 * 3 * 128 * 18 // 32


def test_kv_bytes_per_cell_of_8b_and_70b_shapes(tmp_path: Path) -> None:
    assert shape_of(write_header(tmp_path / "8b.gguf", **LLAMA_8B)).kv_bytes_per_cell() == 128 * KIB
    assert (
        shape_of(write_header(tmp_path / "70b.gguf", **LLAMA_70B)).kv_bytes_per_cell() == 320 * KIB
    )


def test_per_layer_heads_and_explicit_head_sizes(tmp_path: Path) -> None:
    path = write_header(
        tmp_path / "mixed.gguf",
        block_count=3,
        embedding_length=64,
        head_count=[4, 4, 4],
        head_count_kv=[2, 0, 1],  # a layer without attention holds no KV
        key_length=32,
        value_length=16,
    )
    shape = shape_of(path)
    assert shape.head_counts_kv == (2, 0, 1)
    assert shape.kv_bytes_per_cell() == 3 * (32 + 16) * 2


def test_headers_without_attention_keys_give_no_shape(tmp_path: Path) -> None:
    path = write_header(tmp_path / "none.gguf", block_count=2, embedding_length=64, head_count=0)
    assert KVShape.from_gguf(read_gguf_info(path)) is None


def test_cache_types() -> None:
    assert cache_type_bytes("f16") == 2
    assert cache_type_bytes("Q8_0") == 34 / 32
    with pytest.raises(InvalidRequestError, match="q4_0"):
        cache_type_bytes("q3_k")


SHAPE = KVShape(n_ctx_train=8192, head_counts_kv=(3,) * 30, head_dim_k=64, head_dim_v=64)


def test_context_is_the_training_context_when_it_fits() -> None:
    choice = choose_context(SHAPE, requested=None, n_seq_max=8, budget_bytes=2 * GiB)
    assert choice.n_ctx_per_seq == 8192
    assert choice.kv_bytes == 8192 * 8 * 23040
    assert "training context" in choice.describe()


def test_streams_start_with_the_training_context_spread_over_the_sequences() -> None:
    choice = choose_context(SHAPE, requested=None, n_seq_max=8, budget_bytes=2 * GiB)
    # 8 x 1024 cells at first: the training context once, as llama-server's one cache holds.
    assert (choice.start_cells, choice.first_stream_cells) == (1024, 1024)
    assert "start at 1024 cells each (180 MiB) and grow as needed, up to 1440 MiB" in (
        choice.describe()
    )
    # Never under 512 cells, in whole steps, never above the context.
    assert stream_start_cells(8192, 32, 8192, None) == 512
    assert stream_start_cells(8192, 8, 8192, 700) == 768
    assert stream_start_cells(1024, 2, 8192, None) == 1024
    # 0: the whole context from the start, as before streams grew.
    whole = choose_context(SHAPE, requested=None, n_seq_max=8, budget_bytes=GiB, stream_start=0)
    assert whole.first_stream_cells == whole.n_ctx_per_seq
    assert "grow" not in whole.describe()


def test_context_is_reduced_to_fit_the_budget_in_whole_steps() -> None:
    budget = 100 * 1024**2
    choice = choose_context(SHAPE, requested=None, n_seq_max=8, budget_bytes=budget)
    assert choice.n_ctx_per_seq % CONTEXT_STEP == 0
    assert choice.kv_bytes is not None and choice.kv_bytes <= budget
    assert (choice.n_ctx_per_seq + CONTEXT_STEP) * 8 * 23040 > budget
    assert "reduced" in choice.reason


def test_context_never_falls_below_the_floor() -> None:
    choice = choose_context(SHAPE, requested=None, n_seq_max=8, budget_bytes=1)
    assert choice.n_ctx_per_seq == MIN_CONTEXT
    small = KVShape(n_ctx_train=256, head_counts_kv=(1,), head_dim_k=8, head_dim_v=8)
    assert choose_context(small, requested=None, n_seq_max=1, budget_bytes=1).n_ctx_per_seq == 256


def test_an_explicit_context_always_wins() -> None:
    assert choose_context(SHAPE, requested=300, n_seq_max=8, budget_bytes=1).n_ctx_per_seq == 300
    # 0: the training context, whatever the budget says.
    assert choose_context(SHAPE, requested=0, n_seq_max=8, budget_bytes=1).n_ctx_per_seq == 8192
    with pytest.raises(InvalidRequestError):
        choose_context(SHAPE, requested=-1, n_seq_max=8, budget_bytes=1)


def test_unknown_memory_or_header() -> None:
    assert (
        choose_context(SHAPE, requested=None, n_seq_max=8, budget_bytes=None).n_ctx_per_seq == 8192
    )
    choice = choose_context(None, requested=None, n_seq_max=8, budget_bytes=GiB)
    assert choice.n_ctx_per_seq == UNKNOWN_TRAINING_CONTEXT


def test_the_default_budget_is_half_of_what_the_weights_leave() -> None:
    assert kv_budget(10 * GiB, 4 * GiB) == 3 * GiB
    assert kv_budget(2 * GiB, 4 * GiB) == 0
    assert kv_budget(None, 0) is None


@pytest.mark.parametrize(
    ("free_gib", "eight_sequences", "one_sequence"),
    [(8, 1536, 13824), (16, 5632, 46592), (64, 30208, 131072)],
)
def test_an_8b_model_at_8_16_64_gib(
    tmp_path: Path, free_gib: int, eight_sequences: int, one_sequence: int
) -> None:
    """Llama-3.1-8B-shaped (128 KiB per cell, trained on 131072) with 4.58 GiB of weights
    (Q4_K_M): half of what the weights leave, in steps of 256; split over the sequences'
    streams, or in one unified cache that every sequence may fill."""
    info = read_gguf_info(write_header(tmp_path / "8b.gguf", **LLAMA_8B))
    weights = int(4.58 * GiB)
    for n_seq_max, unified, expected in (
        (8, False, eight_sequences),
        (1, False, one_sequence),
        (8, True, one_sequence),
    ):
        config = EngineConfig(n_seq_max=n_seq_max, kv_unified=unified)
        choice = context_for(config, info, free_memory=free_gib * GiB, weights_there=weights)
        assert choice.n_ctx_per_seq == expected
        assert choice.n_cells == expected * (1 if unified else n_seq_max)
        assert choice.kv_bytes is not None
        assert choice.kv_bytes <= (free_gib * GiB - weights) // 2


def test_a_unified_cache_is_sized_once_for_all_sequences(tmp_path: Path) -> None:
    """Like llama-server's: the training context (within the budget) for all sequences, each
    allowed all of it; a set context per sequence gets room for every sequence's whole
    context; ``kv_cells`` wins, and caps a sequence's context."""
    info = read_gguf_info(write_header(tmp_path / "8b.gguf", **LLAMA_8B))
    roomy = {"free_memory": 1000 * GiB, "weights_there": 0}
    unified = context_for(EngineConfig(kv_unified=True), info, **roomy)
    assert (unified.unified, unified.n_cells, unified.n_ctx_per_seq) == (True, 131072, 131072)
    assert unified.kv_bytes == 131072 * 128 * 1024
    assert "one KV cache of 131072 cells" in unified.describe()
    per_seq = EngineConfig(kv_unified=True, n_seq_max=4, n_ctx_per_seq=1024)
    set_per_seq = context_for(per_seq, info, **roomy)
    assert (set_per_seq.n_cells, set_per_seq.n_ctx_per_seq) == (4096, 1024)
    sized = EngineConfig(kv_unified=True, kv_cells=2048, n_ctx_per_seq=4096)
    cells = context_for(sized, info, **roomy)
    assert (cells.n_cells, cells.n_ctx_per_seq) == (2048, 2048)
    split = context_for(EngineConfig(), info, **roomy)  # the default: a stream per sequence
    assert (split.unified, split.n_cells) == (False, 8 * 131072)


def test_kv_memory_budget_setting_wins_over_the_measured_memory(tmp_path: Path) -> None:
    info = read_gguf_info(write_header(tmp_path / "8b.gguf", **LLAMA_8B))
    config = EngineConfig(n_seq_max=1, kv_memory_budget=GiB)
    choice = context_for(config, info, free_memory=1000 * GiB, weights_there=0)
    assert choice.n_ctx_per_seq == 8192  # 1 GiB / 128 KiB


def test_a_quantized_cache_buys_a_longer_context(tmp_path: Path) -> None:
    info = read_gguf_info(write_header(tmp_path / "8b.gguf", **LLAMA_8B))
    budget = {"n_seq_max": 1, "kv_memory_budget": GiB}
    f16 = context_for(EngineConfig(**budget), info, free_memory=None, weights_there=0)
    q8 = context_for(
        EngineConfig(type_k="q8_0", type_v="q8_0", **budget),
        info,
        free_memory=None,
        weights_there=0,
    )
    assert f16.n_ctx_per_seq == 8192
    assert q8.kv_bytes_per_cell == 128 * KIB * 34 // 64
    assert q8.n_ctx_per_seq == GiB // q8.kv_bytes_per_cell // CONTEXT_STEP * CONTEXT_STEP


def test_offload_decisions() -> None:
    weights = 5 * GiB
    assert (
        choose_offload(
            requested=None, gpu_offload=False, device_free=None, weights_bytes=weights, n_layer=32
        ).n_gpu_layers
        == 0
    )
    assert (
        choose_offload(
            requested=None,
            gpu_offload=True,
            device_free=24 * GiB,
            weights_bytes=weights,
            n_layer=32,
        ).n_gpu_layers
        == -1
    )
    partial = choose_offload(
        requested=None, gpu_offload=True, device_free=4 * GiB, weights_bytes=weights, n_layer=32
    )
    # 4 GiB less a reserve of 512 MiB, at 160 MiB a layer.
    assert partial.n_gpu_layers == 22
    assert "22 of 32" in partial.reason
    assert (
        choose_offload(
            requested=None, gpu_offload=True, device_free=None, weights_bytes=weights, n_layer=32
        ).n_gpu_layers
        == -1
    )
    assert (
        choose_offload(
            requested=0, gpu_offload=True, device_free=24 * GiB, weights_bytes=weights, n_layer=32
        ).n_gpu_layers
        == 0
    )
    assert (
        choose_offload(
            requested=None,
            gpu_offload=True,
            device_free=GiB // 4,
            weights_bytes=weights,
            n_layer=32,
        ).n_gpu_layers
        == 0
    )
