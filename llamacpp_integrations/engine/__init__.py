"""The shared local engine: one worker thread, continuous batching over llama.cpp sequences."""

from __future__ import annotations

from .channel import RequestHandle
from .config import EngineConfig
from .engine import Engine, EngineStats, ModelInfo
from .registry import engine_for, live_engines, shared_engine
from .types import (
    ChatMessage,
    ChatRequest,
    Completion,
    CompletionRequest,
    FinishReason,
    GenerationRequest,
    ImageInput,
    SamplingParams,
    StreamChunk,
    Timings,
    TokenLogprob,
    TopLogprob,
    Usage,
)

__all__ = [
    "ChatMessage",
    "ChatRequest",
    "Completion",
    "CompletionRequest",
    "Engine",
    "EngineConfig",
    "EngineStats",
    "FinishReason",
    "GenerationRequest",
    "ImageInput",
    "ModelInfo",
    "RequestHandle",
    "SamplingParams",
    "StreamChunk",
    "Timings",
    "TokenLogprob",
    "TopLogprob",
    "Usage",
    "engine_for",
    "live_engines",
    "shared_engine",
]
