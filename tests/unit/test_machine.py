"""The machine section's pure logic on made-up machines: where an engine's layers and KV cache
go (``placement_of``), the settings recommended for a CUDA card, Apple's unified memory, a
CPU-only machine and a GPU too small for the model, the report's lines, and the placement in
the ``ModelInfo`` the adapters' engines report (doctor's own output is tested in
tests/integration/test_doctor.py)."""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import asdict, replace

import pytest

from llamacpp_integrations.engine import EngineConfig
from llamacpp_integrations.engine.advice import gpu_room, kv_bytes_as, machine_report, recommend
from llamacpp_integrations.engine.cpu_budget import CpuBudget
from llamacpp_integrations.engine.machine import (
    DeviceInfo,
    Placement,
    Recommendation,
    placement_of,
)
from llamacpp_integrations.engine.sizing import ContextChoice, OffloadChoice
from llamacpp_integrations.langchain import ChatLlamaCpp
from llamacpp_integrations.llama_index import LlamaCpp
from llamacpp_integrations.testing import SCRIPTED_INFO, ScriptedEngine
from llamacpp_integrations.testing.records import model_info_from_json, model_info_to_json

GiB = 1024**3
WEIGHTS = 5 * GiB  # an 8B model at Q4_K_M, about
N_LAYER = 32
CPU = DeviceInfo("CPU", "AMD EPYC", "cpu", "CPU", 60 * GiB, 64 * GiB)


def cuda(free: int, total: int = 24 * GiB) -> DeviceInfo:
    return DeviceInfo("CUDA0", "NVIDIA GeForce RTX 4090", "gpu", "CUDA", free, total)


