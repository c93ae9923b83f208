"""The one place with process-wide engines: engines shared by configuration.

Two adapters asking for the same ``EngineConfig`` (same model file, same settings) get the same
engine, so their requests are batched together. Adapters with different serving settings get
different engines, which still share one copy of the weights (see ``host.py``). Entries are
weak: when no adapter holds an engine any more it is closed and its memory freed.

This module is the factory adapters and tools use: they get an ``InferenceEngine`` from here and
never name the concrete local engine, whose native code is imported only when one is opened.
"""

from __future__ import annotations

import threading
import weakref
from collections.abc import Mapping
from dataclasses import replace
from typing import Any

from .config import EngineConfig
from .interface import InferenceEngine

__all__ = ["engine_for", "live_engines", "open_local_engine", "shared_engine"]

_LOCK = threading.Lock()  # guards the two maps below, never held while a model loads
_ENGINES: weakref.WeakValueDictionary[EngineConfig, InferenceEngine] = weakref.WeakValueDictionary()
_LOADING: dict[EngineConfig, threading.Lock] = {}  # one lock per configuration being loaded


def open_local_engine(config: EngineConfig) -> InferenceEngine:
    """A new in-process engine for ``config`` (imports llama.cpp on first use)."""
    from .engine import Engine

    return Engine(config)


def shared_engine(config: EngineConfig | None = None, /, **overrides: Any) -> InferenceEngine:
    """The live engine for this configuration, loading the model on first use.

    Loading takes seconds; meanwhile other configurations are served (and loaded) as usual,
    and callers asking for this one wait for the same load instead of starting another.
    """
    config = replace(config or EngineConfig(), **overrides)
    key = config.resolved()
    with _LOCK:
        engine = _live(key)
        if engine is not None:
            return engine
        loading = _LOADING.setdefault(key, threading.Lock())
    with loading:
        with _LOCK:
            engine = _live(key)  # loaded by whoever held ``loading`` before us
        if engine is None:
            try:
                engine = open_local_engine(key)
                with _LOCK:
                    _ENGINES[key] = engine  # before the lock goes: no one loads it twice
            finally:
                with _LOCK:
                    if _LOADING.get(key) is loading:
                        del _LOADING[key]
        return engine


def _live(key: EngineConfig) -> InferenceEngine | None:
    engine = _ENGINES.get(key)
    return None if engine is None or engine.closed else engine


def live_engines() -> list[InferenceEngine]:
    """Engines the registry currently holds (for diagnostics and tests)."""
    with _LOCK:
        return [engine for engine in _ENGINES.values() if not engine.closed]


def engine_for(
    engine: InferenceEngine | None, model: str | None, settings: Mapping[str, Any] | None = None
) -> InferenceEngine:
    """What an adapter serves from: the engine it was given, else the shared engine for
    ``model`` with these ``EngineConfig`` settings (unknown names raise ``TypeError``)."""
    if engine is not None:
        return engine
    return shared_engine(EngineConfig(model=model, **dict(settings or {})))
