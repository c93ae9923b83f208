"""Embeddings on a second context over the same weights: one vector per text, batched."""

from __future__ import annotations

import asyncio
import gc
import math
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import pytest

from llamacpp_integrations.engine import (
    Engine,
    EngineConfig,
    InferenceEngine,
    live_engines,
    shared_engine,
)
from llamacpp_integrations.errors import ContextOverflowError, InvalidRequestError

from .helpers import chat, rss_bytes

TEXTS = [
    "The Nile flows north through Egypt into the Mediterranean Sea.",
    "Mount Everest is the highest mountain above sea level.",
    "Photosynthesis turns light into chemical energy in plants.",
    "The Amazon rainforest spans several South American countries.",
    "",
    "Ünïcödé and emoji 🚀 are fine too.",
]


def _cosine(a: list[float], b: list[float]) -> float:
    dot = sum(x * y for x, y in zip(a, b, strict=True))
    return dot / math.sqrt(sum(x * x for x in a) * sum(y * y for y in b))


def test_one_normalised_vector_of_plain_floats_per_text(any_engine: InferenceEngine) -> None:
    engine = any_engine
    vectors = engine.embed(TEXTS)
    assert len(vectors) == len(TEXTS)
    for vector in vectors:
        assert len(vector) == engine.info.n_embd == 576
        assert all(type(x) is float for x in vector)
        assert math.isclose(math.fsum(x * x for x in vector), 1.0, rel_tol=1e-6)
    raw = engine.embed(TEXTS[:1], normalize=False)[0]
    assert not math.isclose(math.fsum(x * x for x in raw), 1.0, rel_tol=1e-3)
    assert _cosine(raw, vectors[0]) > 0.9999


def test_batched_equals_one_by_one(any_engine: InferenceEngine) -> None:
    engine = any_engine
    batched = engine.embed(TEXTS)
    for text, vector in zip(TEXTS, batched, strict=True):
        alone = engine.embed([text])[0]
        assert _cosine(alone, vector) > 0.999
        assert max(abs(a - b) for a, b in zip(alone, vector, strict=True)) < 1e-2


async def test_concurrent_callers_get_their_own_texts_vectors(any_engine: InferenceEngine) -> None:
    # llama-server (tested build) gives texts it embeds side by side in different slots wrong
    # vectors; the remote engine sends one at a time, so callers at once still get their own.
    engine = any_engine
    alone = [engine.embed([text])[0] for text in TEXTS]
    gathered = await asyncio.gather(*(engine.aembed([text]) for text in TEXTS))
    with ThreadPoolExecutor(max_workers=len(TEXTS)) as pool:
        threaded = list(pool.map(lambda text: engine.embed([text, text]), TEXTS))
    for expected, [from_task], pair in zip(alone, gathered, threaded, strict=True):
        assert _cosine(expected, from_task) > 0.999
        assert all(_cosine(expected, vector) > 0.999 for vector in pair)


def test_many_texts_span_several_batches(any_engine: InferenceEngine) -> None:
    engine = any_engine
    texts = [f"Sentence number {i} is about topic {i % 7}." for i in range(70)]
    vectors = engine.embed(texts)
    assert len(vectors) == 70
    assert _cosine(vectors[3], engine.embed([texts[3]])[0]) > 0.999


def test_retrieval_ranks_the_right_text_first(any_engine: InferenceEngine) -> None:
    engine = any_engine
    query, *docs = engine.embed(["Which river flows into the Mediterranean?", *TEXTS[:4]])
    scores = [_cosine(query, d) for d in docs]
    assert scores.index(max(scores)) == 0


async def test_async_embeddings_run_beside_generation(any_engine: InferenceEngine) -> None:
    engine = any_engine
    generation = asyncio.create_task(engine.agenerate(chat("Write a poem.", max_tokens=40)))
    vectors = await asyncio.gather(*(engine.aembed([t]) for t in TEXTS[:4]))
    assert [len(v) for v in vectors] == [1, 1, 1, 1]
    assert (await generation).usage.completion_tokens > 0


