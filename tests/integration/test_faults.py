"""Injected faults: each ends in a typed error for the requests it touches, never a crash or a
hang, and the engine either keeps serving or (after a worker failure) reports itself closed.

Real conditions where one can be made (a context too small, broken files, a closed event
loop, a real SIGINT); the one seam used is the engine's own: a function run on its worker
between steps (``Inbox.call``, the way ``clear_cache`` runs), to raise inside the worker.
"""

from __future__ import annotations

import asyncio
import gc
import signal
import struct
import threading
import time
from pathlib import Path
from typing import Any

import pytest
from gguf import GGUFWriter

from llamacpp_integrations.engine import (
    ChatMessage,
    ChatRequest,
    CompletionRequest,
    Engine,
    EngineConfig,
)
from llamacpp_integrations.errors import (
    ContextOverflowError,
    EngineClosedError,
    InvalidRequestError,
    LlamaCppIntegrationError,
    ModelLoadError,
    RequestCancelledError,
)

from .helpers import chat, idle_and_freed, wait_for


def long() -> ChatRequest:
    """A request that runs for a while (a fresh one each time: ids must not repeat)."""
    return chat("Write a long story about a lighthouse keeper.", max_tokens=300, ignore_eos=True)


def _still_serving(engine: Engine) -> None:
    assert engine.generate(chat("Say hi.", max_tokens=4)).finish_reason in ("stop", "length")
    assert idle_and_freed(wait_for(engine, idle_and_freed))


def _own_weights(model: Path, **settings: Any) -> EngineConfig:
    """A config whose weights no other test's engine shares (not memory-mapped): a worker
    failure closes every engine on that worker, and the session's engine must survive."""
    return EngineConfig(model=str(model), use_mmap=False, **settings)


def _raise_on_worker(engine: Engine, error: BaseException) -> None:
    """Make the worker raise ``error`` at its next look at the inbox (the engine's own seam)."""

    def boom(core: Any) -> None:
        raise error

    engine._inbox.call(boom)


# ---- the KV cache full, and memory pressure ----------------------------------------------


def test_a_full_kv_cache_fails_nothing_that_fits(smollm_path: Path) -> None:
    """One small unified KV buffer shared by four sequences, kept full by idle prefix caches
    and long running requests: every request finishes (the engine evicts idle caches when a
    step finds no room), or is refused up front as too long."""
    config = EngineConfig(
        model=str(smollm_path), n_seq_max=4, n_ctx_per_seq=256, kv_unified=True, max_queued=64
    )
    with Engine(config) as engine:
        words = "one two three four five six seven eight nine ten " * 18
        # Fill every slot's cache with a distinct long prefix left behind idle.
        for i in range(4):
            engine.generate(chat(f"{i} {words}", max_tokens=8))
        handles = [
            engine.submit(chat(f"{i} {words} again", max_tokens=40, ignore_eos=True))
            for i in range(8)
        ] + [engine.submit(chat(f"short {i}", max_tokens=120, ignore_eos=True)) for i in range(4)]
        outcomes = []
        for handle in handles:
            try:
                outcomes.append(handle.result().finish_reason)
            except LlamaCppIntegrationError as error:
                outcomes.append(type(error).__name__)
        assert set(outcomes) <= {"stop", "length"}, outcomes
        _still_serving(engine)


def test_a_prompt_longer_than_the_context_is_refused(engine: Engine) -> None:
    with pytest.raises(ContextOverflowError):
        engine.generate(chat("word " * 3000, max_tokens=4))
    _still_serving(engine)


def test_a_megabyte_prompt_is_refused_without_harm(engine: Engine) -> None:
    text = ("The quick brown fox jumps over the lazy dog. " * 23302)[: 2**20]
    with pytest.raises(ContextOverflowError):
        engine.generate(chat(text, max_tokens=4))
    with pytest.raises(ContextOverflowError):
        engine.generate(CompletionRequest(prompt=text, max_tokens=4))
    with pytest.raises(ContextOverflowError):
        engine.embed([text])
    _still_serving(engine)


# ---- the worker fails ---------------------------------------------------------------------


@pytest.mark.parametrize("error", [RuntimeError("injected"), MemoryError()])
def test_an_exception_in_the_worker_fails_everything_and_closes(
    smollm_path: Path, error: BaseException, engine: Engine
) -> None:
    other = engine  # over the same file, on another worker: untouched by this one's failure
    engine = Engine(_own_weights(smollm_path, n_seq_max=2, n_ctx_per_seq=512))
    running = [engine.submit(long()) for _ in range(2)]
    waiting = [engine.submit(long(), queue_timeout=None) for _ in range(3)]
    assert wait_for(engine, lambda stats: stats.steps > 0).steps > 0  # generating
    _raise_on_worker(engine, error)
    for handle in running + waiting:
        with pytest.raises(EngineClosedError, match="worker failed"):
            handle.result()
    assert engine.closed
    with pytest.raises(EngineClosedError):
        engine.generate(chat("Hello"))
    with pytest.raises(EngineClosedError):
        engine.embed(["Hello"])
    engine.close()  # returns (the worker is gone), and again
    engine.close()
    # Nothing of the dead engine is left in the way of a new one over the same weights.
    with Engine(_own_weights(smollm_path, n_seq_max=2, n_ctx_per_seq=512)) as fresh:
        _still_serving(fresh)
    _still_serving(other)


