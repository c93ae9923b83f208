"""``POST /v1/rerank``: documents ranked against a query by a cross-encoder, in Jina's and
Cohere's shape, as llama-server answers it (also on ``/rerank``, ``/reranking`` and
``/v1/reranking``, llama-server's other paths).

``{model, query, documents, top_n?, return_documents?}`` -> ``{model, object: "list", results:
[{index, relevance_score, document?}], usage}``, the results most relevant first (ties in the
documents' order), the first ``top_n`` of them. ``documents`` are strings or ``{"text": ...}``
objects (Cohere's and Jina's other shape); ``return_documents`` adds each one as
``{"text": ...}`` (off by default, as Cohere's API and llama-server leave it out).

The served model must rerank (``engine.RerankingEngine``, with rank pooling: a reranker GGUF);
a generative model is refused with a 400 saying so. ``usage`` counts, per document, the query's
tokens (with the model's special tokens) and the document's: the pair the model reads, give or
take the separator a model's own rerank template may add.
"""

from __future__ import annotations

import asyncio
from typing import Any

from pydantic import BaseModel, ConfigDict, Field
from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from ...engine import InferenceEngine, RerankingEngine
from ..errors import ApiError
from ..exchange import Exchange, Leases
from ..settings import ServerSettings
from ..streaming import until_disconnect

__all__ = ["RERANK_PATHS", "RerankBody", "RerankDocument", "Reranker", "ranked", "rerank_tokens"]

RERANK = "/v1/rerank"
RERANK_PATHS = ("/v1/rerank", "/rerank", "/reranking", "/v1/reranking")
"""Where llama-server answers reranking requests; all answer alike."""


class RerankDocument(BaseModel):
    """A document given as an object: its text."""

    model_config = ConfigDict(extra="ignore")

    text: str


class RerankBody(BaseModel):
    """``POST /v1/rerank``."""

    model_config = ConfigDict(extra="ignore")

    model: str | None = None
    query: str
    documents: list[str | RerankDocument] = Field(min_length=1)
    top_n: int | None = Field(default=None, ge=1)
    return_documents: bool = False

    def texts(self) -> list[str]:
        """The documents' texts, in order."""
        return [d if isinstance(d, str) else d.text for d in self.documents]


def ranked(
    scores: list[float], texts: list[str], top_n: int | None, with_documents: bool
) -> list[dict[str, Any]]:
    """The results: most relevant first (a stable sort keeps ties in the given order), the
    first ``top_n``."""
    order = sorted(range(len(scores)), key=lambda i: scores[i], reverse=True)
    results = []
    for index in order[:top_n]:
        result: dict[str, Any] = {"index": index, "relevance_score": scores[index]}
        if with_documents:
            result["document"] = {"text": texts[index]}
        results.append(result)
    return results


def rerank_tokens(engine: InferenceEngine, query: str, texts: list[str]) -> int:
    """The tokens of the pairs read: the query with the model's special tokens, and each
    document's, once per document."""
    asked = len(engine.tokenize(query, add_special=True))
    return sum(asked + len(engine.tokenize(text)) for text in texts)


class Reranker:
    """The handler of the reranking endpoint."""

    def __init__(self, exchange: Exchange, settings: ServerSettings) -> None:
        self.exchange = exchange
        self.settings = settings

    async def rerank(self, request: Request) -> Response:
        """``POST /v1/rerank`` (and llama-server's other paths)."""
        return await self.exchange.run(RERANK, lambda leases: self._rerank(request, leases))

    async def _rerank(self, request: Request, leases: Leases) -> Response:
        body = await self.exchange.body(request, RerankBody)
        model = await leases.take(body.model)
        engine = model.engine
        if not isinstance(engine, RerankingEngine):
            raise ApiError(
                400,
                f"{model.name} cannot rerank: serve a reranker (a cross-encoder GGUF)",
                "invalid_request_error",
                "model_cannot_rerank",
                "model",
            )
        texts = body.texts()
        # A generative model has the method but no rank pooling: the engine refuses it (400).
        work = engine.arerank(body.query, texts, timeout=self.settings.request_timeout)
        scores = await until_disconnect(request, work)
        tokens = await asyncio.to_thread(rerank_tokens, engine, body.query, texts)
        self.exchange.metrics.tokens(tokens, 0)
        return JSONResponse(
            {
                "model": model.name,
                "object": "list",
                "results": ranked(scores, texts, body.top_n, body.return_documents),
                "usage": {"prompt_tokens": tokens, "total_tokens": tokens},
            }
        )
