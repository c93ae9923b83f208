"""``LlamaCppEmbedding``: LlamaIndex embeddings from the shared in-process engine."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

from llama_index.core.base.embeddings.base import BaseEmbedding, Embedding
from llama_index.core.bridge.pydantic import Field, PrivateAttr

from ..engine import Engine, engine_for
from ..engine.config import Pooling

__all__ = ["LlamaCppEmbedding"]

_ENGINE_FIELDS = (
    "n_ctx_per_seq",
    "n_seq_max",
    "n_threads",
    "n_gpu_layers",
    "embedding_pooling",
    "embedding_n_ctx",
    "embedding_n_seq_max",
)


class LlamaCppEmbedding(BaseEmbedding):
    """Text embeddings of a local GGUF model, for LlamaIndex indexes and retrievers.

    The vectors come from the shared engine's embedding context (same weights as generation,
    a context of its own): a ``LlamaCpp`` LLM and this embedder built with the same ``model``
    and engine settings load the model once. Each batch LlamaIndex hands over (at most
    ``embed_batch_size`` texts) is one engine call, batched with other callers' texts; the
    ``a``-methods await the engine without blocking the event loop.

    Example::

        embed_model = LlamaCppEmbedding(model="smollm2-135m")
        index = VectorStoreIndex.from_documents(documents, embed_model=embed_model)

    Texts longer than the engine's ``embedding_n_ctx`` tokens raise ``ContextOverflowError``
    unless ``truncate`` is set. Vectors are L2-normalised unless ``normalize`` is off.
    """

    model: str | None = Field(
        default=None,
        description="A .gguf path, a known short name (e.g. 'smollm2-135m'), "
        "'hf://owner/repo/file.gguf', or None for the LLAMACPP_MODEL environment variable.",
    )
    normalize: bool = Field(default=True, description="L2-normalise every vector.")
    truncate: bool = Field(
        default=False, description="Cut texts over embedding_n_ctx tokens instead of failing."
    )
    timeout: float | None = Field(
        default=None, gt=0.0, description="Seconds one batch may take before it fails."
    )
    query_instruction: str | None = Field(
        default=None, description="Text put before every query (for models trained with one)."
    )
    text_instruction: str | None = Field(
        default=None, description="Text put before every document text."
    )
    n_ctx_per_seq: int | None = Field(default=None, description="Engine setting (None: default).")
    n_seq_max: int | None = Field(default=None, description="Engine setting (None: default).")
    n_threads: int | None = Field(default=None, description="Engine setting (None: default).")
    n_gpu_layers: int | None = Field(default=None, description="Engine setting (None: default).")
    embedding_pooling: Pooling | None = Field(
        default=None, description="Engine setting: mean, cls, last or model (None: default)."
    )
    embedding_n_ctx: int | None = Field(
        default=None, description="Engine setting: longest text, in tokens (None: default)."
    )
    embedding_n_seq_max: int | None = Field(
        default=None, description="Engine setting: texts per embedding decode (None: default)."
    )
    engine_kwargs: dict[str, Any] = Field(
        default_factory=dict,
        description="Other EngineConfig settings. Adapters with the same model and the same "
        "settings share one engine.",
    )

    _engine: Engine | None = PrivateAttr(default=None)

    def __init__(self, *, engine: Engine | None = None, **data: Any) -> None:
        """Build the embedder; ``engine`` serves it instead of the shared engine for ``model``.

        ``model_name``, unless given, is the GGUF's name (its file name when it has none) once
        the engine is known, and the ``model`` spec's last part before.
        """
        super().__init__(**data)
        self._engine = engine
        if "model_name" not in self.model_fields_set:
            if engine is not None:
                self.model_name = _name_of(engine)
            elif self.model is not None:
                self.model_name = Path(self.model).name

    @classmethod
    def class_name(cls) -> str:
        return "llamacpp_integrations_embedding"

    def _engine_settings(self) -> dict[str, Any]:
        settings = {name: getattr(self, name) for name in _ENGINE_FIELDS}
        return {k: v for k, v in settings.items() if v is not None} | dict(self.engine_kwargs)

    def _loaded(self, engine: Engine) -> Engine:
        if self._engine is None:
            self._engine = engine
            if "model_name" not in self.model_fields_set:
                self.model_name = _name_of(engine)
        return self._engine

    @property
    def engine(self) -> Engine:
        """The engine serving this embedder (loading the model on first use)."""
        if self._engine is None:
            return self._loaded(engine_for(None, self.model, self._engine_settings()))
        return self._engine

    async def _aengine(self) -> Engine:
        if self._engine is None:  # loading takes seconds: keep it off the event loop
            engine = await asyncio.to_thread(engine_for, None, self.model, self._engine_settings())
            return self._loaded(engine)
        return self._engine

    def _embed_kwargs(self) -> dict[str, Any]:
        return {"normalize": self.normalize, "truncate": self.truncate, "timeout": self.timeout}

    def _query(self, query: str) -> str:
        return f"{self.query_instruction}{query}" if self.query_instruction else query

    def _texts(self, texts: list[str]) -> list[str]:
        if not self.text_instruction:
            return texts
        return [f"{self.text_instruction}{text}" for text in texts]

    def _get_query_embedding(self, query: str) -> Embedding:
        return self.engine.embed([self._query(query)], **self._embed_kwargs())[0]

    async def _aget_query_embedding(self, query: str) -> Embedding:
        engine = await self._aengine()
        return (await engine.aembed([self._query(query)], **self._embed_kwargs()))[0]

    def _get_text_embedding(self, text: str) -> Embedding:
        return self._get_text_embeddings([text])[0]

    async def _aget_text_embedding(self, text: str) -> Embedding:
        return (await self._aget_text_embeddings([text]))[0]

    def _get_text_embeddings(self, texts: list[str]) -> list[Embedding]:
        return self.engine.embed(self._texts(texts), **self._embed_kwargs())

    async def _aget_text_embeddings(self, texts: list[str]) -> list[Embedding]:
        engine = await self._aengine()
        return await engine.aembed(self._texts(texts), **self._embed_kwargs())


def _name_of(engine: Engine) -> str:
    return engine.info.name or Path(engine.info.path).name