def test_over_long_texts_follow_the_policy(smollm_path: Path) -> None:
    config = EngineConfig(model=str(smollm_path), n_seq_max=1, embedding_n_ctx=64)
    with Engine(config) as engine:
        long_text = "many words " * 100
        with pytest.raises(ContextOverflowError, match="truncate=True"):
            engine.embed([long_text])
        truncated = engine.embed([long_text], truncate=True)[0]
        assert len(truncated) == 576
        with pytest.raises(InvalidRequestError):
            engine.embed([])
        with pytest.raises(InvalidRequestError):
            engine.embed("not a list")  # type: ignore[arg-type]


@pytest.mark.vcr
@pytest.mark.remote
def test_over_long_texts_follow_the_policy_remotely(remote_engine: InferenceEngine) -> None:
    # The embeddings server takes at most 512 tokens a text (its slot context and batch).
    long_text = "many words " * 300
    with pytest.raises(ContextOverflowError, match=r"text 1 .*truncate=True"):
        remote_engine.embed(["short", long_text])
    truncated = remote_engine.embed([long_text], truncate=True)[0]
    assert len(truncated) == 576
    with pytest.raises(InvalidRequestError):
        remote_engine.embed([])


def test_registry_shares_one_engine_and_one_copy_of_the_weights(smollm_path: Path) -> None:
    config = EngineConfig(model=str(smollm_path), n_seq_max=2, n_ctx_per_seq=512)
    chat_side = shared_engine(config)
    chat_side.generate(chat("Hi", max_tokens=1))  # contexts are made on first use
    before = rss_bytes()
    embed_side = shared_engine(EngineConfig(model=str(smollm_path), n_seq_max=2, n_ctx_per_seq=512))
    assert embed_side is chat_side
    assert len(embed_side.embed(["hello"])[0]) == 576
    assert chat_side.generate(chat("Hi", max_tokens=2)).usage.completion_tokens > 0
    # The embedding context's first use costs tens of MiB (its KV cells and buffers); a second
    # copy of the weights would add the whole file on top of that.
    assert rss_bytes() - before < smollm_path.stat().st_size
    assert chat_side in live_engines()
    # Dropping every holder closes the engine and frees it.
    del chat_side, embed_side
    gc.collect()
    assert all(e.config.n_ctx_per_seq != 512 or e.config.n_seq_max != 2 for e in live_engines())


def test_any_context_size_packs_many_short_texts(smollm_path: Path) -> None:
    # 100 is no multiple of the 128 sequences a decode may hold: the context is rounded up
    config = EngineConfig(model=str(smollm_path), n_seq_max=1, embedding_n_ctx=100)
    with Engine(config) as engine:
        texts = [f"word {i}" for i in range(300)]
        vectors = engine.embed(texts)
        assert len(vectors) == 300
        alone = np.asarray(engine.embed([texts[7]])[0])
        packed = np.asarray(vectors[7])  # batched kernels round differently
        assert float(alone @ packed) / float(np.linalg.norm(alone) * np.linalg.norm(packed)) > 0.99


def test_texts_longer_than_one_cpu_decode_go_alone_among_short_ones(smollm_path: Path) -> None:
    # On the CPU a decode holds EMBED_TOKENS_ON_CPU tokens; longer texts take one decode each,
    # the short ones are packed around them, and every vector lands at its own text's index.
    from llamacpp_integrations.engine.embedding.work import EMBED_TOKENS_ON_CPU

    with Engine(EngineConfig(model=str(smollm_path), n_seq_max=1)) as engine:
        long_text = " ".join(["the river runs past the old mill"] * 60)
        assert len(engine.tokenize(long_text)) > EMBED_TOKENS_ON_CPU
        texts = [f"short text {i}" for i in range(20)]
        texts[3] = long_text
        texts[11] = long_text + " and on"
        vectors = engine.embed(texts)
        assert len(vectors) == len(texts)
        for index in (3, 11, 12):
            alone = engine.embed([texts[index]])[0]
            assert _cosine(alone, vectors[index]) > 0.99
        assert _cosine(vectors[3], vectors[12]) < 0.99
