"""Model files: GGUF header validation, model spec resolution, fetching known models and
Hugging Face files, and the models other programs keep (Ollama, LM Studio, llama.cpp's cache)."""

from __future__ import annotations

from .catalog import CatalogEntry, find_models
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
from .stores import StoreDefaults, store_defaults
from .stores.ollama import OllamaModel, read_ollama_model

__all__ = [
    "KNOWN_MODELS",
    "MMPROJ_AUTO",
    "CatalogEntry",
    "GGUFInfo",
    "HubSpec",
    "KnownModel",
    "OllamaModel",
    "ProgressCallback",
    "StoreDefaults",
    "cached_model_info",
    "fetch_known_model",
    "find_models",
    "load_model_info",
    "models_dir",
    "parse_hub_spec",
    "read_gguf_info",
    "read_ollama_model",
    "resolve_hub_model",
    "resolve_mmproj_path",
    "resolve_model_path",
    "store_defaults",
]
