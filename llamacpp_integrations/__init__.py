"""llamacpp-integrations: a local GGUF model as a first-class LangChain and LlamaIndex citizen.

The engine (``llamacpp_integrations.engine``) owns the model; the framework adapters live in
``llamacpp_integrations.langchain`` and ``llamacpp_integrations.llama_index``.
"""

from __future__ import annotations

import logging

from . import errors
from .engine import (
    ChatMessage,
    ChatRequest,
    Completion,
    CompletionRequest,
    Engine,
    EngineConfig,
    SamplingParams,
    StreamChunk,
    Usage,
    shared_engine,
)

# A library logs but never decides where logs go.
logging.getLogger(__name__).addHandler(logging.NullHandler())

__version__ = "0.1.0"

__all__ = [
    "ChatMessage",
    "ChatRequest",
    "Completion",
    "CompletionRequest",
    "Engine",
    "EngineConfig",
    "SamplingParams",
    "StreamChunk",
    "Usage",
    "errors",
    "shared_engine",
]
