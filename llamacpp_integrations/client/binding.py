"""How an adapter reaches its engine: made on first use, shared, replaced when closed.

Every adapter holds one ``EngineBinding``. The first call asks the registry for the engine its
model and settings name (loading the weights if no engine has them), under a lock so concurrent
first calls load once; async callers load on a thread, so the event loop keeps running. A
registry engine that was closed meanwhile is replaced on the next call; an engine the user
passed in is used as it is. A per-call ``model=`` override gets an engine of its own, kept for
the binding's lifetime, so repeated overrides load nothing again.

Registry engines are held (``EngineHold``) and given back by ``close``, or when the binding is
collected; the last adapter to let go unloads the engine, at once or after ``keep_alive``
seconds.
"""

from __future__ import annotations

import asyncio
import threading
import weakref
from collections.abc import Mapping
from typing import Any

from ..engine import InferenceEngine, ReasoningFormat
from ..engine.registry import EngineHold, hold_engine
from ..tools import TemplateToolSupport, detect_reasoning, detect_tool_support

__all__ = ["EngineBinding"]


class EngineBinding:
    """One adapter's engine (and the engines of its per-call model overrides)."""

    def __init__(
        self,
        *,
        model: str | None,
        settings: Mapping[str, Any],
        engine: InferenceEngine | None = None,
        keep_alive: float | None = None,
    ) -> None:
        self.model = model
        self.keep_alive = keep_alive
        self._settings = dict(settings)
        self._given = engine
        self._holds: dict[str | None, EngineHold] = {}
        self._lock = threading.Lock()
        self._finalizer = weakref.finalize(self, _release_all, self._holds, keep_alive)
        self._tool_support: dict[tuple[str | None, str | None], TemplateToolSupport] = {}
        self._reasoning: dict[tuple[str | None, str | None], ReasoningFormat | None] = {}

    def loaded(self) -> InferenceEngine | None:
        """The engine if it is already there (nothing is loaded)."""
        if self._given is not None:
            return self._given
        hold = self._holds.get(None)
        return None if hold is None or hold.engine.closed else hold.engine

    def _ready(self, model: str | None) -> tuple[str | None, InferenceEngine | None]:
        """The engine key for ``model``, and its engine if one is there and open."""
        key = None if model is None or model == self.model else model
        if key is None and self._given is not None:
            return key, self._given
        hold = self._holds.get(key)
        return key, None if hold is None or hold.engine.closed else hold.engine

    def get(self, model: str | None = None) -> InferenceEngine:
        """The engine serving ``model`` (``None``: the adapter's own), loading it if needed."""
        key, ready = self._ready(model)
        if ready is not None:
            return ready
        with self._lock:
            hold = self._holds.get(key)
            if hold is None or hold.engine.closed:
                if hold is not None:
                    hold.release()  # closed under us: only the count is left to give back
                hold = hold_engine(self.model if key is None else key, self._settings)
                self._holds[key] = hold
            return hold.engine

    async def aget(self, model: str | None = None) -> InferenceEngine:
        """``get`` for async callers: a load (seconds) runs on a thread."""
        _, ready = self._ready(model)
        return ready if ready is not None else await asyncio.to_thread(self.get, model)

    def close(self) -> None:
        """Give back the engines this binding holds (``keep_alive`` says when the last holder
        unloads them). A later call loads again."""
        with self._lock:
            _release_all(self._holds, self.keep_alive)

    def tool_support(
        self, engine: InferenceEngine, chat_template: str | None
    ) -> TemplateToolSupport:
        """What the template in effect knows about tools, probed once per template."""
        key = (engine.info.chat_template, chat_template)
        support = self._tool_support.get(key)
        if support is None:
            support = self._tool_support[key] = detect_tool_support(engine, chat_template)
        return support

    def reasoning_format(
        self, engine: InferenceEngine, chat_template: str | None
    ) -> ReasoningFormat | None:
        """What the template in effect does with reasoning, probed once per template."""
        key = (engine.info.chat_template, chat_template)
        if key not in self._reasoning:
            self._reasoning[key] = detect_reasoning(engine, chat_template)
        return self._reasoning[key]


def _release_all(holds: dict[str | None, EngineHold], keep_alive: float | None) -> None:
    for hold in holds.values():
        hold.release(keep_alive)
    holds.clear()
