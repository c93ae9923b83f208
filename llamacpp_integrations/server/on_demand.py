"""A roster of several models, each loaded on its first request and unloaded when idle.

Every model is loaded through the engine registry (``hold_engine``), so a process has one
engine, and one copy of the weights, per model whoever else uses it. The roster holds a model's
engine while at least one request leases it, and gives it back when the last lease ends: the
registry then unloads it after ``keep_alive`` seconds in which no request took it again (``0``:
at once; ``-1``: never), as Ollama's ``keep_alive`` does. A lease lasts as long as its answer,
a stream's to its last event, so a model is never unloaded under an answer in flight.

A load takes seconds: it runs on a thread, so the server keeps answering other models
meanwhile, and requests arriving during it wait for that one load instead of starting others.
A model that fails to load answers its requests with 500 ``model_load_failed`` and is tried
again on the next; the other models are served as before.

``max_loaded`` caps how many models are in memory at once (llama-server's ``--models-max``):
loading one more first unloads the idle model used longest ago. When every loaded model is
answering requests, nothing can go without cutting an answer short, so the request is answered
503 ``models_busy`` with ``Retry-After``: retrying when an answer has ended gets the model.

Names: with several models, a request names one by its id in ``/v1/models``; an unknown name
is answered 404 ``model_not_found`` and a request without a name 400 (taking the first model
would answer from a model the client did not choose). With one model every name gets it, as
with ``OneModel``.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, fields
from functools import partial
from typing import Literal, Protocol

from ..client import EngineBinding
from ..engine import EngineConfig, InferenceEngine
from ..engine.registry import hold_engine, unload_kept_engine
from ..errors import InvalidRequestError, LlamaCppIntegrationError
from .errors import ApiError
from .roster import ModelCard, ModelLease

__all__ = [
    "DEFAULT_KEEP_ALIVE",
    "HeldEngine",
    "ModelLoader",
    "ModelStatus",
    "OnDemandRoster",
    "registry_loader",
]

log = logging.getLogger("llamacpp_integrations.server")

DEFAULT_KEEP_ALIVE = 300.0
"""Seconds an idle model stays loaded (Ollama's default too): a conversation's next turn
finds it loaded, a model nobody asked for in five minutes gives its memory back."""

ModelStatus = Literal["loaded", "loading", "unloaded"]


class HeldEngine(Protocol):
    """A claim on a loaded engine (the registry's ``EngineHold``): ``release(keep_alive)``
    gives it back, and the engine is unloaded when no one else holds it."""

    engine: InferenceEngine

    def release(self, keep_alive: float | None = None) -> None: ...


ModelLoader = Callable[[str], HeldEngine]
"""Loads the model file at a path and holds its engine (blocking: the roster calls it on a
thread)."""


def registry_loader(config: EngineConfig | None = None) -> ModelLoader:
    """A loader taking engines from the registry, every model with the settings of
    ``config`` (its ``model`` aside): ``serve``'s ``--ctx``, ``--slots``... apply to all."""
    config = config or EngineConfig()
    settings = {f.name: getattr(config, f.name) for f in fields(config) if f.name != "model"}
    return partial(hold_engine, settings=settings)


@dataclass(eq=False)
class _Model:
    """One served model and where it stands: held while leased, kept (by the registry) for a
    while after, or being loaded."""

    name: str
    path: str
    # Probing a template for tools and reasoning renders it a few times: once per model.
    facts: EngineBinding = field(default_factory=lambda: EngineBinding(model=None, settings={}))
    leases: int = 0  # requests using it, those waiting for its load included
    hold: HeldEngine | None = None  # while leases > 0
    kept: InferenceEngine | None = None  # given back, perhaps not unloaded yet
    loading: asyncio.Future[HeldEngine] | None = None
    last_used: float = 0.0  # when its last lease ended (monotonic seconds)

    def engine(self) -> InferenceEngine | None:
        """The engine if it is loaded now (loads nothing)."""
        if self.hold is not None:
            return self.hold.engine
        if self.kept is not None and not self.kept.closed:
            return self.kept
        return None

    def status(self) -> ModelStatus:
        if self.engine() is not None:
            return "loaded"
        return "loading" if self.loading is not None else "unloaded"


class OnDemandRoster:
    """Several models (``{name: path}``), each loaded on its first request and unloaded after
    ``keep_alive`` idle seconds (``0``: as soon as no request uses it; ``-1``: never).

    Args:
        models: The served models' names and GGUF paths (see ``model_files``).
        config: The settings every model is loaded with (its ``model`` is not used).
        keep_alive: Seconds a model no request uses stays loaded.
        loader: How a model is loaded (default: the engine registry, with ``config``).
        max_loaded: Most models loaded at once (``None``: no limit); see the module docstring.

    Raises:
        InvalidRequestError: No models, a projector (``mmproj``) for several models, or a
            ``max_loaded`` below 1.
    """

    def __init__(
        self,
        models: Mapping[str, str],
        *,
        config: EngineConfig | None = None,
        keep_alive: float = DEFAULT_KEEP_ALIVE,
        loader: ModelLoader | None = None,
        max_loaded: int | None = None,
    ) -> None:
        if not models:
            raise InvalidRequestError("no models to serve")
        if max_loaded is not None and max_loaded < 1:
            raise InvalidRequestError(f"max_loaded must be at least 1, not {max_loaded}")
        if len(models) > 1 and config is not None and config.mmproj is not None:
            raise InvalidRequestError(
                "an image projector (mmproj) belongs to one model: serve that model on its own"
            )
        self.keep_alive = keep_alive
        self.max_loaded = max_loaded
        self._load = loader or registry_loader(config)
        self._models = {name: _Model(name, path) for name, path in models.items()}
        self._closed = False

    # ---- ModelRoster -----------------------------------------------------------------------

    def cards(self) -> list[ModelCard]:
        """Every served model; the facts of the loaded ones."""
        cards = []
        for model in self._models.values():
            engine = model.engine()
            info = engine.info if engine is not None else None
            cards.append(ModelCard(model.name, info, status=model.status()))
        return cards

    async def lease(self, name: str | None) -> ModelLease:
        """The model ``name`` names, loaded if it was not (on a thread; concurrent first
        requests share one load), held until the lease is released.

        Raises:
            ApiError: 404 ``model_not_found`` for a name not served, 400 for no name among
                several models, 500 ``model_load_failed`` when the model cannot be loaded,
                503 once the roster is closed.
        """
        model = self._named(name)
        if self._closed:
            raise ApiError(503, "the server is shutting down", "server_error", "engine_closed")
        model.leases += 1
        try:
            engine = await self._engine_of(model)
        except BaseException:
            self._give_back(model)
            raise
        return ModelLease(
            model.name, engine, model.facts, on_release=partial(self._give_back, model)
        )

    def loaded(self) -> list[ModelLease]:
        """The models requests use now, for health and metrics (nothing is leased or loaded).
        Not those kept between requests: the registry may unload one at any moment, and a
        health check must not see that as an engine that failed."""
        return [
            ModelLease(model.name, model.hold.engine, model.facts)
            for model in self._models.values()
            if model.hold is not None
        ]

    def close(self) -> None:
        """Unload every model this roster loaded (unless something else in the process holds
        it); later requests are refused. A load still running is given back when it ends."""
        self._closed = True
        for model in self._models.values():
            if model.hold is not None:  # requests were finished or cancelled by now
                model.hold.release(0)
                model.hold, model.leases = None, 0
            if model.kept is not None:
                unload_kept_engine(model.kept)
                model.kept = None

    # ---- the rest --------------------------------------------------------------------------

    def status(self, name: str) -> ModelStatus:
        """Whether the model ``name`` is loaded, loading or unloaded (``KeyError`` if it is
        not served)."""
        return self._models[name].status()

    def engine(self, name: str) -> InferenceEngine | None:
        """The engine of the model ``name`` if it is loaded now, in use or kept (loads
        nothing; ``KeyError`` if it is not served)."""
        return self._models[name].engine()

    def leases(self, name: str) -> int:
        """How many requests hold (or wait for) the model ``name`` now."""
        return self._models[name].leases

    def _named(self, name: str | None) -> _Model:
        if len(self._models) == 1:
            return next(iter(self._models.values()))
        served = ", ".join(self._models)
        if not name:
            raise ApiError(
                400,
                f"model: required when several models are served (one of: {served})",
                code="invalid_request",
                param="model",
            )
        model = self._models.get(name)
        if model is None:
            raise ApiError(
                404,
                f"the model {name!r} is not served here (served: {served})",
                code="model_not_found",
                param="model",
            )
        return model

    async def _engine_of(self, model: _Model) -> InferenceEngine:
        hold = model.hold
        if hold is not None and hold.engine.closed:  # closed under its answers: load anew
            model.hold = None
            hold.release(0)
        if model.hold is not None:
            return model.hold.engine
        if model.loading is None:
            self._make_room(model)
            loading = asyncio.ensure_future(asyncio.to_thread(self._load, model.path))
            # Registered before any waiter's: it has run by the time a waiter resumes.
            loading.add_done_callback(partial(self._loaded, model))
            model.loading = loading
        try:
            # Shielded: a request that leaves does not cancel the load the others wait for.
            await asyncio.shield(model.loading)
        except Exception as error:
            raise _load_failed(model, error) from error
        if model.hold is None:  # closed meanwhile
            raise ApiError(503, "the server is shutting down", "server_error", "engine_closed")
        return model.hold.engine

    def _make_room(self, model: _Model) -> None:
        """Unload idle models, least recently used first, until ``model`` may load beside
        the others (``max_loaded``).

        Raises:
            ApiError: 503 ``models_busy`` when every other loaded model is answering.
        """
        if self.max_loaded is None:
            return
        others = [m for m in self._models.values() if m is not model and m.status() != "unloaded"]
        idle = sorted((m for m in others if m.hold is None and m.loading is None),
                      key=lambda m: m.last_used)  # fmt: skip
        while len(others) >= self.max_loaded and idle:
            oldest = idle.pop(0)
            if oldest.kept is not None:
                # False when something else in the process holds it: not ours to unload.
                unload_kept_engine(oldest.kept)
                oldest.kept = None
                log.info("unloaded model %r to make room for %r", oldest.name, model.name)
            others.remove(oldest)
        if len(others) >= self.max_loaded:
            busy = ", ".join(m.name for m in others)
            raise ApiError(
                503,
                f"{self.max_loaded} model(s) may be loaded at once, and every loaded one "
                f"({busy}) is answering requests: try again when an answer has ended",
                "server_error",
                "models_busy",
                param="model",
                headers=(("Retry-After", "1"),),
            )

    def _loaded(self, model: _Model, loading: asyncio.Future[HeldEngine]) -> None:
        """A load ended: its engine is held for the requests that wait for it."""
        model.loading = None
        if loading.cancelled() or loading.exception() is not None:
            if not loading.cancelled():
                log.warning("model %r failed to load: %s", model.name, loading.exception())
            return
        hold = loading.result()
        if self._closed or model.leases == 0:  # its requests all left, or the server stops
            self._release(model, hold, 0 if self._closed else self.keep_alive)
            return
        model.hold, model.kept = hold, None

    def _give_back(self, model: _Model) -> None:
        """One lease ended; the last one gives the engine back to the registry, which unloads
        it after ``keep_alive`` seconds unless a request takes it again."""
        model.leases = max(0, model.leases - 1)
        if model.leases == 0:
            model.last_used = time.monotonic()
        if model.leases == 0 and model.hold is not None:
            hold, model.hold = model.hold, None
            self._release(model, hold, self.keep_alive)

    def _release(self, model: _Model, hold: HeldEngine, keep_alive: float) -> None:
        # Kept, the engine is still listed as loaded until the registry unloads it; with
        # keep_alive 0 it is closed here (the last answer has ended: nothing runs on it).
        model.kept = hold.engine
        hold.release(keep_alive)


def _load_failed(model: _Model, error: Exception) -> ApiError:
    """The answer to a model that cannot be loaded: the package's own message (it names the
    file and the reason), or only the error's kind for anything else."""
    reason = str(error) if isinstance(error, LlamaCppIntegrationError) else type(error).__name__
    return ApiError(
        500,
        f"the model {model.name!r} could not be loaded: {reason}",
        "server_error",
        "model_load_failed",
        param="model",
    )
