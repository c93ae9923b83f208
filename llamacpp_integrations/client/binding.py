"""How an adapter reaches its engine: made on first use, shared, replaced when closed.

Every adapter holds one ``EngineBinding``. The first call asks the registry for the engine its
model and settings name (loading the weights if no engine has them), under a lock so concurrent
first calls load once; async callers load on a thread, so the event loop keeps running. A
registry engine that was closed meanwhile is replaced on the next call; an engine the user
passed in is used as it is. A per-call ``model=`` override gets an engine of its own, kept for
the binding's lifetime, so repeated overrides load nothing again: from the registry, or, for an
adapter over a llama-server (``routed``), an engine that names that model to the same server (a
router serves each model by name).

Registry engines are held (``EngineHold``) and given back by ``close``, or when the binding is
collected; the last adapter to let go unloads the engine, at once or after ``keep_alive``
seconds.

Before its engine is loaded, a binding can still tell what one request will get
(``EngineBinding.window``): the context the engine its settings make would choose, estimated
from the model's GGUF header, and the model's name (``model_display_name``, the one rule every
adapter and the server name a model by).
"""

from __future__ import annotations

import asyncio
import os
import threading
import weakref
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import PurePath
from typing import Any

from ..engine import EngineConfig, InferenceEngine, ModelInfo, ReasoningFormat
from ..engine.registry import EngineHold, hold_engine
from ..engine.sizing import estimated_context
from ..models import GGUFInfo
from ..models.stores import store_display_name
from ..tools import TemplateToolSupport, detect_reasoning, detect_tool_support

__all__ = ["EngineBinding", "ModelWindow", "estimated_window", "model_display_name"]


def model_display_name(path: str | os.PathLike[str]) -> str:
    """A model's name, wherever this package shows one (LangChain's ``model_name`` and profile,
    LlamaIndex's ``model_name``, the server's model id): its file name without ``.gguf``.

    Not the header's ``general.name``: that is free text, often the training run's (SmolLM2's
    says "Smollm2 135M 8k Lc100K Mix1 Ep2"), the same for every quantization of a model, and
    no good as an id in a URL. The file name is what the user chose and sees, and what a remote
    llama-server reports its model by.
    """
    # An Ollama blob is named by its hash: its model's name:tag stands for the file name.
    return store_display_name(path) or PurePath(path).name.removesuffix(".gguf")


@dataclass(frozen=True)
class ModelWindow:
    """How many tokens one request gets (prompt plus answer), and the model's name."""

    n_ctx_per_seq: int
    name: str

    @classmethod
    def of(cls, info: ModelInfo) -> ModelWindow:
        """The window a loaded engine reports."""
        return cls(info.n_ctx_per_seq, model_display_name(info.path))


def estimated_window(settings: Mapping[str, Any], header: GGUFInfo) -> ModelWindow:
    """The window the engine ``settings`` (``EngineConfig`` fields) make would give one request
    of the model ``header`` describes, before anything is loaded: the context it would choose
    now (``engine.sizing.estimated_context``: the training context, fitted to free memory)."""
    choice = estimated_context(EngineConfig(**settings), header)
    return ModelWindow(choice.n_ctx_per_seq, model_display_name(header.path))


class EngineBinding:
    """One adapter's engine (and the engines of its per-call model overrides)."""

    def __init__(
        self,
        *,
        model: str | None,
        settings: Mapping[str, Any],
        engine: InferenceEngine | None = None,
        keep_alive: float | None = None,
        routed: Callable[[str], InferenceEngine] | None = None,
    ) -> None:
        self.model = model
        self.keep_alive = keep_alive
        self._settings = dict(settings)
        self._given = engine
        self._holds: dict[str | None, EngineHold] = {}
        self._route = routed
        self._routed: dict[str, InferenceEngine] = {}
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
        if key is not None and self._route is not None:
            routed = self._routed.get(key)
            return key, None if routed is None or routed.closed else routed
        hold = self._holds.get(key)
        return key, None if hold is None or hold.engine.closed else hold.engine

    def get(self, model: str | None = None) -> InferenceEngine:
        """The engine serving ``model`` (``None``: the adapter's own), loading it if needed."""
        key, ready = self._ready(model)
        if ready is not None:
            return ready
        with self._lock:
            if key is not None and self._route is not None:
                routed = self._routed.get(key)
                if routed is None or routed.closed:
                    routed = self._routed[key] = self._route(key)
                return routed
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
            for routed in self._routed.values():
                routed.close()
            self._routed.clear()

    def window(self, header: GGUFInfo) -> ModelWindow:
        """What one request of this binding's engine gets, loading nothing: the engine's own
        window once it is loaded (or was passed in); before that, ``estimated_window`` of its
        settings and the model's ``header``."""
        engine = self.loaded()
        if engine is not None:
            return ModelWindow.of(engine.info)
        return estimated_window(self._settings, header)

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