async def test_an_exception_in_the_worker_reaches_async_callers(smollm_path: Path) -> None:
    engine = Engine(_own_weights(smollm_path, n_seq_max=1, n_ctx_per_seq=512))
    try:
        stream = engine.astream(long())
        await stream.__anext__()
        queued = asyncio.ensure_future(engine.agenerate(long()))
        await asyncio.sleep(0.1)
        _raise_on_worker(engine, RuntimeError("injected"))
        with pytest.raises(EngineClosedError):
            async for _ in stream:
                pass
        with pytest.raises(EngineClosedError):
            await queued
        with pytest.raises(EngineClosedError):
            await engine.aembed(["x"])
    finally:
        engine.close()


# ---- close() at awkward moments -----------------------------------------------------------


def test_close_during_a_stream_twice_and_from_another_thread(smollm_path: Path) -> None:
    engine = Engine(EngineConfig(model=str(smollm_path), n_seq_max=2, n_ctx_per_seq=512))
    handle = engine.submit(long())
    assert wait_for(engine, lambda stats: stats.steps > 0).steps > 0
    closers = [threading.Thread(target=engine.close) for _ in range(3)]
    for closer in closers:
        closer.start()
    for closer in closers:
        closer.join(60)
        assert not closer.is_alive()
    with pytest.raises(EngineClosedError):
        handle.result()
    engine.close()
    assert engine.closed


def test_close_from_inside_the_stream_loop(smollm_path: Path) -> None:
    """Closing the engine from the consumer's own loop body (an adapter's callback)."""
    engine = Engine(EngineConfig(model=str(smollm_path), n_seq_max=2, n_ctx_per_seq=512))
    seen = 0
    with pytest.raises(EngineClosedError):
        for _ in engine.stream(long()):
            seen += 1
            if seen == 2:
                engine.close()
    assert engine.closed


async def test_close_from_inside_an_async_stream(smollm_path: Path) -> None:
    engine = Engine(EngineConfig(model=str(smollm_path), n_seq_max=2, n_ctx_per_seq=512))
    with pytest.raises(EngineClosedError):
        async for _ in engine.astream(long()):
            engine.close()
    assert engine.closed


