"""The adapters' embedding calls over stand-in engines: batches of ``batch_size`` texts in
order, progress per batch, ``chunk`` only where asked for, and the same outcome sync and
async."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Any

import pytest

from llamacpp_integrations.client.binding import EngineBinding
from llamacpp_integrations.client.embedding import (
    EmbeddingSettings,
    aembed_texts,
    embed_texts,
)
from llamacpp_integrations.errors import InvalidRequestError


class PlainEngine:
    """Embeds a text as ``[len(text)]`` and keeps each call's texts and keywords."""

    def __init__(self) -> None:
        self.calls: list[tuple[list[str], dict[str, Any]]] = []

    def embed(self, texts: Sequence[str], **keywords: Any) -> list[list[float]]:
        self.calls.append((list(texts), keywords))
        return [[float(len(text))] for text in texts]

    async def aembed(self, texts: Sequence[str], **keywords: Any) -> list[list[float]]:
        return self.embed(texts, **keywords)


class ChunkingEngine(PlainEngine):
    """An engine that also takes ``chunk`` and says so (what makes it a ``ChunkingEngine``)."""

    chunks_long_texts = True

    def embed(  # type: ignore[override]
        self, texts: Sequence[str], *, chunk: bool = False, **keywords: Any
    ) -> list[list[float]]:
        return super().embed(texts, chunk=chunk, **keywords)

    async def aembed(  # type: ignore[override]
        self, texts: Sequence[str], *, chunk: bool = False, **keywords: Any
    ) -> list[list[float]]:
        return self.embed(texts, chunk=chunk, **keywords)


class Counter:
    def __init__(self) -> None:
        self.updates: list[int] = []

    def update(self, n: int) -> None:
        self.updates.append(n)


def embed_both(engine: Any, texts: Any, settings: EmbeddingSettings) -> list[Any]:
    """The vectors (or error) of ``embed_texts``, then of ``aembed_texts``, with the progress
    updates each made."""
    binding = EngineBinding(model=None, settings={}, engine=engine)
    outcomes: list[Any] = []
    for run in ("sync", "async"):
        progress = Counter()
        try:
            if run == "sync":
                vectors = embed_texts(binding, texts, settings, progress=progress)
            else:
                vectors = asyncio.run(aembed_texts(binding, texts, settings, progress=progress))
        except InvalidRequestError as error:
            outcomes.append(str(error))
        else:
            outcomes.append((vectors, progress.updates))
    return outcomes


def test_texts_go_in_batches_in_order_with_progress_per_batch() -> None:
    engine = PlainEngine()
    texts = ["a", "bb", "ccc", "dddd", "eeeee"]
    settings = EmbeddingSettings(batch_size=2, timeout=3.0)
    expected = ([[1.0], [2.0], [3.0], [4.0], [5.0]], [2, 2, 1])
    assert embed_both(engine, texts, settings) == [expected, expected]
    batches = [texts for texts, _ in engine.calls]
    assert batches == [["a", "bb"], ["ccc", "dddd"], ["eeeee"]] * 2
    keywords = {"normalize": True, "truncate": False, "timeout": 3.0}
    assert all(called == keywords for _, called in engine.calls)  # no chunk keyword


def test_chunk_is_passed_only_when_asked_for() -> None:
    settings = EmbeddingSettings(chunk_long_texts=True, truncate=True)
    engine = ChunkingEngine()
    assert embed_both(engine, ["a"], settings) == [([[1.0]], [1])] * 2
    keywords = {"chunk": True, "normalize": True, "truncate": True, "timeout": None}
    assert [called for _, called in engine.calls] == [keywords] * 2


def test_an_empty_list_is_refused_before_the_engine_is_asked() -> None:
    engine = PlainEngine()
    refusal = "got an empty list of texts: pass at least one text"
    assert embed_both(engine, [], EmbeddingSettings()) == [refusal, refusal]
    assert engine.calls == []


def test_a_single_string_goes_to_the_engine_as_it_is() -> None:
    engine = PlainEngine()
    embed_both(engine, "abc", EmbeddingSettings(batch_size=1))
    assert [texts for texts, _ in engine.calls] == [["a", "b", "c"]] * 2


@pytest.mark.parametrize("size", [1, 3, 256])
def test_every_batch_size_gives_the_same_vectors(size: int) -> None:
    texts = [str(n) * n for n in range(1, 8)]
    outcomes = embed_both(PlainEngine(), texts, EmbeddingSettings(batch_size=size))
    assert outcomes[0][0] == outcomes[1][0] == [[float(n)] for n in range(1, 8)]


def test_an_engine_that_cannot_chunk_is_refused_with_a_clear_error() -> None:
    # Like a RemoteEngine: an embed that takes no ``chunk``.
    refusal = "PlainEngine cannot chunk long texts: use a local Engine, or truncate"
    outcomes = embed_both(PlainEngine(), ["a"], EmbeddingSettings(chunk_long_texts=True))
    assert outcomes == [refusal, refusal]
