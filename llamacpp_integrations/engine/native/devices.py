"""What llama.cpp's backends offer: whether layers can go to a GPU, and its free memory.

The device query goes through ggml's backend registry (``ggml_backend_dev_*``), which
llama-cpp-python does not bind; its own libraries are opened for it with ctypes.
"""

from __future__ import annotations

import ctypes
import sys
from functools import cache
from pathlib import Path

import llama_cpp

__all__ = ["gpu_free_memory", "gpu_offload_supported"]

# enum ggml_backend_dev_type: CPU, GPU, IGPU (integrated, host memory), ACCEL
_GPU_TYPES = (1, 2)


def gpu_offload_supported() -> bool:
    """True when this build of llama.cpp has a backend that takes layers (CUDA, Metal...)."""
    return bool(llama_cpp.llama_supports_gpu_offload())


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
    return registry, base


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
        free, total = ctypes.c_size_t(0), ctypes.c_size_t(0)
        base.ggml_backend_dev_memory(device, ctypes.byref(free), ctypes.byref(total))
        free_total += free.value
        found = True
    return free_total if found else None