def test_close_while_another_engine_loads_the_same_weights(smollm_path: Path) -> None:
    """Engines built and closed from several threads at once over one file: each either
    serves or was closed; none hangs, and the weights are loaded once at a time."""
    config = EngineConfig(model=str(smollm_path), n_seq_max=1, n_ctx_per_seq=256)
    results: list[str] = []

    def build_and_close(serve: bool) -> None:
        engine = Engine(config)
        try:
            if serve:
                results.append(engine.generate(chat("Hi", max_tokens=4)).finish_reason)
        finally:
            engine.close()
            results.append("closed")

    threads = [threading.Thread(target=build_and_close, args=(i % 2 == 0,)) for i in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(120)
        assert not thread.is_alive()
    assert results.count("closed") == 4 and len(results) == 6


# ---- callers that go away ---------------------------------------------------------------


def test_an_event_loop_closed_with_a_stream_open(smollm_path: Path) -> None:
    with Engine(EngineConfig(model=str(smollm_path), n_seq_max=2, n_ctx_per_seq=512)) as engine:
        loop = asyncio.new_event_loop()

        async def start() -> Any:
            stream = engine.astream(long())
            await stream.__anext__()
            return stream

        stream = loop.run_until_complete(start())
        loop.close()  # the stream is never finished nor closed
        del stream
        gc.collect()
        assert idle_and_freed(wait_for(engine, idle_and_freed))
        _still_serving(engine)


def test_keyboard_interrupt_mid_stream_cancels_the_request(smollm_path: Path) -> None:
    if threading.current_thread() is not threading.main_thread():
        pytest.skip("SIGINT reaches the main thread only")
    # Python's own handler, whatever an earlier test (a server run in this thread) left.
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        with Engine(EngineConfig(model=str(smollm_path), n_seq_max=2, n_ctx_per_seq=512)) as engine:
            main = threading.main_thread().ident
            assert main is not None
            with pytest.raises(KeyboardInterrupt):
                for i, _ in enumerate(engine.stream(long())):
                    if i == 2:
                        signal.pthread_kill(main, signal.SIGINT)
                        time.sleep(5)  # the signal lands here (or in the next wait for a chunk)
            assert idle_and_freed(wait_for(engine, idle_and_freed))
            _still_serving(engine)
    finally:
        signal.signal(signal.SIGINT, previous)


def test_the_same_request_twice_at_once(engine: Engine) -> None:
    """A request object submitted twice concurrently: the second is refused, typed; the first
    is unharmed and no sequence is orphaned."""
    request = long()
    first = engine.submit(request)
    assert wait_for(engine, lambda stats: stats.running > 0).running > 0
    second = engine.submit(request)
    with pytest.raises(InvalidRequestError, match="already running"):
        second.result()
    first.cancel()
    with pytest.raises(RequestCancelledError):
        first.result()
    assert idle_and_freed(wait_for(engine, idle_and_freed))


def test_a_result_after_cancel_is_a_typed_error(engine: Engine) -> None:
    handle = engine.submit(long())
    handle.cancel()
    with pytest.raises(RequestCancelledError):
        handle.result()


# ---- broken model files -----------------------------------------------------------------


def _header_only(path: Path, arch: str, **extra: Any) -> Path:
    writer = GGUFWriter(str(path), arch)
    writer.add_block_count(1)
    writer.add_embedding_length(8)
    writer.add_head_count(1)
    writer.add_context_length(64)
    for key, value in extra.items():
        writer.add_string(key, value)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path


def _broken_files(tmp: Path, model: Path) -> dict[str, Path]:
    data = model.read_bytes()
    files = {
        "missing": tmp / "missing.gguf",
        "zero-length": tmp / "empty.gguf",
        "not gguf": tmp / "text.gguf",
        "truncated header": tmp / "cut-header.gguf",
        "truncated data": tmp / "cut-data.gguf",
        "bad magic": tmp / "magic.gguf",
        "bad version": tmp / "version.gguf",
        "huge metadata count": tmp / "huge-kv.gguf",
        "huge string length": tmp / "huge-str.gguf",
        "a directory": tmp / "dir.gguf",
    }
    files["zero-length"].write_bytes(b"")
    files["not gguf"].write_text("hello\n" * 100)
    files["truncated header"].write_bytes(data[:4096])
    files["truncated data"].write_bytes(data[: len(data) // 2])
    files["bad magic"].write_bytes(b"GGUX" + data[4:65536])
    files["bad version"].write_bytes(data[:4] + struct.pack("<I", 999) + data[8:65536])
    # n_tensors (u64 at 8) and n_kv (u64 at 16): absurd counts must not be trusted.
    files["huge metadata count"].write_bytes(data[:16] + struct.pack("<Q", 2**62) + data[24:65536])
    # The first key's length (u64 at 24) claims an exabyte.
    files["huge string length"].write_bytes(data[:24] + struct.pack("<Q", 2**60) + data[32:65536])
    files["a directory"].mkdir()
    files["wrong architecture"] = _header_only(tmp / "arch.gguf", "no-such-arch")
    files["no tensors"] = _header_only(tmp / "llama-empty.gguf", "llama")
    files["huge metadata value"] = _header_only(
        tmp / "big-value.gguf", "llama", **{"general.description": "x" * (8 * 2**20)}
    )
    return files


def test_broken_model_files_are_typed_load_errors(tmp_path: Path, smollm_path: Path) -> None:
    for fault, path in _broken_files(tmp_path, smollm_path).items():
        with pytest.raises(ModelLoadError) as caught:
            Engine(EngineConfig(model=str(path), n_seq_max=1, n_ctx_per_seq=256))
        assert caught.value.path == str(path), fault
        assert str(caught.value), fault


def test_a_projector_for_another_model_or_no_projector(
    tmp_path: Path, gemma_path: Path, smollm_path: Path, projector: Path
) -> None:
    with pytest.raises(ModelLoadError, match="projector"):
        Engine(EngineConfig(model=str(gemma_path), mmproj=str(projector), n_seq_max=1))
    with pytest.raises(ModelLoadError, match="not a multimodal projector"):
        Engine(EngineConfig(model=str(smollm_path), mmproj=str(smollm_path), n_seq_max=1))
    empty = tmp_path / "empty-mmproj.gguf"
    empty.write_bytes(b"")
    with pytest.raises(ModelLoadError):
        Engine(EngineConfig(model=str(smollm_path), mmproj=str(empty), n_seq_max=1))


def test_chat_messages_of_the_wrong_shape(engine: Engine) -> None:
    bad: list[Any] = [
        [ChatMessage(role="user", content=[{"type": "image", "image": "not an image"}])],
        [ChatMessage(role="user", content=[{"type": "nope"}])],
        [{"role": "user", "content": 42}],
        [{"role": "user", "content": [b"bytes"]}],
    ]
    for messages in bad:
        with pytest.raises(LlamaCppIntegrationError):
            engine.generate(ChatRequest(messages=messages, max_tokens=4))
    _still_serving(engine)
