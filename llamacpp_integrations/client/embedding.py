"""Embedding and reranking calls shared by the adapters: their settings and the calls.

Large lists go to the engine in batches of ``batch_size`` texts, one engine call each, so only
one batch's token lists exist at a time and a progress bar can advance per batch; the engine
still packs each batch into as few decodes as its budget allows, with other callers' texts.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any, Protocol

from pydantic import BaseModel, Field

from ..engine import ChunkingEngine, InferenceEngine, RerankingEngine
from ..errors import InvalidRequestError
from ..optional import require
from .binding import EngineBinding
from .embedding_prefixes import Prefixes, prefixes_for

__all__ = [
    "EmbeddingSettings",
    "Progress",
    "RerankSettings",
    "aembed_texts",
    "arerank_texts",
    "embed_texts",
    "model_prefixes",
    "progress_bar",
    "rerank_texts",
    "reranker_of",
]


class EmbeddingSettings(BaseModel):
    """How texts are embedded: vector length, long texts, batches, prefixes, a time limit."""

    normalize: bool = Field(default=True, description="Scale every vector to unit length.")
    truncate: bool = Field(
        default=False,
        description="Cut texts longer than embedding_n_ctx tokens instead of raising "
        "ContextOverflowError.",
    )
    timeout: float | None = Field(
        default=None, gt=0, description="Seconds one call may take before RequestTimeoutError."
    )
    chunk_long_texts: bool = Field(
        default=False,
        description="Embed a text too long for the context as consecutive windows and average "
        "their vectors, instead of raising ContextOverflowError (local engine only).",
    )
    batch_size: int = Field(
        default=256,
        ge=1,
        description="Texts per engine call when embedding a long list (progress advances per "
        "batch; only one batch is tokenized at a time).",
    )
    model_prefixes: bool = Field(
        default=True,
        description="Put the model family's query and document prefixes before texts (for "
        "families that define them: nomic-embed, E5, BGE, mxbai, Qwen3-Embedding); unknown "
        "models get none.",
    )


class RerankSettings(BaseModel):
    """How documents are scored against a query."""

    top_n: int | None = Field(
        default=3, ge=1, description="How many documents to keep (None keeps them all)."
    )
    truncate: bool = Field(
        default=True,
        description="Cut a document whose pair with the query is longer than the context "
        "instead of raising ContextOverflowError.",
    )
    timeout: float | None = Field(
        default=None, gt=0, description="Seconds one call may take before RequestTimeoutError."
    )


class Progress(Protocol):
    def update(self, n: int) -> object: ...


class _NoProgress:
    def update(self, n: int) -> None:
        return None


@contextmanager
def progress_bar(show: bool, total: int, description: str) -> Iterator[Progress]:
    """A tqdm bar over ``total`` texts when ``show``, else nothing (tqdm comes with the
    ``langchain`` extra, the one adapter family that shows it)."""
    if not show:
        yield _NoProgress()
        return
    bar = require("tqdm.auto", "langchain").tqdm(total=total, desc=description, unit="text")
    try:
        yield bar
    finally:
        bar.close()


def model_prefixes(engine: InferenceEngine) -> Prefixes:
    """The prefixes of the engine's model family (empty for a model the table does not know)."""
    return prefixes_for(engine.info.architecture, engine.info.name)


class _EmbeddingRun:
    """One call's texts in batches of ``batch_size``, the engine keywords ``settings`` make, and
    the vectors gathered so far (progress advancing per batch)."""

    def __init__(
        self, texts: Sequence[str], settings: EmbeddingSettings, progress: Progress | None
    ) -> None:
        if isinstance(texts, Sequence) and not isinstance(texts, str) and not texts:
            raise InvalidRequestError("got an empty list of texts: pass at least one text")
        self._texts = texts
        self._settings = settings
        self._progress = progress
        self.keywords: dict[str, Any] = {
            "normalize": settings.normalize,
            "truncate": settings.truncate,
            "timeout": settings.timeout,
        }
        if settings.chunk_long_texts:
            self.keywords["chunk"] = True  # only a ChunkingEngine takes it
        self.vectors: list[list[float]] = []

    def engine(self, engine: InferenceEngine) -> InferenceEngine | ChunkingEngine:
        """The engine to embed with: ``engine``, which must chunk when asked to."""
        return _chunking(engine) if self._settings.chunk_long_texts else engine

    def batches(self) -> Iterator[Sequence[str]]:
        """The texts, ``batch_size`` at a time."""
        if isinstance(self._texts, str):
            yield self._texts  # refused by the engine with its own message
            return
        size = self._settings.batch_size
        for start in range(0, len(self._texts), size):
            yield self._texts[start : start + size]

    def done(self, batch: Sequence[str], vectors: list[list[float]]) -> None:
        """Take a batch's vectors."""
        self.vectors += vectors
        if self._progress is not None:
            self._progress.update(len(batch))


def embed_texts(
    binding: EngineBinding,
    texts: Sequence[str],
    settings: EmbeddingSettings,
    *,
    progress: Progress | None = None,
) -> list[list[float]]:
    """One vector per text, in order, one engine call per ``batch_size`` texts."""
    run = _EmbeddingRun(texts, settings, progress)
    engine = run.engine(binding.get())
    for batch in run.batches():
        run.done(batch, engine.embed(batch, **run.keywords))
    return run.vectors


async def aembed_texts(
    binding: EngineBinding,
    texts: Sequence[str],
    settings: EmbeddingSettings,
    *,
    progress: Progress | None = None,
) -> list[list[float]]:
    """Async ``embed_texts``: the first call loads the weights on a thread."""
    run = _EmbeddingRun(texts, settings, progress)
    engine = run.engine(await binding.aget())
    for batch in run.batches():
        run.done(batch, await engine.aembed(batch, **run.keywords))
    return run.vectors


def _chunking(engine: InferenceEngine) -> ChunkingEngine:
    if not isinstance(engine, ChunkingEngine):
        raise InvalidRequestError(
            f"{type(engine).__name__} cannot chunk long texts: use a local Engine, or truncate"
        )
    return engine


def reranker_of(engine: Any) -> RerankingEngine:
    """``engine`` as a reranker, or a clear error when it cannot rank."""
    if not isinstance(engine, RerankingEngine):
        raise InvalidRequestError(
            f"{type(engine).__name__} cannot rerank: use a local Engine over a cross-encoder GGUF"
        )
    return engine


def rerank_texts(
    binding: EngineBinding, query: str, documents: Sequence[str], settings: RerankSettings
) -> list[float]:
    """One score per document (higher is more relevant), in order."""
    return reranker_of(binding.get()).rerank(
        query, documents, truncate=settings.truncate, timeout=settings.timeout
    )


async def arerank_texts(
    binding: EngineBinding, query: str, documents: Sequence[str], settings: RerankSettings
) -> list[float]:
    """Async ``rerank_texts``."""
    engine = await binding.aget()
    return await reranker_of(engine).arerank(
        query, documents, truncate=settings.truncate, timeout=settings.timeout
    )
