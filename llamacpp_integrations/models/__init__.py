"""Model files: GGUF header validation, model spec resolution, fetching known models and
Hugging Face files."""

from __future__ import annotations

from .fetch import fetch_known_model
from .gguf import GGUFInfo, read_gguf_info
from .hub import HubSpec, ProgressCallback, parse_hub_spec
from .resolve import (
    KNOWN_MODELS,
    MMPROJ_AUTO,
    KnownModel,
    cached_model_info,
    load_model_info,
    models_dir,
    resolve_hub_model,
    resolve_mmproj_path,
    resolve_model_path,
)

__all__ = [
    "KNOWN_MODELS",
    "MMPROJ_AUTO",
    "GGUFInfo",
    "HubSpec",
    "KnownModel",
    "ProgressCallback",
    "cached_model_info",
    "fetch_known_model",
    "load_model_info",
    "models_dir",
    "parse_hub_spec",
    "read_gguf_info",
    "resolve_hub_model",
    "resolve_mmproj_path",
    "resolve_model_path",
]
