"""The one place with process-wide state: engines shared by configuration.

Two adapters asking for the same ``EngineConfig`` (same model file, same settings) get the same
``Engine``, so the weights are loaded once. Entries are weak: when no adapter holds an engine any
more it is closed and its memory freed.
"""

from __future__ import annotations

import threading
import weakref
from collections.abc import Mapping
from dataclasses import replace
from typing import Any

from .config import EngineConfig
from .engine import Engine

__all__ = ["engine_for", "live_engines", "shared_engine"]

_LOCK = threading.Lock()  # guards the two maps below, never held while a model loads
_ENGINES: weakref.WeakValueDictionary[EngineConfig, Engine] = weakref.WeakValueDictionary()
_LOADING: dict[EngineConfig, threading.Lock] = {}  # one lock per configuration being loaded


def shared_engine(config: EngineConfig | None = None, /, **overrides: Any) -> Engine:
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
                engine = Engine(key)
                with _LOCK:
                    _ENGINES[key] = engine  # before the lock goes: no one loads it twice
            finally:
                with _LOCK:
                    if _LOADING.get(key) is loading:
                        del _LOADING[key]
        return engine


def _live(key: EngineConfig) -> Engine | None:
    engine = _ENGINES.get(key)
    return None if engine is None or engine.closed else engine


def live_engines() -> list[Engine]:
    """Engines the registry currently holds (for diagnostics and tests)."""
    with _LOCK:
        return [engine for engine in _ENGINES.values() if not engine.closed]


def engine_for(
    engine: Engine | None, model: str | None, settings: Mapping[str, Any] | None = None
) -> Engine:
    """What an adapter serves from: the engine it was given, else the shared engine for
    ``model`` with these ``EngineConfig`` settings (unknown names raise ``TypeError``)."""
    if engine is not None:
        return engine
    return shared_engine(EngineConfig(model=model, **dict(settings or {})))
