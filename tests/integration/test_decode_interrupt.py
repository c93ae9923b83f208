"""A decode stopped while it runs leaves the cache as it was, and decodes again to the same
logits or vectors (``engine/native/interrupt.py``; the engine's stall watch relies on both),
and every kind of decode the stall watch may stop runs through the ``DecodeRun`` it is given."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterator
from pathlib import Path

import llama_cpp
import numpy as np
import pytest

from llamacpp_integrations.engine import (
    ChatMessage,
    ChatRequest,
    Engine,
    EngineConfig,
    EngineStats,
    SamplingParams,
)
from llamacpp_integrations.engine.batch import BatchEntry
from llamacpp_integrations.engine.native.embedder import EmbeddingContext
from llamacpp_integrations.engine.native.interrupt import DecodeInterrupted
from llamacpp_integrations.engine.native.runner import (
    DecodeStatus,
    GenerationContext,
    NativeContext,
)
from llamacpp_integrations.engine.native.weights import LoadedModel
from llamacpp_integrations.engine.sizing import ContextChoice
from llamacpp_integrations.engine.speculation.draft_model import DraftModel
from llamacpp_integrations.engine.speculation.drafts import DraftWant
from llamacpp_integrations.engine.worker.decode_threads import DecodeThreads

from .helpers import wait_for

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


def test_a_stopped_decode_leaves_the_cache_and_decodes_again_alike(
    model: LoadedModel, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG, "llamacpp_integrations.llama_cpp")
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
        # llama.cpp told of the stops, as debug lines: a stop asked for is no error or warning.
        told = [r for r in caplog.records if "compute status: 1" in r.getMessage()]
        assert len(told) == 2
        assert [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING] == []
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


class StopEveryDecodeOnce:
    """A ``DecodeRun`` that stops each decode before it starts and runs it again, as the stall
    watch does with one whose threads lost their cores; it counts the stops."""

    def __init__(self) -> None:
        self.stopped = 0

    def __call__(self, context: NativeContext, decode: Callable[[], int]) -> int:
        context.interrupt()
        try:
            return decode()
        except DecodeInterrupted:
            self.stopped += 1
            return decode()


def test_a_draft_model_s_stopped_decodes_draft_again_alike(
    model: LoadedModel, smollm_path: Path
) -> None:
    config = EngineConfig(model=str(smollm_path), n_seq_max=2, n_threads=2)
    kv = ContextChoice(
        n_ctx_per_seq=1024, n_seq_max=2, kv_bytes_per_cell=None, budget_bytes=None,
        reason="test", unified=True, n_cells=2048,
    )  # fmt: skip
    stopping = StopEveryDecodeOnce()
    plain = DraftModel(model, model, config, kv=kv)
    watched = DraftModel(model, model, config, kv=kv, run=stopping)
    # The target's own weights draft for it; two sequences, the second catching up on a prompt
    # longer than the first, then one decode per drafted position for both together.
    wants = [DraftWant(0, PROMPT[:40], 7, 4), DraftWant(1, PROMPT[:90], 9, 3)]
    try:
        expected = plain.draft(wants)
        assert [len(expected[0]), len(expected[1])] == [4, 3]
        assert watched.draft(wants) == expected
        assert stopping.stopped == 4  # one catch-up decode, then three drafted positions
        assert [watched.cells(0), watched.cells(1)] == [plain.cells(0), plain.cells(1)]
    finally:
        plain.close()
        watched.close()


def test_an_engine_whose_every_decode_is_stopped_once_answers_alike_and_realigns(
    smollm_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """What the stall watch may do to any decode of the engine (a chat step, the draft
    model's, an idle re-read of an answer), done to every one: the answers stay the same."""
    config = EngineConfig(
        model=str(smollm_path), n_seq_max=2, n_ctx_per_seq=1024, n_threads=2,
        speculative="draft", speculative_draft_model=str(smollm_path),
    )  # fmt: skip
    question = ChatMessage(role="user", content="Write a long story about a lighthouse keeper.")
    greedy = SamplingParams(temperature=0.0)

    def answers(engine: Engine) -> tuple[list[int], list[int], int]:
        first = engine.generate(ChatRequest(messages=[question], max_tokens=150, sampling=greedy))
        assert first.finish_reason == "length"
        held = first.usage.prompt_tokens + first.usage.completion_tokens - 1
        edge = held // config.prefill_block_size * config.prefill_block_size

        def realigned(stats: EngineStats) -> bool:
            return any(slot.cached_tokens == edge and not slot.busy for slot in stats.slots)

        before = stopping.stopped
        assert realigned(wait_for(engine, realigned))
        realign_stops = stopping.stopped - before
        follow_up = ChatRequest(
            messages=[
                question,
                ChatMessage(role="assistant", content=first.text),
                ChatMessage(role="user", content="Once more, shorter."),
            ],
            max_tokens=24,
            sampling=greedy,
        )
        again = engine.generate(follow_up)
        assert again.usage.cached_prompt_tokens >= edge - config.prefill_block_size
        return list(first.token_ids), list(again.token_ids), realign_stops

    stopping = StopEveryDecodeOnce()
    with Engine(config) as engine:
        expected = answers(engine)
    assert stopping.stopped == 0

    made = DecodeThreads.__init__

    def watched(self: DecodeThreads, *args: object, **kwargs: object) -> None:
        made(self, *args, **kwargs)  # type: ignore[arg-type]
        self.watched = True  # the contexts take stop requests, as where the watch runs

    monkeypatch.setattr(DecodeThreads, "__init__", watched)

    def stopped_run(self: DecodeThreads, context: NativeContext, decode: Callable[[], int]) -> int:
        return stopping(context, decode)

    monkeypatch.setattr(DecodeThreads, "run", stopped_run)
    with Engine(config) as engine:
        got = answers(engine)
        assert engine.stats().drafted_tokens > 0  # the draft model drafted
    assert got[:2] == expected[:2]
    assert got[2] > 0  # the re-reads while idle were stopped and read again too
    assert stopping.stopped > 150  # every chat and draft decode besides
