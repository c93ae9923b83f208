"""What llama.cpp's backends offer: whether layers can go to a GPU, its free memory, and the
backends and devices themselves (``engine.machine.DeviceInfo``); with the CPUs this process may
use (``engine/cpu_budget.py``), the machine report ``doctor`` prints.

The device query goes through ggml's backend registry (``ggml_backend_dev_*``,
``ggml_backend_reg_*``), which llama-cpp-python does not bind; its own libraries are opened for
it with ctypes.
"""

from __future__ import annotations

import ctypes
import sys
from functools import cache
from pathlib import Path

import llama_cpp

from ...models import GGUFInfo
from ..advice import machine_report
from ..config import EngineConfig
from ..cpu_budget import read_cpu_budget
from ..machine import DeviceInfo, DeviceKind, MachineReport, Placement, placement_of
from ..results import ModelInfo
from ..sizing import ContextChoice, OffloadChoice, host_available_memory

__all__ = [
    "backend_devices",
    "backend_names",
    "gpu_free_memory",
    "gpu_offload_supported",
    "loaded_placement",
    "read_machine",
]

# enum ggml_backend_dev_type: CPU, GPU, IGPU (integrated, host memory), ACCEL
_GPU_TYPES = (1, 2)
_KINDS: dict[int, DeviceKind] = {0: "cpu", 1: "gpu", 2: "igpu", 3: "accel"}


def gpu_offload_supported() -> bool:
    """True when this build of llama.cpp has a backend that takes layers (CUDA, Metal...)."""
    return bool(llama_cpp.llama_supports_gpu_offload())


def loaded_placement(
    config: EngineConfig, header: GGUFInfo, offload: OffloadChoice, kv: ContextChoice
) -> Placement:
    """Where an engine with ``config`` put the model ``header`` describes, whose weights took
    ``offload`` on this build, with the KV cache ``kv``."""
    return placement_of(
        config,
        n_layer=header.block_count,
        offload=offload,
        gpu_offload=gpu_offload_supported(),
        kv=kv,
        gpu_backend=next((d.backend for d in backend_devices() if d.takes_layers), None),
    )


@cache
def _ggml_libraries() -> tuple[ctypes.CDLL, ctypes.CDLL] | None:
    suffix = {"darwin": ".dylib", "win32": ".dll"}.get(sys.platform, ".so")
    lib_dir = Path(llama_cpp.__file__).parent / "lib"
    try:
        registry = ctypes.CDLL(str(lib_dir / f"libggml{suffix}"))
        base = ctypes.CDLL(str(lib_dir / f"libggml-base{suffix}"))
    except OSError:
        return None
    registry.ggml_backend_dev_count.restype = ctypes.c_size_t
    registry.ggml_backend_dev_get.argtypes = [ctypes.c_size_t]
    registry.ggml_backend_dev_get.restype = ctypes.c_void_p
    base.ggml_backend_dev_type.argtypes = [ctypes.c_void_p]
    base.ggml_backend_dev_type.restype = ctypes.c_int
    base.ggml_backend_dev_memory.argtypes = [
        ctypes.c_void_p,
        ctypes.POINTER(ctypes.c_size_t),
        ctypes.POINTER(ctypes.c_size_t),
    ]
    base.ggml_backend_dev_memory.restype = None
    registry.ggml_backend_reg_count.restype = ctypes.c_size_t
    registry.ggml_backend_reg_get.argtypes = [ctypes.c_size_t]
    registry.ggml_backend_reg_get.restype = ctypes.c_void_p
    for name in ("ggml_backend_dev_name", "ggml_backend_dev_description"):
        getattr(base, name).argtypes = [ctypes.c_void_p]
        getattr(base, name).restype = ctypes.c_char_p
    base.ggml_backend_dev_backend_reg.argtypes = [ctypes.c_void_p]
    base.ggml_backend_dev_backend_reg.restype = ctypes.c_void_p
    base.ggml_backend_reg_name.argtypes = [ctypes.c_void_p]
    base.ggml_backend_reg_name.restype = ctypes.c_char_p
    return registry, base


def _text(value: bytes | None) -> str:
    return "" if value is None else value.decode("utf-8", errors="replace")


def _memory(base: ctypes.CDLL, device: int) -> tuple[int, int]:
    free, total = ctypes.c_size_t(0), ctypes.c_size_t(0)
    base.ggml_backend_dev_memory(device, ctypes.byref(free), ctypes.byref(total))
    return free.value, total.value


def gpu_free_memory() -> int | None:
    """Free bytes over the GPU devices llama.cpp registered (``None``: none, or unknown).

    Layers are split over every GPU by default, so their free memory adds up.
    """
    libraries = _ggml_libraries()
    if libraries is None:
        return None
    registry, base = libraries
    free_total, found = 0, False
    for index in range(registry.ggml_backend_dev_count()):
        device = registry.ggml_backend_dev_get(index)
        if not device or base.ggml_backend_dev_type(device) not in _GPU_TYPES:
            continue
        free_total += _memory(base, device)[0]
        found = True
    return free_total if found else None


def backend_names() -> tuple[str, ...]:
    """The backends compiled into this llama.cpp (``CPU``, ``CUDA``, ``Metal``, ``Vulkan``,
    ``ROCm``, ``BLAS``...), as its registry names them."""
    libraries = _ggml_libraries()
    if libraries is None:
        return ()
    registry, base = libraries
    return tuple(
        _text(base.ggml_backend_reg_name(registry.ggml_backend_reg_get(index)))
        for index in range(registry.ggml_backend_reg_count())
    )


def backend_devices() -> tuple[DeviceInfo, ...]:
    """Every device llama.cpp registered, with its memory free and in all now (on the CPU,
    the host's: free is what the kernel can hand out without swapping)."""
    libraries = _ggml_libraries()
    if libraries is None:
        return ()
    registry, base = libraries
    found: list[DeviceInfo] = []
    for index in range(registry.ggml_backend_dev_count()):
        device = registry.ggml_backend_dev_get(index)
        if not device:
            continue
        free, total = _memory(base, device)
        kind = _KINDS.get(base.ggml_backend_dev_type(device), "accel")
        if kind == "cpu":
            # ggml's CPU device gives the physical memory as free; the kernel knows better.
            free = host_available_memory() or free
        reg = base.ggml_backend_dev_backend_reg(device)
        found.append(
            DeviceInfo(
                name=_text(base.ggml_backend_dev_name(device)),
                description=_text(base.ggml_backend_dev_description(device)).strip(),
                kind=kind,
                backend=_text(base.ggml_backend_reg_name(reg)) if reg else "",
                free_bytes=free or None,
                total_bytes=total or None,
            )
        )
    return tuple(found)


def read_machine(config: EngineConfig, info: ModelInfo) -> MachineReport:
    """This machine as llama.cpp sees it now, and where the engine with ``config`` and
    ``info`` put its model, with the settings recommended for the machine."""
    return machine_report(
        backends=backend_names(),
        devices=backend_devices(),
        cpus=read_cpu_budget(),
        placement=info.placement,
        config=config,
        weights_bytes=info.size_bytes,
    )
