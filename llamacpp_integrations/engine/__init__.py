"""The engine: continuous batching over llama.cpp sequences, behind ``InferenceEngine``.

Importing this package loads no native code: the types, the configuration, the interface and
the registry are pure Python. ``Engine`` (the in-process llama.cpp engine) is imported on first
access, and the registry opens one only when asked for an engine.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ..prompts.media import AudioInput, ImageInput, MediaInput
from ..prompts.reasoning import ReasoningFormat, ReasoningSpec, ReasoningSplitter, split_reasoning
from .channel import RequestHandle
from .config import EngineConfig, LoraAdapter, WeightsKey
from .interface import (
    ChatRenderer,
    ChunkingEngine,
    InferenceEngine,
    LoraEngine,
    RerankingEngine,
    TokenPieceEngine,
)
from .lora import LoraInfo
from .registry import engine_for, live_engines, shared_engine
from .results import (
    Completion,
    EngineStats,
    FinishReason,
    ModelInfo,
    SlotStats,
    StreamChunk,
    Timings,
    TokenLogprob,
    TopLogprob,
    Usage,
)
from .types import ChatMessage, ChatRequest, CompletionRequest, GenerationRequest, SamplingParams

if TYPE_CHECKING:
    from .engine import Engine

__all__ = [
    "AudioInput",
    "ChatMessage",
    "ChatRenderer",
    "ChatRequest",
    "ChunkingEngine",
    "Completion",
    "CompletionRequest",
    "Engine",
    "EngineConfig",
    "EngineStats",
    "FinishReason",
    "GenerationRequest",
    "ImageInput",
    "InferenceEngine",
    "LoraAdapter",
    "LoraEngine",
    "LoraInfo",
    "MediaInput",
    "ModelInfo",
    "ReasoningFormat",
    "ReasoningSpec",
    "ReasoningSplitter",
    "RequestHandle",
    "RerankingEngine",
    "SamplingParams",
    "SlotStats",
    "StreamChunk",
    "Timings",
    "TokenLogprob",
    "TokenPieceEngine",
    "TopLogprob",
    "Usage",
    "WeightsKey",
    "engine_for",
    "live_engines",
    "shared_engine",
    "split_reasoning",
]


def __getattr__(name: str) -> Any:
    if name == "Engine":  # the native engine, imported only when someone asks for it
        from .engine import Engine

        return Engine
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
