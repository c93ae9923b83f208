"""The adapters' embedding calls over scripted engines: batches of ``batch_size`` texts in
order, progress per batch, ``chunk`` only where asked for, and the same outcome sync and
async."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from llamacpp_integrations.client.binding import EngineBinding
from llamacpp_integrations.client.embedding import (
    EmbeddingSettings,
    aembed_texts,
    embed_texts,
)
from llamacpp_integrations.errors import InvalidRequestError
from llamacpp_integrations.testing import ScriptedChunkingEngine, ScriptedEngine


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
    engine = ScriptedEngine()
    texts = ["a", "bb", "ccc", "dddd", "eeeee"]
    settings = EmbeddingSettings(batch_size=2, timeout=3.0)
    expected = (ScriptedEngine().embed(texts), [2, 2, 1])
    assert embed_both(engine, texts, settings) == [expected, expected]
    batches = [texts for texts, _ in engine.embedded]
    assert batches == [["a", "bb"], ["ccc", "dddd"], ["eeeee"]] * 2
    keywords = {"normalize": True, "truncate": False, "timeout": 3.0}
    assert all(called == keywords for _, called in engine.embedded)  # no chunk keyword


def test_chunk_is_passed_only_when_asked_for() -> None:
    settings = EmbeddingSettings(chunk_long_texts=True, truncate=True)
    engine = ScriptedChunkingEngine()
    assert embed_both(engine, ["a"], settings) == [(ScriptedEngine().embed(["a"]), [1])] * 2
    keywords = {"chunk": True, "normalize": True, "truncate": True, "timeout": None}
    assert [called for _, called in engine.embedded] == [keywords] * 2


def test_an_empty_list_is_refused_before_the_engine_is_asked() -> None:
    engine = ScriptedEngine()
    refusal = "got an empty list of texts: pass at least one text"
    assert embed_both(engine, [], EmbeddingSettings()) == [refusal, refusal]
    assert engine.embedded == []


def test_a_single_string_goes_to_the_engine_as_it_is() -> None:
    engine = ScriptedEngine()
    embed_both(engine, "abc", EmbeddingSettings(batch_size=1))
    assert [texts for texts, _ in engine.embedded] == [["a", "b", "c"]] * 2


@pytest.mark.parametrize("size", [1, 3, 256])
def test_every_batch_size_gives_the_same_vectors(size: int) -> None:
    texts = [str(n) * n for n in range(1, 8)]
    outcomes = embed_both(ScriptedEngine(), texts, EmbeddingSettings(batch_size=size))
    assert outcomes[0][0] == outcomes[1][0] == ScriptedEngine().embed(texts)


def test_an_engine_that_cannot_chunk_is_refused_with_a_clear_error() -> None:
    # Like a RemoteEngine: an embed that takes no ``chunk``.
    refusal = "ScriptedEngine cannot chunk long texts: use a local Engine, or truncate"
    outcomes = embed_both(ScriptedEngine(), ["a"], EmbeddingSettings(chunk_long_texts=True))
    assert outcomes == [refusal, refusal]
