"""``LlamaCppEmbedding``: LlamaIndex embeddings from the shared in-process engine."""

from __future__ import annotations

from typing import Any

from llama_index.core.base.embeddings.base import BaseEmbedding, Embedding
from llama_index.core.bridge.pydantic import ConfigDict, Field, PrivateAttr

from ..client import EngineSettings, engine_settings_of, model_display_name
from ..client.embedding import EmbeddingSettings, aembed_texts, embed_texts, model_prefixes
from ..engine import InferenceEngine

__all__ = ["LlamaCppEmbedding"]


class LlamaCppEmbedding(BaseEmbedding, EmbeddingSettings, EngineSettings):
    """Text embeddings of a local GGUF model, for LlamaIndex indexes and retrievers.

    The vectors come from the shared engine's embedding context (same weights as generation,
    a context of its own): a ``LlamaCpp`` LLM and this embedder built with the same ``model``
    load the model once, whatever other settings each sets. Each batch LlamaIndex hands over
    (at most ``embed_batch_size`` texts) is one engine call, batched with other callers' texts;
    the ``a``-methods await the engine without blocking the event loop.

    Example::

        embed_model = LlamaCppEmbedding(model="smollm2-135m")
        index = VectorStoreIndex.from_documents(documents, embed_model=embed_model)

    Dedicated embedding models (BERT-style encoders, decoder embedders with their own pooling)
    load as embedding-only engines; queries and documents get the model family's prefixes when
    it defines them (``model_prefixes``; ``query_instruction`` / ``text_instruction`` override).

    Texts longer than the engine's ``embedding_n_ctx`` tokens raise ``ContextOverflowError``
    unless ``truncate`` is set. Vectors are L2-normalised unless ``normalize`` is off.
    """

    # An unknown argument (``model_path``...) is an error, not dropped.
    model_config = ConfigDict(
        arbitrary_types_allowed=True, protected_namespaces=("pydantic_model_",), extra="forbid"
    )

    model: str | None = Field(
        default=None,
        description="A .gguf path, a known short name (e.g. 'smollm2-135m'), "
        "'hf://owner/repo/file.gguf', or None for the LLAMACPP_MODEL environment variable.",
    )
    query_instruction: str | None = Field(
        default=None,
        description="Text put before every query; None takes the model family's prefix "
        "(see model_prefixes).",
    )
    text_instruction: str | None = Field(
        default=None,
        description="Text put before every document text; None takes the model family's.",
    )
    engine_kwargs: dict[str, Any] = Field(
        default_factory=dict,
        description="Other EngineConfig settings. Adapters with the same model and the same "
        "settings share one engine.",
    )

    _given_engine: InferenceEngine | None = PrivateAttr(default=None)

    def __init__(self, *, engine: InferenceEngine | None = None, **data: Any) -> None:
        """Build the embedder; ``engine`` serves it instead of the shared engine for ``model``.

        ``model_name``, unless given, is the model's name (``client.model_display_name``: its
        file name without ``.gguf``) once the engine is known, and the ``model`` spec's last
        part, by the same rule, before.
        """
        super().__init__(**data)
        self._given_engine = engine
        if "model_name" not in self.model_fields_set:
            if engine is not None:
                self.model_name = model_display_name(engine.info.path)
            elif self.model is not None:
                self.model_name = model_display_name(self.model)

    @classmethod
    def class_name(cls) -> str:
        return "llamacpp_integrations_embedding"

    def _supplied_engine(self) -> InferenceEngine | None:
        return self._given_engine

    def _engine_settings(self) -> dict[str, Any]:
        return engine_settings_of(self, self.engine_kwargs)

    @property
    def engine(self) -> InferenceEngine:
        """The engine serving this embedder (loading the model on first use)."""
        return self._named(self.binding.get())

    def _named(self, engine: InferenceEngine) -> InferenceEngine:
        if "model_name" not in self.model_fields_set:
            self.model_name = model_display_name(engine.info.path)
        return engine

    def _instruction(self, *, query: bool) -> str:
        given = self.query_instruction if query else self.text_instruction
        if given is None and self.model_prefixes:
            family = model_prefixes(self.engine)
            given = family.query if query else family.document
        return given or ""

    def _query(self, query: str) -> str:
        return self._instruction(query=True) + query

    def _texts(self, texts: list[str]) -> list[str]:
        if not texts:
            return texts
        instruction = self._instruction(query=False)
        return [instruction + text for text in texts] if instruction else texts

    def _embed(self, texts: list[str]) -> list[Embedding]:
        self._named(self.binding.get())
        return embed_texts(self.binding, texts, self)

    async def _aembed(self, texts: list[str]) -> list[Embedding]:
        self._named(await self.binding.aget())
        return await aembed_texts(self.binding, texts, self)

    def _get_query_embedding(self, query: str) -> Embedding:
        return self._embed([self._query(query)])[0]

    async def _aget_query_embedding(self, query: str) -> Embedding:
        self._named(await self.binding.aget())  # loaded off the loop before prefixes need it
        return (await self._aembed([self._query(query)]))[0]

    def _get_text_embedding(self, text: str) -> Embedding:
        return self._get_text_embeddings([text])[0]

    async def _aget_text_embedding(self, text: str) -> Embedding:
        return (await self._aget_text_embeddings([text]))[0]

    def _get_text_embeddings(self, texts: list[str]) -> list[Embedding]:
        return self._embed(self._texts(texts))

    async def _aget_text_embeddings(self, texts: list[str]) -> list[Embedding]:
        self._named(await self.binding.aget())
        return await self._aembed(self._texts(texts))
