"""The settings a machine suits, each with its reason: pure rules over ``engine.machine``'s
devices and an engine's placement.

With a GPU (discrete, integrated or Apple's unified memory): every layer when the weights, the
KV cache and a reserve for compute buffers fit in the GPUs' room; else a q8_0 KV cache when that
makes them fit; else as many layers as fit. Flash attention on. On unified memory, mmap on (the
mapped file is the GPU's copy). Without one: no layers to offload, the default thread count
(``cpu_budget.py``: one per physical core, within the cgroup's CPU limit), mmap on, and a q8_0
KV cache when the host has less free memory than the cache takes.

The GPUs' room counts what the engine already put there (``gpu_room``), so advice read after a
load matches advice read before it.
"""

from __future__ import annotations

from collections.abc import Sequence

from .config import QUANTIZED_KV_TYPES, EngineConfig
from .cpu_budget import CpuBudget
from .machine import DeviceInfo, MachineReport, Placement, Recommendation, gib
from .sizing import GPU_RESERVE_MIN, GPU_RESERVE_SHARE, cache_type_bytes

__all__ = ["gpu_room", "kv_bytes_as", "machine_report", "recommend"]

_SMALL_KV = "q8_0"


def gpu_room(devices: Sequence[DeviceInfo], placement: Placement, weights_bytes: int) -> int:
    """Bytes the model could have on its GPUs: their free memory and what this engine already
    put there (its offloaded layers' share of the weights, and of the KV cache on a device)."""
    free = sum(d.free_bytes or 0 for d in devices if d.takes_layers)
    if not placement.layers_offloaded or not placement.n_layer:
        return free
    share = placement.layers_offloaded / placement.n_layer
    kv_there = 0.0 if placement.kv_location == "host" else (placement.kv_bytes or 0) * share
    return free + int(weights_bytes * share + kv_there)


def kv_bytes_as(placement: Placement, type_name: str) -> int:
    """The placement's KV cache with K and V both stored as ``type_name`` (an estimate that
    takes K and V rows as equally wide, as they are in most models)."""
    now = cache_type_bytes(placement.type_k) + cache_type_bytes(placement.type_v)
    return int((placement.kv_bytes or 0) * 2 * cache_type_bytes(type_name) / now)


def _small_kv(config: EngineConfig, placement: Placement, why: str) -> list[Recommendation]:
    """q8_0 K and V caches (nothing when V is quantized already)."""
    if config.type_v in QUANTIZED_KV_TYPES:
        return []
    smaller = gib(kv_bytes_as(placement, _SMALL_KV))
    return [
        Recommendation(
            "type_k",
            _SMALL_KV,
            config.type_k,
            f"{why}; a q8_0 cache takes about half ({gib(placement.kv_bytes)} -> {smaller})",
        ),
        Recommendation(
            "type_v", _SMALL_KV, config.type_v, "with type_k (a q8_0 V cache needs flash attention)"
        ),
    ]


def _for_gpus(
    gpus: Sequence[DeviceInfo], config: EngineConfig, placement: Placement, weights_bytes: int
) -> list[Recommendation]:
    room = gpu_room(gpus, placement, weights_bytes)
    reserve = max(GPU_RESERVE_MIN, int(room * GPU_RESERVE_SHARE))
    usable = room - reserve
    unified = any(d.unified for d in gpus)
    where = f"the {gib(room)} of {'unified' if unified else 'GPU'} memory free for it"
    kv_now = placement.kv_bytes or 0
    kv_small = kv_now if config.type_v in QUANTIZED_KV_TYPES else kv_bytes_as(placement, _SMALL_KV)
    kept = f"{gib(reserve)} kept for compute buffers"
    advice: list[Recommendation] = []
    if weights_bytes + kv_now <= usable:
        layers = -1
        why = f"the weights ({gib(weights_bytes)}) and the KV cache fit in {where} ({kept})"
    elif weights_bytes + kv_small <= usable:
        layers = -1
        why = f"the weights fit in {where} with a q8_0 KV cache ({kept})"
        advice += _small_kv(config, placement, "the f16 KV cache does not fit beside them")
    else:
        n_layer = placement.n_layer or 1
        per_layer = (weights_bytes + kv_small) / n_layer
        layers = max(0, min(n_layer, int(max(0, usable) // per_layer)))
        why = (
            f"only {layers} of {n_layer} layers fit in {where} ({kept}); a smaller "
            "quantization or context fits more"
        )
        advice += _small_kv(config, placement, "GPU memory is short")
    advice.insert(0, Recommendation("n_gpu_layers", layers, placement.n_gpu_layers, why))
    if layers != 0:
        advice.append(
            Recommendation(
                "flash_attention",
                True,
                placement.flash_attention,
                "on a GPU it is faster over long contexts and keeps attention buffers small",
            )
        )
    if unified:
        advice.append(
            Recommendation(
                "use_mmap",
                True,
                config.use_mmap,
                "on unified memory the GPU reads the mapped file in place: no second copy",
            )
        )
    return advice


def _for_cpu(
    devices: Sequence[DeviceInfo],
    config: EngineConfig,
    placement: Placement,
    cpus: CpuBudget | None,
) -> list[Recommendation]:
    advice = [
        Recommendation(
            "n_gpu_layers",
            0,
            placement.n_gpu_layers,
            "llama.cpp has no GPU device here (a CPU build, or no GPU found); a CUDA, Metal, "
            "Vulkan or ROCm build of llama-cpp-python offloads layers",
        )
    ]
    if cpus is not None:
        why = cpus.reason()
        if config.n_threads is None:  # the engine's own count (worker/thread_governor.py)
            why += "; left unset, as now, it drops while other work keeps the cores busy"
        advice.append(Recommendation("n_threads", cpus.threads, config.threads, why))
    advice.append(
        Recommendation(
            "use_mmap",
            True,
            config.use_mmap,
            "the weights are read from the page cache: loaded lazily, shared between "
            "processes, and dropped by the kernel before anything is swapped",
        )
    )
    host_free = sum(d.free_bytes or 0 for d in devices if d.kind == "cpu")
    if host_free and placement.kv_bytes and host_free < placement.kv_bytes:
        why = f"the host has {gib(host_free)} free, less than the KV cache takes"
        advice += _small_kv(config, placement, why)
    return advice


def recommend(
    devices: Sequence[DeviceInfo],
    config: EngineConfig,
    placement: Placement,
    *,
    weights_bytes: int,
    cpus: CpuBudget | None,
) -> tuple[Recommendation, ...]:
    """The settings suiting a machine with ``devices`` for an engine with ``config`` that
    placed its ``weights_bytes`` of weights as ``placement`` says."""
    gpus = [d for d in devices if d.takes_layers]
    if gpus:
        return tuple(_for_gpus(gpus, config, placement, weights_bytes))
    return tuple(_for_cpu(devices, config, placement, cpus))


def machine_report(
    *,
    backends: Sequence[str],
    devices: Sequence[DeviceInfo],
    cpus: CpuBudget | None,
    placement: Placement | None,
    config: EngineConfig,
    weights_bytes: int,
) -> MachineReport:
    """The report on a machine and one engine's placement on it, with the advice (none
    without a placement: nothing says where the model went)."""
    advice = (
        ()
        if placement is None
        else recommend(devices, config, placement, weights_bytes=weights_bytes, cpus=cpus)
    )
    return MachineReport(
        tuple(backends),
        tuple(devices),
        None if cpus is None else cpus.cores,
        placement,
        advice,
        cpu_quota=None if cpus is None else cpus.quota,
    )
