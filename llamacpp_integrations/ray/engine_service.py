"""``EngineService``: one local engine, behind the methods a Ray Serve handle can call.

A Serve handle calls a deployment's methods by name, with pickled arguments, and a property is
not a method: so this class restates the engine interface (``engine.interface``) as plain
methods (``info()``, ``media_marker()``, ``chunks_long_texts()`` instead of properties) over
the neutral request and result dataclasses, which pickle as they are, and whose typed errors
pickle with their attributes (``errors``), so a caller on another machine gets the exception
the local engine raised. ``RayEngine`` (``ray/engine.py``) is the caller's half.

It imports no Ray: a deployment is this class under ``serve.deployment`` (or a subclass that
adds an ingress), so it is tested and reused without a cluster::

    app = serve.deployment(EngineService, num_replicas=2).bind(model="/models/m.gguf", n_ctx=4096)
    handle = serve.run(app, name="llm", route_prefix=None)
    engine = RayEngine(handle)

Each replica holds its engine through the registry (``engine.registry.hold_engine``), so a
replica process loads the weights once, shared with any other engine or adapter there asking
for the same configuration. Generation, embeddings and reranking each have a blocking method
and an ``a``-method; a handle should call the ``a``-methods, which keep the replica's event
loop free, so concurrent requests meet in the engine's continuous batching. ``stream`` is an
async generator (Serve streams it through ``handle.options(stream=True)``); when the caller
cancels the response, Serve cancels its task here, and the engine frees the sequence.
``check_health`` is what Serve calls to decide whether the replica lives; ``close`` (also run by
``__del__`` when Serve tears the replica down) gives the engine back.
"""

from __future__ import annotations

from collections.abc import AsyncGenerator, Sequence
from dataclasses import fields
from typing import Any

from ..engine.config import EngineConfig
from ..engine.interface import InferenceEngine, LoraEngine, PromptRequest, RerankingEngine
from ..engine.lora import LoraInfo
from ..engine.registry import EngineHold, hold_engine
from ..engine.results import Completion, EngineStats, ModelInfo, StreamChunk
from ..engine.types import ChatRequest, GenerationRequest
from ..errors import EngineClosedError, InvalidRequestError
from .reservation import with_actor_threads

__all__ = ["EngineService"]


def _settings(
    config: EngineConfig | None, model: str | None, settings: dict[str, Any]
) -> tuple[str | None, dict[str, Any]]:
    """The model and ``EngineConfig`` settings the registry is asked for. In a Ray actor (a
    Serve replica), unset ``n_threads`` are the whole CPUs Ray reserved for it
    (``reservation.with_actor_threads``), not the node's cores every replica would then share."""
    if config is not None:
        if model is not None or settings:
            raise InvalidRequestError("pass an EngineConfig or model= and settings, not both")
        settings = {f.name: getattr(config, f.name) for f in fields(config) if f.init}
        model = settings.pop("model")
    return model, with_actor_threads(settings)


