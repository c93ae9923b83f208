"""llamacpp-integrations: a local GGUF model as a first-class LangChain and LlamaIndex citizen.

The engine (``llamacpp_integrations.engine``) owns the model; ``llamacpp_integrations.client`` is
the framework-neutral adapter core; the framework adapters live in
``llamacpp_integrations.langchain`` and ``llamacpp_integrations.llama_index``.
"""

from __future__ import annotations

import logging
from importlib import metadata
from typing import TYPE_CHECKING, Any

from . import errors
from .engine import (
    ChatMessage,
    ChatRequest,
    Completion,
    CompletionRequest,
    EngineConfig,
    InferenceEngine,
    LoraAdapter,
    ReasoningSpec,
    SamplingParams,
    StreamChunk,
    Usage,
    shared_engine,
)

if TYPE_CHECKING:
    from .engine.engine import Engine

# A library logs but never decides where logs go.
logging.getLogger(__name__).addHandler(logging.NullHandler())

try:  # pyproject.toml is the one place the version is written
    __version__ = metadata.version("llamacpp-integrations")
except metadata.PackageNotFoundError:  # a source tree on sys.path, never installed
    __version__ = "0+unknown"

__all__ = [
    "ChatMessage",
    "ChatRequest",
    "Completion",
    "CompletionRequest",
    "Engine",
    "EngineConfig",
    "InferenceEngine",
    "LoraAdapter",
    "ReasoningSpec",
    "SamplingParams",
    "StreamChunk",
    "Usage",
    "errors",
    "shared_engine",
]


def __getattr__(name: str) -> Any:
    if name == "Engine":  # native code loads only when the local engine is asked for
        from .engine.engine import Engine

        return Engine
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
