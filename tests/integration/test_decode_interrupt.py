"""A decode stopped while it runs leaves the cache as it was, and decodes again to the same
logits or vectors (``engine/native/interrupt.py``; the engine's stall watch relies on both)."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path

import llama_cpp
import numpy as np
import pytest

from llamacpp_integrations.engine.batch import BatchEntry
from llamacpp_integrations.engine.native.embedder import EmbeddingContext
from llamacpp_integrations.engine.native.interrupt import DecodeInterrupted
from llamacpp_integrations.engine.native.runner import DecodeStatus, GenerationContext
from llamacpp_integrations.engine.native.weights import LoadedModel

PROMPT = [(i * 37) % 5000 + 10 for i in range(400)]


@pytest.fixture(scope="module")
def model(smollm_path: Path) -> Iterator[LoadedModel]:
    loaded = LoadedModel(smollm_path)
    yield loaded
    loaded.close()


def _context(model: LoadedModel, *, interruptible: bool) -> GenerationContext:
    return GenerationContext(
        model,
        n_cells=1024,
        n_seq_max=1,
        n_batch=512,
        n_threads=2,
        flash_attention=False,
        kv_unified=True,
        interruptible=interruptible,
    )


def _decode(context: GenerationContext, tokens: list[int], start: int) -> int:
    return context.decode([BatchEntry(0, tokens, start, logits_last=True)])


def _last_logits(context: GenerationContext) -> np.ndarray:
    return context.logits_view(len(PROMPT) - 1).copy()


def test_a_stopped_decode_leaves_the_cache_and_decodes_again_alike(model: LoadedModel) -> None:
    plain = _context(model, interruptible=False)
    context = _context(model, interruptible=True)
    try:
        assert _decode(plain, PROMPT, 0) == DecodeStatus.OK
        expected = _last_logits(plain)
        nxt = int(expected.argmax())
        assert _decode(plain, [nxt], len(PROMPT)) == DecodeStatus.OK
        expected_next = plain.logits_view(0).copy()

        # Stopped from another thread while it runs (a prompt read takes far longer than
        # the first node, so the request lands mid-graph or, at worst, before it).
        timer = threading.Timer(0.05, context.interrupt)
        timer.start()
        with pytest.raises(DecodeInterrupted):
            _decode(context, PROMPT, 0)
        timer.join()
        assert context.pos_range(0)[1] == -1  # nothing of the batch stayed in the cache
        assert _decode(context, PROMPT, 0) == DecodeStatus.OK
        assert np.array_equal(_last_logits(context), expected)

        # One token's step, stopped before it starts: the sequence keeps its prompt only.
        context.interrupt()
        with pytest.raises(DecodeInterrupted):
            _decode(context, [nxt], len(PROMPT))
        assert context.pos_range(0) == (0, len(PROMPT) - 1)
        assert _decode(context, [nxt], len(PROMPT)) == DecodeStatus.OK
        assert np.array_equal(context.logits_view(0), expected_next)

        # A request taken down before the decode stops nothing.
        context.interrupt()
        context.clear_interrupt()
        assert _decode(context, [nxt + 1], len(PROMPT) + 1) == DecodeStatus.OK
    finally:
        plain.close()
        context.close()


def test_a_context_made_without_it_ignores_the_request(model: LoadedModel) -> None:
    context = _context(model, interruptible=False)
    try:
        context.interrupt()
        assert _decode(context, PROMPT[:8], 0) == DecodeStatus.OK
    finally:
        context.close()


def test_a_stopped_embedding_decode_embeds_again_alike(model: LoadedModel) -> None:
    texts = [PROMPT[:300], PROMPT[100:200], PROMPT[7:9]]

    def embedder(interruptible: bool) -> EmbeddingContext:
        return EmbeddingContext(
            model,
            pooling=llama_cpp.LLAMA_POOLING_TYPE_MEAN,
            n_ctx=512,
            n_seq_max=4,
            n_threads=2,
            interruptible=interruptible,
        )

    plain, context = embedder(False), embedder(True)
    try:
        expected = plain.embed(texts)
        timer = threading.Timer(0.02, context.interrupt)
        timer.start()
        with pytest.raises(DecodeInterrupted):
            context.embed(texts)
        timer.join()
        for got, want in zip(context.embed(texts), expected, strict=True):
            assert np.array_equal(got, want)
    finally:
        plain.close()
        context.close()
