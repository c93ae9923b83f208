"""The one place with process-wide engines: engines shared by configuration.

Two adapters asking for the same ``EngineConfig`` (same model file, same settings) get the same
engine, so their requests are batched together. Adapters with different serving settings get
different engines, which still share one copy of the weights (see ``worker/host.py``). Entries are
weak: when nothing references an engine any more it is closed and its memory freed.

Adapters take an ``EngineHold`` and give it back when they close. The last one to let go
unloads the engine at once, or after ``keep_alive`` seconds in which no adapter took it again
(``-1``: kept until ``unload_kept_engines``), as Ollama's ``keep_alive`` keeps a model loaded
between requests.

This module is the factory adapters and tools use: they get an ``InferenceEngine`` from here and
never name the concrete local engine, whose native code is imported only when one is opened.
"""

from __future__ import annotations

import threading
import weakref
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from ..optional import ensure_installed
from .config import EngineConfig
from .interface import InferenceEngine

__all__ = [
    "EngineHold",
    "engine_for",
    "hold_engine",
    "live_engines",
    "open_local_engine",
    "shared_engine",
    "unload_kept_engine",
    "unload_kept_engines",
]

_LOCK = threading.Lock()  # guards the maps below, never held while a model loads
_ENGINES: weakref.WeakValueDictionary[EngineConfig, InferenceEngine] = weakref.WeakValueDictionary()
_LOADING: dict[EngineConfig, threading.Lock] = {}  # one lock per configuration being loaded
_HOLDS: dict[EngineConfig, int] = {}  # how many adapters hold each engine
_KEPT: dict[EngineConfig, InferenceEngine] = {}  # kept alive after the last holder let go
_TIMERS: dict[EngineConfig, threading.Timer] = {}  # when a kept engine is unloaded


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
    return _shared(_resolved(config))


def _resolved(config: EngineConfig) -> EngineConfig:
    """``config`` resolved, once llama.cpp is known to be there: resolving may download an
    hf:// model, wasted on an engine that cannot load (the local extra missing)."""
    ensure_installed("local")
    return config.resolved()


def _shared(key: EngineConfig) -> InferenceEngine:
    """``shared_engine`` for a resolved configuration."""
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


@dataclass(eq=False)
class EngineHold:
    """An adapter's claim on a shared engine; ``release`` gives it back."""

    config: EngineConfig
    engine: InferenceEngine
    released: bool = field(default=False, init=False)

    def release(self, keep_alive: float | None = None) -> None:
        """Let go of the engine. When no other adapter holds it, it is closed at once
        (``keep_alive`` ``None`` or ``0``), after ``keep_alive`` seconds unless taken again,
        or kept until ``unload_kept_engines`` (``keep_alive < 0``)."""
        key, engine = self.config, self.engine
        with _LOCK:
            if self.released:
                return
            self.released = True
            holders = _HOLDS.get(key, 0) - 1
            if holders > 0:
                _HOLDS[key] = holders
                return
            _HOLDS.pop(key, None)
            if _ENGINES.get(key) is not engine or engine.closed:
                return  # replaced or closed meanwhile: nothing of ours to unload
            if keep_alive is not None and keep_alive != 0:
                _KEPT[key] = engine
                if keep_alive > 0:
                    timer = threading.Timer(keep_alive, _expire, (key, engine))
                    timer.daemon = True
                    _TIMERS[key] = timer
                    timer.start()
                return
            del _ENGINES[key]  # from here no one can take it; see hold_engine
        engine.close()


def hold_engine(model: str | None, settings: Mapping[str, Any] | None = None) -> EngineHold:
    """A hold on the shared engine for ``model`` with these ``EngineConfig`` settings,
    loading it if needed (unknown setting names raise ``TypeError``)."""
    key = _resolved(EngineConfig(model=model, **dict(settings or {})))
    while True:
        engine = _shared(key)
        with _LOCK:
            # An engine being unloaded leaves the registry before it closes (under this
            # lock): then take a fresh one instead.
            if _ENGINES.get(key) is not engine:
                continue
            _HOLDS[key] = _HOLDS.get(key, 0) + 1
            timer = _TIMERS.pop(key, None)
            _KEPT.pop(key, None)
        if timer is not None:
            timer.cancel()
        return EngineHold(key, engine)


def _expire(key: EngineConfig, engine: InferenceEngine) -> None:
    with _LOCK:
        if _HOLDS.get(key) or _KEPT.get(key) is not engine:
            return  # taken again, or already unloaded
        del _KEPT[key]
        _TIMERS.pop(key, None)
        if _ENGINES.get(key) is engine:
            del _ENGINES[key]
    engine.close()


def unload_kept_engine(engine: InferenceEngine) -> bool:
    """Close ``engine`` now if it is kept alive after its last holder let go (what
    ``unload_kept_engines`` does for all of them, for one owner's engine); whether it was.
    An engine someone holds again is left alone."""
    with _LOCK:
        key = next((k for k, kept in _KEPT.items() if kept is engine), None)
        if key is None:
            return False
        del _KEPT[key]
        timer = _TIMERS.pop(key, None)
        if _ENGINES.get(key) is engine:
            del _ENGINES[key]
    if timer is not None:
        timer.cancel()
    engine.close()
    return True


def unload_kept_engines() -> int:
    """Close the engines kept alive after their last adapter let go; how many there were."""
    with _LOCK:
        kept = list(_KEPT.values())
        for key, engine in _KEPT.items():
            if _ENGINES.get(key) is engine:
                del _ENGINES[key]
        _KEPT.clear()
        timers = list(_TIMERS.values())
        _TIMERS.clear()
    for timer in timers:
        timer.cancel()
    for engine in kept:
        engine.close()
    return len(kept)
