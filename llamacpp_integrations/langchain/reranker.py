"""``LlamaCppReranker``: a LangChain document compressor scoring documents with a cross-encoder."""

from __future__ import annotations

from collections.abc import Sequence

from langchain_core.callbacks import Callbacks
from langchain_core.documents import BaseDocumentCompressor, Document
from pydantic import ConfigDict, Field

from ..client import EngineSettings
from ..client.embedding import RerankSettings, arerank_texts, rerank_texts
from ..engine import InferenceEngine

__all__ = ["LlamaCppReranker"]


class LlamaCppReranker(RerankSettings, EngineSettings, BaseDocumentCompressor):
    """Reorders retrieved documents by a local cross-encoder's relevance score.

    The model is a reranker GGUF (a BERT-style cross-encoder such as bge-reranker, whose
    pooling is ``rank``); each (query, document) pair is scored in the engine's embedding
    decodes, batched like embeddings. The ``top_n`` best documents are returned, best first,
    each a copy with its score in ``metadata["relevance_score"]``.

    Example::

        from langchain_classic.retrievers import ContextualCompressionRetriever

        reranker = LlamaCppReranker(model="/models/bge-reranker-v2-m3-q8_0.gguf", top_n=3)
        retriever = ContextualCompressionRetriever(
            base_compressor=reranker, base_retriever=store.as_retriever(search_kwargs={"k": 20})
        )

    A model without rank pooling raises ``InvalidRequestError`` on the first call.
    """

    model_config = ConfigDict(arbitrary_types_allowed=True, extra="forbid")

    model: str | None = Field(
        default=None,
        description="A reranker .gguf path, a known short name, hf://owner/repo/file.gguf, or "
        "None for the LLAMACPP_MODEL environment variable.",
    )
    engine: InferenceEngine | None = Field(
        default=None,
        exclude=True,
        repr=False,
        description="An engine to serve from instead of the registry's shared one.",
    )

    def _supplied_engine(self) -> InferenceEngine | None:
        return self.engine

    def _ranked(self, documents: Sequence[Document], scores: list[float]) -> list[Document]:
        """The ``top_n`` best ``documents`` by ``scores``, best first, each a copy with its
        score in ``metadata["relevance_score"]``."""
        order = sorted(range(len(documents)), key=lambda i: scores[i], reverse=True)
        keep = order if self.top_n is None else order[: self.top_n]
        return [
            Document(
                page_content=documents[i].page_content,
                metadata={**documents[i].metadata, "relevance_score": scores[i]},
                id=documents[i].id,
            )
            for i in keep
        ]

    def rerank(self, query: str, documents: Sequence[str]) -> list[float]:
        """One score per text (higher is more relevant), in order."""
        return rerank_texts(self.binding, query, documents, self)

    def compress_documents(
        self, documents: Sequence[Document], query: str, callbacks: Callbacks | None = None
    ) -> Sequence[Document]:
        """The ``top_n`` most relevant documents to ``query``, best first."""
        texts = [d.page_content for d in documents]
        scores = rerank_texts(self.binding, query, texts, self) if texts else []
        return self._ranked(documents, scores)

    async def acompress_documents(
        self, documents: Sequence[Document], query: str, callbacks: Callbacks | None = None
    ) -> Sequence[Document]:
        """Like ``compress_documents``, awaiting the engine without blocking the event loop."""
        texts = [d.page_content for d in documents]
        scores = await arerank_texts(self.binding, query, texts, self) if texts else []
        return self._ranked(documents, scores)
