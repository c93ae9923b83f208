"""``LlamaCppRerank``: a LlamaIndex node postprocessor scoring nodes with a cross-encoder."""

from __future__ import annotations

from typing import Any

from llama_index.core.bridge.pydantic import ConfigDict, Field, PrivateAttr
from llama_index.core.postprocessor.types import BaseNodePostprocessor
from llama_index.core.schema import MetadataMode, NodeWithScore, QueryBundle

from ..client import EngineSettings, engine_settings_of
from ..client.embedding import RerankSettings, arerank_texts, rerank_texts
from ..engine import InferenceEngine
from ..errors import InvalidRequestError

__all__ = ["LlamaCppRerank"]


class LlamaCppRerank(BaseNodePostprocessor, RerankSettings, EngineSettings):
    """Reorders retrieved nodes by a local cross-encoder's relevance score.

    The model is a reranker GGUF (a BERT-style cross-encoder such as bge-reranker, whose
    pooling is ``rank``). Every (query, node text) pair is scored in the engine's embedding
    decodes, batched like embeddings; the ``top_n`` best nodes come back best first, their
    ``score`` replaced by the reranker's.

    Example::

        reranker = LlamaCppRerank(model="/models/bge-reranker-v2-m3-q8_0.gguf", top_n=3)
        query_engine = index.as_query_engine(similarity_top_k=20, node_postprocessors=[reranker])

    A model without rank pooling raises ``InvalidRequestError`` on the first call.
    """

    model_config = ConfigDict(
        arbitrary_types_allowed=True, protected_namespaces=("pydantic_model_",), extra="forbid"
    )

    model: str | None = Field(
        default=None,
        description="A reranker .gguf path, a known short name, 'hf://owner/repo/file.gguf', "
        "or None for the LLAMACPP_MODEL environment variable.",
    )
    engine_kwargs: dict[str, Any] = Field(
        default_factory=dict,
        description="Other EngineConfig settings. Adapters with the same model and the same "
        "settings share one engine.",
    )

    _given_engine: InferenceEngine | None = PrivateAttr(default=None)

    def __init__(self, *, engine: InferenceEngine | None = None, **data: Any) -> None:
        """Build the postprocessor; ``engine`` serves it instead of the shared one for ``model``."""
        super().__init__(**data)
        self._given_engine = engine

    @classmethod
    def class_name(cls) -> str:
        return "llamacpp_integrations_rerank"

    def _supplied_engine(self) -> InferenceEngine | None:
        return self._given_engine

    def _engine_settings(self) -> dict[str, Any]:
        return engine_settings_of(self, self.engine_kwargs)

    def _query_and_texts(
        self, nodes: list[NodeWithScore], query_bundle: QueryBundle | None
    ) -> tuple[str, list[str]]:
        """What to score: the query and the nodes' texts (none for no nodes, which need no
        query)."""
        if not nodes:
            return "", []
        if query_bundle is None:
            raise InvalidRequestError("reranking needs a query: pass query_str or query_bundle")
        texts = [n.node.get_content(metadata_mode=MetadataMode.EMBED) for n in nodes]
        return query_bundle.query_str, texts

    def _ranked(self, nodes: list[NodeWithScore], scores: list[float]) -> list[NodeWithScore]:
        """The ``top_n`` best ``nodes`` by ``scores``, best first, scored by the reranker."""
        order = sorted(range(len(nodes)), key=lambda i: scores[i], reverse=True)
        keep = order if self.top_n is None else order[: self.top_n]
        return [NodeWithScore(node=nodes[i].node, score=scores[i]) for i in keep]

    def _postprocess_nodes(
        self, nodes: list[NodeWithScore], query_bundle: QueryBundle | None = None
    ) -> list[NodeWithScore]:
        query, texts = self._query_and_texts(nodes, query_bundle)
        scores = rerank_texts(self.binding, query, texts, self) if texts else []
        return self._ranked(nodes, scores)

    async def _apostprocess_nodes(
        self, nodes: list[NodeWithScore], query_bundle: QueryBundle | None = None
    ) -> list[NodeWithScore]:
        query, texts = self._query_and_texts(nodes, query_bundle)
        scores = await arerank_texts(self.binding, query, texts, self) if texts else []
        return self._ranked(nodes, scores)