def kv(kv_bytes: int, cells: int = 8192) -> ContextChoice:
    """A context whose KV cache takes ``kv_bytes`` over ``cells`` cells."""
    return ContextChoice(cells, 1, kv_bytes // cells, None, "set explicitly", False, cells)


def placed(
    config: EngineConfig,
    kv_bytes: int,
    *,
    n_gpu_layers: int = -1,
    gpu_build: bool = True,
) -> Placement:
    offload = OffloadChoice(n_gpu_layers, "set explicitly")
    return placement_of(
        config, n_layer=N_LAYER, offload=offload, gpu_offload=gpu_build, kv=kv(kv_bytes)
    )


def by_setting(advice: Sequence[Recommendation]) -> dict[str, Recommendation]:
    return {r.setting: r for r in advice}


# ---- placement --------------------------------------------------------------------------------


def test_a_cpu_build_offloads_nothing_whatever_the_setting() -> None:
    placement = placed(EngineConfig(), GiB, n_gpu_layers=-1, gpu_build=False)
    assert placement.layers_offloaded == 0 and placement.n_gpu_layers == -1
    assert placement.kv_location == "host"
    assert "0 of 32 layers" in placement.describe_offload()
    assert "no GPU backend" in placement.offload_reason
    # Flash attention as the engine passes it: left to llama.cpp for a setting that offloads,
    # and, with nothing offloaded, the engine's default on the CPU for a stream per sequence.
    assert placement.flash_attention is None and placement.flash_attention_set is None
    none = placed(EngineConfig(), GiB, n_gpu_layers=0, gpu_build=False)
    assert none.flash_attention is False and none.offload_reason == "set explicitly"
    assert none.describe_flash_attention() == "off (not set: the engine's default)"


def test_every_layer_on_a_gpu_puts_the_kv_cache_there() -> None:
    placement = placed(EngineConfig(), GiB)
    assert placement.layers_offloaded == N_LAYER and placement.kv_location == "device"
    assert placement.flash_attention is None  # llama.cpp's own choice (auto)
    assert "auto" in placement.describe_flash_attention()
    assert placed(EngineConfig(), GiB, n_gpu_layers=99).layers_offloaded == N_LAYER


def test_a_partial_offload_splits_the_kv_cache() -> None:
    placement = placed(EngineConfig(), GiB, n_gpu_layers=10)
    assert placement.layers_offloaded == 10 and placement.kv_location == "split"
    host = placement_of(
        EngineConfig(),
        n_layer=N_LAYER,
        offload=OffloadChoice(10, "set"),
        gpu_offload=True,
        kv=kv(GiB),
        offload_kqv=False,
    )
    assert host.kv_location == "host"


def test_a_quantized_v_cache_turns_flash_attention_on() -> None:
    config = EngineConfig(type_k="q8_0", type_v="q8_0")
    placement = placed(config, GiB, gpu_build=False)
    assert placement.flash_attention is True
    assert "K q8_0, V q8_0" in placement.describe_kv()


# ---- advice on a GPU --------------------------------------------------------------------------


def test_a_24_gib_card_takes_every_layer_with_flash_attention() -> None:
    placement = placed(EngineConfig(), GiB)
    # Read after the load: the card's free memory no longer holds this model's weights and KV.
    card = cuda(free=24 * GiB - WEIGHTS - GiB)
    assert gpu_room([card], placement, WEIGHTS) == 24 * GiB
    advice = by_setting(
        recommend(
            [CPU, card], EngineConfig(), placement, weights_bytes=WEIGHTS, cpus=CpuBudget(16, 16)
        )
    )
    layers = advice["n_gpu_layers"]
    assert layers.value == -1 and not layers.is_change
    assert advice["flash_attention"].value is True
    assert "type_k" not in advice and "n_threads" not in advice and "use_mmap" not in advice


def test_a_kv_cache_too_big_for_the_card_is_quantized() -> None:
    placement = placed(EngineConfig(), 3 * GiB, n_gpu_layers=0)  # nothing there yet
    advice = by_setting(
        recommend(
            [cuda(free=8 * GiB, total=8 * GiB)],
            EngineConfig(),
            placement,
            weights_bytes=WEIGHTS,
            cpus=CpuBudget(8, 8),
        )
    )
    assert advice["n_gpu_layers"].value == -1
    assert advice["n_gpu_layers"].is_change
    assert advice["type_k"].value == advice["type_v"].value == "q8_0"
    assert "half" in advice["type_k"].why
    assert kv_bytes_as(placement, "q8_0") == pytest.approx(3 * GiB * 8.5 / 16, rel=1e-6)


def test_a_card_too_small_for_the_model_takes_the_layers_that_fit() -> None:
    placement = placed(EngineConfig(), 2 * GiB, n_gpu_layers=0)
    advice = by_setting(
        recommend(
            [cuda(free=4 * GiB, total=4 * GiB)],
            EngineConfig(),
            placement,
            weights_bytes=WEIGHTS,
            cpus=CpuBudget(8, 8),
        )
    )
    layers = advice["n_gpu_layers"].value
    assert isinstance(layers, int) and 0 < layers < N_LAYER
    assert f"only {layers} of {N_LAYER} layers fit" in advice["n_gpu_layers"].why
    assert advice["type_v"].value == "q8_0"
    # Nothing fits in a card with less than its reserve free.
    none = recommend(
        [cuda(free=GiB // 4, total=GiB)],
        EngineConfig(),
        placement,
        weights_bytes=WEIGHTS,
        cpus=CpuBudget(8, 8),
    )
    assert by_setting(none)["n_gpu_layers"].value == 0
    assert "flash_attention" not in by_setting(none)


def test_apple_unified_memory_keeps_mmap_and_offloads() -> None:
    metal = DeviceInfo("Metal", "Apple M2 Max", "gpu", "Metal", 40 * GiB, 48 * GiB)
    assert metal.unified and metal.takes_layers and "unified memory" in metal.describe()
    placement = placed(EngineConfig(), GiB)
    advice = by_setting(
        recommend(
            [CPU, metal],
            EngineConfig(use_mmap=False),
            placement,
            weights_bytes=WEIGHTS,
            cpus=CpuBudget(12, 12),
        )
    )
    assert advice["n_gpu_layers"].value == -1
    assert "unified" in advice["n_gpu_layers"].why
    mmap = advice["use_mmap"]
    assert mmap.value is True and mmap.is_change
    integrated = DeviceInfo("Vulkan0", "Intel Arc", "igpu", "Vulkan", 8 * GiB, 16 * GiB)
    assert integrated.unified


# ---- advice on the CPU ------------------------------------------------------------------------


def test_a_cpu_only_machine_gets_a_thread_per_physical_core_and_mmap() -> None:
    config = EngineConfig(n_threads=16)
    placement = placed(config, GiB, n_gpu_layers=0, gpu_build=False)
    advice = recommend([CPU], config, placement, weights_bytes=WEIGHTS, cpus=CpuBudget(8, 8))
    settings = by_setting(advice)
    assert settings["n_gpu_layers"].value == 0
    assert "CUDA, Metal, Vulkan or ROCm" in settings["n_gpu_layers"].why
    threads = settings["n_threads"]
    assert threads.value == 8 and threads.current == 16 and threads.is_change
    assert "now 16" in threads.describe()
    assert settings["use_mmap"].value is True and not settings["use_mmap"].is_change
    assert "as now" in settings["use_mmap"].describe()
    assert "type_k" not in settings and "flash_attention" not in settings


def test_an_unset_thread_count_is_advised_to_stay_unset() -> None:
    placement = placed(EngineConfig(), GiB, n_gpu_layers=0, gpu_build=False)
    cpus = CpuBudget(4, 4)
    advice = recommend([CPU], EngineConfig(), placement, weights_bytes=WEIGHTS, cpus=cpus)
    threads = by_setting(advice)["n_threads"]
    assert threads.value == 4 and "left unset, as now, it drops while other work" in threads.why
    fixed = recommend([CPU], EngineConfig(n_threads=4), placement, weights_bytes=WEIGHTS, cpus=cpus)
    assert "left unset" not in by_setting(fixed)["n_threads"].why


def test_a_host_short_of_memory_gets_a_q8_0_kv_cache() -> None:
    small = replace(CPU, free_bytes=GiB)
    placement = placed(EngineConfig(), 2 * GiB, n_gpu_layers=0, gpu_build=False)
    settings = by_setting(
        recommend([small], EngineConfig(), placement, weights_bytes=WEIGHTS, cpus=CpuBudget(4, 4))
    )
    assert settings["type_k"].value == "q8_0"
    # Already quantized: nothing more to say about it.
    quantized = EngineConfig(type_k="q8_0", type_v="q8_0")
    placement = placed(quantized, 2 * GiB, n_gpu_layers=0, gpu_build=False)
    again = recommend([small], quantized, placement, weights_bytes=WEIGHTS, cpus=CpuBudget(4, 4))
    assert "type_k" not in by_setting(again)


# ---- the report, doctor's output and the adapters ---------------------------------------------


def test_the_report_has_a_line_per_fact_and_reads_as_json() -> None:
    placement = placed(EngineConfig(), GiB, n_gpu_layers=0, gpu_build=False)
    machine = machine_report(
        backends=["CPU"],
        devices=[CPU],
        cpus=CpuBudget(4, 4),
        placement=placement,
        config=EngineConfig(n_threads=4),
        weights_bytes=WEIGHTS,
    )
    rows = machine.rows()
    labels = [label for label, _ in rows]
    assert labels[:5] == ["backends", "device", "physical cores", "offload", "KV cache"]
    assert labels[5] == "flash attention" and set(labels[6:]) == {"recommended"}
    text = dict(rows)
    assert text["offload"] == "0 of 32 layers on a GPU (set explicitly)"
    assert text["KV cache"] == "in RAM (host), 1.0 GiB for 8192 cells (K f16, V f16)"
    assert text["device"] == "CPU (cpu): AMD EPYC, 60.0 GiB free of 64.0 GiB"
    data = json.loads(json.dumps(asdict(machine)))
    assert data["placement"]["kv_bytes"] == GiB
    assert data["devices"][0]["kind"] == "cpu"
    assert {r["setting"] for r in data["recommendations"]} == {
        "n_gpu_layers",
        "n_threads",
        "use_mmap",
    }
    # An engine that does not say where its model went: devices, no placement, no advice.
    bare = machine_report(
        backends=["CPU"],
        devices=[CPU],
        cpus=CpuBudget(4, 4),
        placement=None,
        config=EngineConfig(),
        weights_bytes=WEIGHTS,
    )
    assert bare.recommendations == () and "offload" not in dict(bare.rows())


def test_the_placement_travels_in_model_info_to_the_adapters() -> None:
    placement = placed(EngineConfig(), GiB, n_gpu_layers=0, gpu_build=False)
    info = replace(SCRIPTED_INFO, placement=placement)
    assert model_info_from_json(json.loads(json.dumps(model_info_to_json(info)))) == info
    engine = ScriptedEngine(info=info)
    chat = ChatLlamaCpp(engine=engine)
    assert chat.engine is not None and chat.engine.info.placement is placement
    assert LlamaCpp(engine=engine).engine.info.placement is placement
    # LangChain warns about profile keys it does not know, and LlamaIndex's metadata drops
    # them: neither gets one; their windows come from the context the placement sizes.
    assert chat.profile is not None and "placement" not in chat.profile
    assert chat.profile["max_input_tokens"] == info.n_ctx_per_seq


def test_a_container_limit_shows_in_the_report_and_the_thread_advice() -> None:
    placement = placed(EngineConfig(), GiB, n_gpu_layers=0, gpu_build=False)
    machine = machine_report(
        backends=["CPU"],
        devices=[CPU],
        cpus=CpuBudget(allowed=16, cores=8, quota=2.0),
        placement=placement,
        config=EngineConfig(n_threads=8),
        weights_bytes=WEIGHTS,
    )
    assert dict(machine.rows())["CPU limit"] == "2 CPUs (the cgroup's quota)"
    assert machine.physical_cores == 8 and machine.cpu_quota == 2.0
    threads = by_setting(machine.recommendations)["n_threads"]
    assert (threads.value, threads.current) == (2, 8) and "the cgroup allows 2 CPUs" in threads.why
