"""LangChain embeddings served by the shared in-process llama.cpp engine.

``LlamaCppEmbeddings`` turns LangChain's ``Embeddings`` calls into ``Engine.embed`` and
``Engine.aembed`` calls. It loads nothing itself: on first use it asks the registry for the engine
that matches its model and settings, so a chat model and an embedder over the same GGUF file share
one engine and one copy of the weights.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Any, Self

from langchain_core.embeddings import Embeddings
from pydantic import BaseModel, ConfigDict, Field, PrivateAttr, model_validator

from ..engine import Engine, EngineConfig, engine_for
from ..engine.config import Pooling
from ..errors import InvalidRequestError

__all__ = ["LlamaCppEmbeddings"]

_DEFAULTS = EngineConfig()

# The ``EngineConfig`` fields this adapter exposes. Only the ones a user sets are handed to the
# registry, like the chat model does, so both adapters reach the same engine for the same model.
_ENGINE_SETTINGS = (
    "n_ctx_per_seq",
    "n_seq_max",
    "n_threads",
    "n_gpu_layers",
    "embedding_pooling",
    "embedding_n_ctx",
    "embedding_n_seq_max",
)


class LlamaCppEmbeddings(BaseModel, Embeddings):
    """Text embeddings from a local GGUF model, computed in this process by llama.cpp.

    Each text becomes one pooled vector of plain Python floats (unit length unless
    ``normalize=False``). ``embed_documents`` sends the whole list to the engine in one call and
    the engine packs it into as few decodes as its embedding budget allows; the ``a``-methods
    await the engine directly, without a thread per call.

    Construction is cheap: the model is loaded on first use, through the engine registry. Two
    instances (or an instance and a ``ChatLlamaCpp``) with the same model and the same explicitly
    set engine settings serve from the same engine. Pass ``engine=`` to use one you manage
    yourself; the model and engine settings are then ignored.

    Errors are the package's typed exceptions: an empty list raises ``InvalidRequestError``, a text
    longer than ``embedding_n_ctx`` tokens raises ``ContextOverflowError`` (unless
    ``truncate=True``), a request past ``timeout`` raises ``RequestTimeoutError``. Invalid
    settings are refused at construction with pydantic's ``ValidationError``.

    Example::

        from langchain_core.vectorstores import InMemoryVectorStore

        from llamacpp_integrations.langchain import LlamaCppEmbeddings

        embeddings = LlamaCppEmbeddings(model="smollm2-135m")
        vector = embeddings.embed_query("What is the capital of France?")

        store = InMemoryVectorStore.from_texts(
            ["Paris is the capital of France.", "Berlin is the capital of Germany."],
            embedding=embeddings,
        )
        docs = store.as_retriever(search_kwargs={"k": 1}).invoke("capital of France")
    """

    model_config = ConfigDict(arbitrary_types_allowed=True, extra="forbid")

    model: str | None = Field(
        default=None,
        description=(
            "A .gguf path, a known short name such as 'smollm2-135m', "
            "hf://owner/repo/file.gguf, or None for the LLAMACPP_MODEL environment variable."
        ),
    )
    engine: Engine | None = Field(
        default=None,
        exclude=True,
        repr=False,
        description="An engine to serve from instead of the registry's shared one.",
    )
    normalize: bool = Field(default=True, description="Scale every vector to unit length.")
    truncate: bool = Field(
        default=False,
        description=(
            "Cut texts longer than embedding_n_ctx tokens instead of raising ContextOverflowError."
        ),
    )
    timeout: float | None = Field(
        default=None, gt=0, description="Seconds one call may take before RequestTimeoutError."
    )

    n_ctx_per_seq: int = Field(
        default=_DEFAULTS.n_ctx_per_seq, description="Context of one generation sequence."
    )
    n_seq_max: int = Field(
        default=_DEFAULTS.n_seq_max, description="Generation sequences decoded together."
    )
    n_threads: int | None = Field(
        default=_DEFAULTS.n_threads, description="CPU threads; None uses every core."
    )
    n_gpu_layers: int = Field(
        default=_DEFAULTS.n_gpu_layers, description="Layers offloaded to a GPU build (-1: all)."
    )
    embedding_pooling: Pooling = Field(
        default=_DEFAULTS.embedding_pooling,
        description="How token vectors become one text vector ('model': the GGUF's own).",
    )
    embedding_n_ctx: int = Field(
        default=_DEFAULTS.embedding_n_ctx,
        description="Token budget of one embedding decode; also the longest text embedded.",
    )
    embedding_n_seq_max: int = Field(
        default=_DEFAULTS.embedding_n_seq_max, description="Most texts embedded in one decode."
    )

    _engine: Engine | None = PrivateAttr(default=None)

    @model_validator(mode="after")
    def _check_engine_settings(self) -> Self:
        # EngineConfig holds the one copy of the rules; building it resolves and loads nothing.
        EngineConfig(model=self.model, **self._engine_settings())
        return self

    def _engine_settings(self) -> dict[str, Any]:
        """The ``EngineConfig`` settings set explicitly on this instance."""
        fields_set = self.model_fields_set
        return {name: getattr(self, name) for name in _ENGINE_SETTINGS if name in fields_set}

    def _loaded_engine(self) -> Engine | None:
        if self.engine is not None:
            return self.engine
        if self._engine is not None and not self._engine.closed:
            return self._engine
        return None

    def _get_engine(self) -> Engine:
        """The engine to serve from, fetched from the registry on first use.

        Concurrent first calls are safe: the registry hands every caller the same engine for the
        same configuration, so whichever assignment lands last stores the same object. An engine
        that was closed in the meantime is replaced by a fresh one from the registry.
        """
        engine = self._loaded_engine()
        if engine is None:
            engine = engine_for(None, self.model, self._engine_settings())
            self._engine = engine
        return engine

    async def _aget_engine(self) -> Engine:
        engine = self._loaded_engine()
        if engine is None:
            # Only the one-time model load goes to a thread, so it cannot stall the event loop.
            engine = await asyncio.to_thread(self._get_engine)
        return engine

    @staticmethod
    def _check_texts(texts: Sequence[str]) -> None:
        if isinstance(texts, Sequence) and not isinstance(texts, str) and not texts:
            raise InvalidRequestError(
                "embed_documents got an empty list of texts: pass at least one text"
            )

    def embed_documents(self, texts: list[str]) -> list[list[float]]:
        """One vector per text, in order, computed in a single engine call."""
        self._check_texts(texts)
        return self._get_engine().embed(
            texts, normalize=self.normalize, truncate=self.truncate, timeout=self.timeout
        )

    def embed_query(self, text: str) -> list[float]:
        """The vector of one text (queries and documents are embedded the same way)."""
        return self.embed_documents([text])[0]

    async def aembed_documents(self, texts: list[str]) -> list[list[float]]:
        """Like ``embed_documents``, awaiting the engine without blocking the event loop."""
        self._check_texts(texts)
        engine = await self._aget_engine()
        return await engine.aembed(
            texts, normalize=self.normalize, truncate=self.truncate, timeout=self.timeout
        )

    async def aembed_query(self, text: str) -> list[float]:
        """Like ``embed_query``, awaiting the engine without blocking the event loop."""
        return (await self.aembed_documents([text]))[0]
