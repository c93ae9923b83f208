"""An engine's model settings put on llama.cpp's context parameters (RoPE, cache types)."""

from __future__ import annotations

from typing import Any

import llama_cpp

from ..config import EngineConfig

__all__ = ["cpu_advertises_amx", "tune_context"]

_GGML_TYPES = {
    "f32": llama_cpp.GGML_TYPE_F32,
    "f16": llama_cpp.GGML_TYPE_F16,
    "bf16": 30,  # GGML_TYPE_BF16 in ggml.h; the bindings leave it out
    "q8_0": llama_cpp.GGML_TYPE_Q8_0,
    "q4_0": llama_cpp.GGML_TYPE_Q4_0,
    "q4_1": llama_cpp.GGML_TYPE_Q4_1,
    "q5_0": llama_cpp.GGML_TYPE_Q5_0,
    "q5_1": llama_cpp.GGML_TYPE_Q5_1,
    "iq4_nl": llama_cpp.GGML_TYPE_IQ4_NL,
}
_ROPE_SCALING = {
    "none": llama_cpp.LLAMA_ROPE_SCALING_TYPE_NONE,
    "linear": llama_cpp.LLAMA_ROPE_SCALING_TYPE_LINEAR,
    "yarn": llama_cpp.LLAMA_ROPE_SCALING_TYPE_YARN,
    "longrope": llama_cpp.LLAMA_ROPE_SCALING_TYPE_LONGROPE,
}


def tune_context(params: Any, config: EngineConfig | None, *, kv_types: bool) -> None:
    """Set ``config``'s RoPE settings (and with ``kv_types`` its cache types) on context
    params; unset settings keep llama.cpp's defaults, which read the model's own."""
    if config is None:
        return
    if kv_types:
        params.type_k = _GGML_TYPES[config.type_k]
        params.type_v = _GGML_TYPES[config.type_v]
    if config.rope_scaling_type is not None:
        params.rope_scaling_type = _ROPE_SCALING[config.rope_scaling_type]
    floats = {
        "rope_freq_base": config.rope_freq_base,
        "rope_freq_scale": config.rope_freq_scale,
        "yarn_ext_factor": config.yarn_ext_factor,
        "yarn_attn_factor": config.yarn_attn_factor,
        "yarn_beta_fast": config.yarn_beta_fast,
        "yarn_beta_slow": config.yarn_beta_slow,
    }
    for name, value in floats.items():
        if value is not None:
            setattr(params, name, value)
    if config.yarn_orig_ctx is not None:
        params.yarn_orig_ctx = config.yarn_orig_ctx


def cpu_advertises_amx() -> bool:
    """True where /proc/cpuinfo lists Intel AMX tiles.

    ggml's AMX matmul (an "extra buffer type") crashes with SIGSEGV on multi-token batches on such
    virtual machines (seen on this project's CI kind), so weight repacking is off there by default.
    """
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as cpuinfo:
            return any("amx_tile" in line for line in cpuinfo if line.startswith("flags"))
    except OSError:
        return False
