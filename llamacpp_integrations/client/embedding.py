"""Embedding calls shared by the embedding adapters: their settings and the two calls."""

from __future__ import annotations

from collections.abc import Sequence

from pydantic import BaseModel, Field

from ..errors import InvalidRequestError
from .binding import EngineBinding

__all__ = ["EmbeddingSettings", "aembed_texts", "embed_texts"]


class EmbeddingSettings(BaseModel):
    """How texts are embedded: vector length, long texts, and a time limit."""

    normalize: bool = Field(default=True, description="Scale every vector to unit length.")
    truncate: bool = Field(
        default=False,
        description="Cut texts longer than embedding_n_ctx tokens instead of raising "
        "ContextOverflowError.",
    )
    timeout: float | None = Field(
        default=None, gt=0, description="Seconds one call may take before RequestTimeoutError."
    )


def _check(texts: Sequence[str]) -> None:
    if isinstance(texts, Sequence) and not isinstance(texts, str) and not texts:
        raise InvalidRequestError("got an empty list of texts: pass at least one text")


def embed_texts(
    binding: EngineBinding, texts: Sequence[str], settings: EmbeddingSettings
) -> list[list[float]]:
    """One vector per text, in order, in one engine call (batched with other callers')."""
    _check(texts)
    return binding.get().embed(
        texts, normalize=settings.normalize, truncate=settings.truncate, timeout=settings.timeout
    )


async def aembed_texts(
    binding: EngineBinding, texts: Sequence[str], settings: EmbeddingSettings
) -> list[list[float]]:
    """Async ``embed_texts``: the first call loads the weights on a thread."""
    _check(texts)
    engine = await binding.aget()
    return await engine.aembed(
        texts, normalize=settings.normalize, truncate=settings.truncate, timeout=settings.timeout
    )