class EngineService:
    """The engine interface as methods a Ray Serve handle calls (see the module's docstring).

    ``EngineService(EngineConfig(model=...))`` or ``EngineService(model=..., **settings)``
    (the ``EngineConfig`` fields, as the adapters take them). The model loads when the
    service is made, so a replica is ready when Serve starts sending it requests. Unknown
    setting names raise ``TypeError``.
    """

    def __init__(
        self, config: EngineConfig | None = None, /, *, model: str | None = None, **settings: Any
    ) -> None:
        model, settings = _settings(config, model, settings)
        self._hold: EngineHold | None = hold_engine(model, settings)

    @property
    def _engine(self) -> InferenceEngine:
        """The engine, while this service holds it."""
        hold = self._hold
        if hold is None:
            raise EngineClosedError("the replica's engine is closed")
        return hold.engine

    def __del__(self) -> None:
        self.close()

    # ---- lifecycle ---------------------------------------------------------------------------

    def check_health(self) -> None:
        """Serve's health check: raises ``EngineClosedError`` once the engine is closed or its
        worker died (Serve then replaces the replica)."""
        if self._engine.closed:
            raise EngineClosedError("the replica's engine is closed")

    def closed(self) -> bool:
        """True once ``close`` ran or the engine's worker stopped."""
        return self._hold is None or self._hold.engine.closed

    def close(self) -> None:
        """Give the engine back to the registry (unloaded if nothing else here holds it)."""
        hold, self._hold = getattr(self, "_hold", None), None
        if hold is not None:
            hold.release()

    # ---- what the model is -------------------------------------------------------------------

    def info(self) -> ModelInfo:
        """The served model (``InferenceEngine.info``)."""
        return self._engine.info

    def media_marker(self) -> str | None:
        """Where an image goes in a raw completion prompt (``None``: no images)."""
        return self._engine.media_marker

    def chunks_long_texts(self) -> bool:
        """Whether ``embed`` takes ``chunk`` (``ChunkingEngine``)."""
        return bool(getattr(self._engine, "chunks_long_texts", False))

    def stats(self) -> EngineStats:
        """The engine's running and waiting requests and slots, as its worker last published
        them (for load reports and tests)."""
        stats = getattr(self._engine, "stats", None)
        if stats is None:
            raise InvalidRequestError(f"{type(self._engine).__name__} reports no stats")
        result: EngineStats = stats()
        return result

    # ---- tokens and prompts ------------------------------------------------------------------

    def tokenize(
        self, text: str, *, add_special: bool = False, parse_special: bool = False
    ) -> list[int]:
        """Token ids of ``text``."""
        return self._engine.tokenize(text, add_special=add_special, parse_special=parse_special)

    def detokenize(self, tokens: Sequence[int], *, special: bool = False) -> str:
        """The text of ``tokens``."""
        return self._engine.detokenize(tokens, special=special)

    def token_piece(self, token: int, *, special: bool = True) -> bytes:
        """One token's bytes (``TokenPieceEngine``)."""
        piece = getattr(self._engine, "token_piece", None)
        if piece is None:
            raise InvalidRequestError(f"{type(self._engine).__name__} gives no token pieces")
        result: bytes = piece(token, special=special)
        return result

    def lora_adapters(self) -> list[LoraInfo]:
        """The replica's LoRA adapters (none for an engine without them)."""
        engine = self._engine
        return engine.lora_adapters if isinstance(engine, LoraEngine) else []

    def render_chat(self, request: ChatRequest) -> str:
        """The prompt text a chat request becomes."""
        return self._engine.render_chat(request)

    def count_prompt_tokens(self, request: PromptRequest) -> int:
        """How many tokens the prompt counts as in ``Usage.prompt_tokens``."""
        return self._engine.count_prompt_tokens(request)

    # ---- generation --------------------------------------------------------------------------

    def generate(self, request: GenerationRequest) -> Completion:
        """Run a request to the end (blocks a thread of the replica: prefer ``agenerate``)."""
        return self._engine.generate(request)

    async def agenerate(self, request: GenerationRequest) -> Completion:
        """Run a request to the end; a cancelled call cancels the request."""
        return await self._engine.agenerate(request)

    async def stream(self, request: GenerationRequest) -> AsyncGenerator[StreamChunk, None]:
        """The request's chunks as they are produced; a cancelled or closed stream cancels
        the request and frees its sequence."""
        chunks = self._engine.astream(request)
        try:
            async for chunk in chunks:
                yield chunk
        finally:
            await chunks.aclose()

    # ---- embeddings and reranking ------------------------------------------------------------

    def embed(
        self,
        texts: Sequence[str],
        *,
        normalize: bool = True,
        truncate: bool = False,
        timeout: float | None = None,
        chunk: bool = False,
    ) -> list[list[float]]:
        """One vector per text (blocks a thread of the replica: prefer ``aembed``)."""
        extra = {"chunk": True} if chunk else {}
        return self._engine.embed(
            texts, normalize=normalize, truncate=truncate, timeout=timeout, **extra
        )

    async def aembed(
        self,
        texts: Sequence[str],
        *,
        normalize: bool = True,
        truncate: bool = False,
        timeout: float | None = None,
        chunk: bool = False,
    ) -> list[list[float]]:
        """One vector per text; ``chunk`` averages long texts over windows."""
        extra = {"chunk": True} if chunk else {}
        return await self._engine.aembed(
            texts, normalize=normalize, truncate=truncate, timeout=timeout, **extra
        )

    def rerank(
        self,
        query: str,
        documents: Sequence[str],
        *,
        truncate: bool = False,
        timeout: float | None = None,
    ) -> list[float]:
        """One relevance score per document (blocks a thread: prefer ``arerank``)."""
        return self._reranker().rerank(query, documents, truncate=truncate, timeout=timeout)

    async def arerank(
        self,
        query: str,
        documents: Sequence[str],
        *,
        truncate: bool = False,
        timeout: float | None = None,
    ) -> list[float]:
        """One relevance score per document, in order."""
        reranker = self._reranker()
        return await reranker.arerank(query, documents, truncate=truncate, timeout=timeout)

    def _reranker(self) -> RerankingEngine:
        engine = self._engine
        if not isinstance(engine, RerankingEngine):
            raise InvalidRequestError(f"{type(engine).__name__} cannot rerank")
        return engine
