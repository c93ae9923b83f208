"""Model files: GGUF header validation, model spec resolution, and fetching known models."""

from __future__ import annotations

from .fetch import fetch_known_model
from .gguf import GGUFInfo, read_gguf_info
from .resolve import (
    KNOWN_MODELS,
    KnownModel,
    load_model_info,
    models_dir,
    resolve_hub_model,
    resolve_model_path,
)

__all__ = [
    "KNOWN_MODELS",
    "GGUFInfo",
    "KnownModel",
    "fetch_known_model",
    "load_model_info",
    "models_dir",
    "read_gguf_info",
    "resolve_hub_model",
    "resolve_model_path",
]
