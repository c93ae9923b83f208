"""Every way a request can end early frees its sequence, and the engine serves the next one."""

from __future__ import annotations

import asyncio
import contextlib
import gc
from collections.abc import Iterator
from pathlib import Path

import pytest

from llamacpp_integrations.engine import Engine, EngineConfig, InferenceEngine
from llamacpp_integrations.errors import RequestCancelledError, RequestTimeoutError

from .helpers import chat, idle_and_freed, rss_bytes, wait_for

LONG = "Tell me everything you know about the history of the Roman Empire. " * 40


@pytest.fixture(scope="module")
def small_batch_engine(smollm_path: Path) -> Iterator[Engine]:
    """Small steps (64 tokens) so a long prompt takes many steps and a cancel can land inside."""
    config = EngineConfig(model=str(smollm_path), n_seq_max=4, n_ctx_per_seq=2048, n_batch=64)
    with Engine(config) as engine:
        yield engine


@pytest.fixture(params=["local", pytest.param("remote", marks=pytest.mark.remote)])
def any_small_batch_engine(request: pytest.FixtureRequest) -> InferenceEngine:
    """The small-batch local engine, and a RemoteEngine (live only: a cassette cannot replay a
    stream closed half-way or a timeout)."""
    if request.param == "local":
        local: InferenceEngine = request.getfixturevalue("small_batch_engine")
        return local
    request.getfixturevalue("live_remote")
    remote: InferenceEngine = request.getfixturevalue("remote_engine")
    return remote


def _served_after(engine: InferenceEngine) -> None:
    result = engine.generate(chat("Say hi.", max_tokens=4))
    assert result.finish_reason in ("stop", "length")


def test_cancel_mid_prompt(small_batch_engine: Engine) -> None:
    engine = small_batch_engine
    handle = engine.submit(chat(LONG, max_tokens=16))
    n_prompt = len(engine.prompt_tokens(chat(LONG)))
    mid = wait_for(
        engine,
        lambda s: any(0 < slot.cached_tokens < n_prompt - 64 for slot in s.slots if slot.busy),
    )
    assert any(slot.busy for slot in mid.slots), "the prompt finished before the cancel"
    handle.cancel()
    chunks = list(handle)
    assert chunks[-1].finish_reason == "cancelled"
    assert chunks[-1].usage is not None and chunks[-1].usage.completion_tokens == 0
    assert idle_and_freed(wait_for(engine, idle_and_freed))
    _served_after(engine)


def test_cancel_mid_generation(small_batch_engine: Engine) -> None:
    engine = small_batch_engine
    handle = engine.submit(chat("Write a long essay.", max_tokens=500, ignore_eos=True))
    seen = []
    for chunk in handle:
        seen.append(chunk)
        if len(seen) == 5:
            handle.cancel()
    assert seen[-1].finish_reason == "cancelled"
    assert 5 <= seen[-1].usage.completion_tokens < 500  # type: ignore[union-attr]
    with pytest.raises(RequestCancelledError):
        handle.result()  # a finished handle has nothing left: reading it again says cancelled
    assert idle_and_freed(wait_for(engine, idle_and_freed))
    _served_after(engine)


def test_breaking_out_of_a_stream_cancels(any_small_batch_engine: InferenceEngine) -> None:
    small_batch_engine = any_small_batch_engine
    engine = small_batch_engine
    stream = engine.stream(chat("Write a long essay.", max_tokens=500, ignore_eos=True))
    for i, _ in enumerate(stream):
        if i == 3:
            break
    del stream
    gc.collect()
    stats = wait_for(engine, idle_and_freed)
    assert idle_and_freed(stats)
    _served_after(engine)


async def test_cancelling_the_asyncio_task_cancels(any_small_batch_engine: InferenceEngine) -> None:
    small_batch_engine = any_small_batch_engine
    engine = small_batch_engine
    started = asyncio.Event()

    async def consume() -> None:
        async for _ in engine.astream(chat("Write a long essay.", max_tokens=500, ignore_eos=True)):
            started.set()

    task = asyncio.create_task(consume())
    await started.wait()
    task.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await task
    stats = await asyncio.to_thread(wait_for, engine, idle_and_freed)
    assert idle_and_freed(stats)
    result = await engine.agenerate(chat("Say hi.", max_tokens=4))
    assert result.finish_reason in ("stop", "length")


async def test_cancelling_agenerate_cancels(any_small_batch_engine: InferenceEngine) -> None:
    small_batch_engine = any_small_batch_engine
    engine = small_batch_engine
    task = asyncio.create_task(
        engine.agenerate(chat("Write a long essay.", max_tokens=500, ignore_eos=True))
    )
    await asyncio.to_thread(wait_for, engine, lambda s: s.running == 1)
    task.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await task
    assert idle_and_freed(await asyncio.to_thread(wait_for, engine, idle_and_freed))


def test_timeout_ends_the_request_with_its_partial_text(
    any_small_batch_engine: InferenceEngine,
) -> None:
    small_batch_engine = any_small_batch_engine
    engine = small_batch_engine
    with pytest.raises(RequestTimeoutError) as caught:
        engine.generate(chat("Write a long essay.", max_tokens=900, ignore_eos=True, timeout=0.5))
    assert caught.value.request_id is not None
    assert isinstance(caught.value.partial_text, str)
    assert idle_and_freed(wait_for(engine, idle_and_freed))
    _served_after(engine)


def test_a_hundred_cancellations_leave_memory_flat(small_batch_engine: Engine) -> None:
    engine = small_batch_engine

    def cancel_some(n: int) -> None:
        for i in range(n):
            handle = engine.submit(
                chat(f"Story number {i}: once upon a time", max_tokens=200, ignore_eos=True)
            )
            for j, _ in enumerate(handle):
                if j == 1:
                    handle.cancel()
            assert handle.done

    cancel_some(10)  # warm-up: allocator pools and caches reach their working size
    gc.collect()
    before = rss_bytes()
    cancel_some(100)
    gc.collect()
    after = rss_bytes()
    stats = wait_for(engine, idle_and_freed)
    assert idle_and_freed(stats)
    assert stats.waiting == 0
    # Flat: a leak of one KV sequence or sampler per request would show far above this.
    assert after - before < 20 * 2**20, (before, after)
