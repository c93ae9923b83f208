"""The engine's inbox and event channels without a model: a full inbox makes callers wait up
to their timeout (threads and tasks alike), room made wakes them, a closed inbox refuses, and
a channel whose worker died answers with ``EngineClosedError`` instead of waiting forever."""

from __future__ import annotations

import asyncio
import threading
import time
from typing import Any

import pytest

from llamacpp_integrations.engine.channel import EventChannel
from llamacpp_integrations.engine.embedding.job import EmbedJob
from llamacpp_integrations.engine.outbox import Outbox
from llamacpp_integrations.engine.results import StreamChunk, Usage
from llamacpp_integrations.engine.worker.inbox import Inbox
from llamacpp_integrations.errors import EngineClosedError, EngineOverloadedError


def job(request_id: str) -> EmbedJob:
    return EmbedJob(
        request_id=request_id,
        token_lists=[[1]],
        normalize=True,
        submitted_at=time.monotonic(),
        deadline=None,
        channel=EventChannel(),
    )


def test_a_full_inbox_refuses_after_the_wait() -> None:
    inbox = Inbox(max_queued=1)
    inbox.put(job("a"), wait=0.0)
    with pytest.raises(EngineOverloadedError, match="max_queued=1") as caught:
        inbox.put(job("b"), wait=0.05)
    assert caught.value.request_id == "b"

    async def aput() -> None:
        await inbox.aput(job("c"), wait=0.05)

    with pytest.raises(EngineOverloadedError, match="max_queued=1"):
        asyncio.run(aput())
    with pytest.raises(EngineOverloadedError):
        asyncio.run(asyncio.wait_for(inbox.aput(job("d"), wait=0.0), 5))
    assert inbox.n_waiting == 1


def test_room_made_wakes_a_waiting_thread_and_a_waiting_task() -> None:
    inbox = Inbox(max_queued=1)
    inbox.put(job("a"), wait=0.0)
    taken = threading.Timer(0.05, lambda: inbox.take(free_slots=0, now=time.monotonic()))
    taken.start()
    inbox.put(job("b"), wait=None)  # room made by the worker taking "a"
    assert inbox.n_waiting == 1

    async def aput() -> None:
        loop = asyncio.get_running_loop()
        loop.call_later(0.05, lambda: inbox.take(free_slots=0, now=time.monotonic()))
        await inbox.aput(job("c"), wait=5.0)

    asyncio.run(aput())
    assert inbox.n_waiting == 1


def test_a_cancelled_task_stops_waiting_for_room() -> None:
    inbox = Inbox(max_queued=1)
    inbox.put(job("a"), wait=0.0)

    async def cancelled() -> None:
        waiting = asyncio.ensure_future(inbox.aput(job("b"), wait=None))
        await asyncio.sleep(0.05)
        waiting.cancel()
        with pytest.raises(asyncio.CancelledError):
            await waiting

    asyncio.run(cancelled())
    inbox.take(free_slots=0, now=time.monotonic())  # makes room: wakes nobody left behind
    assert inbox.n_waiting == 0


def test_a_closed_inbox_refuses_at_once() -> None:
    inbox = Inbox(max_queued=1)
    inbox.close()
    with pytest.raises(EngineClosedError):
        inbox.put(job("a"), wait=None)
    with pytest.raises(EngineClosedError):
        asyncio.run(inbox.aput(job("b"), wait=None))


def test_a_channel_answers_for_a_dead_worker() -> None:
    channel = EventChannel()
    channel.put("first")
    assert channel.get(lambda: True) == "first"
    looks: list[int] = []

    def alive() -> bool:
        looks.append(1)
        return len(looks) < 2  # dies at the second look

    gone = channel.get(alive)
    assert isinstance(gone, EngineClosedError) and len(looks) == 2

    async def aget() -> tuple[object, object]:
        loop_channel = EventChannel.for_loop()
        loop_channel.put("event")
        await asyncio.sleep(0)  # the put lands by call_soon_threadsafe
        return await loop_channel.aget(lambda: True), await loop_channel.aget(lambda: False)

    event, dead = asyncio.run(aget())
    assert event == "event" and isinstance(dead, EngineClosedError)


def _chunk(text: str, token: int, **end: object) -> StreamChunk:
    return StreamChunk("r", text, (token,), **end)  # type: ignore[arg-type]


def test_an_event_loop_behind_reads_the_waiting_chunks_as_one() -> None:
    usage = Usage(prompt_tokens=3, completion_tokens=3)

    async def read() -> list[object]:
        channel = EventChannel.for_loop()
        for i, text in enumerate(("a", "b")):
            channel.put(_chunk(text, i))
        await asyncio.sleep(0)  # both puts land before the reader looks
        first = await channel.aget(lambda: True)
        channel.put(_chunk("c", 2, finish_reason="stop", usage=usage))
        return [first, await channel.aget(lambda: True)]

    first, last = asyncio.run(read())
    assert isinstance(first, StreamChunk) and (first.text, first.token_ids) == ("ab", (0, 1))
    assert first.finish_reason is None
    assert isinstance(last, StreamChunk) and last.finish_reason == "stop" and last.usage == usage


def test_merged_chunks_end_with_the_request_and_an_error_comes_after_its_tokens() -> None:
    usage = Usage(prompt_tokens=3, completion_tokens=2)
    failure = EngineClosedError("gone")

    async def read() -> list[object]:
        channel = EventChannel.for_loop()
        channel.put(_chunk("a", 0))
        channel.put(_chunk("b", 1, finish_reason="length", usage=usage))
        channel.put(_chunk("x", 9))  # never another request's: nothing follows an end
        other = EventChannel.for_loop()
        other.put(_chunk("c", 2))
        other.put(failure)
        await asyncio.sleep(0)
        return [
            await channel.aget(lambda: True),
            await other.aget(lambda: True),
            await other.aget(lambda: True),
        ]

    ended, before, error = asyncio.run(read())
    assert isinstance(ended, StreamChunk) and ended.text == "ab" and ended.usage == usage
    assert ended.finish_reason == "length" and ended.token_ids == (0, 1)
    assert isinstance(before, StreamChunk) and before.text == "c" and error is failure


def test_an_outbox_hands_what_it_gathered_over_at_the_flush_each_loop_at_once() -> None:
    loop = asyncio.new_event_loop()
    handed: list[int] = []
    schedule = loop.call_soon_threadsafe

    def counted(*args: Any) -> Any:
        handed.append(1)
        return schedule(*args)

    loop.call_soon_threadsafe = counted  # type: ignore[method-assign]
    try:
        first, second = EventChannel(loop), EventChannel(loop)
        by_thread = EventChannel()
        outbox = Outbox()
        for i in range(3):
            outbox.put(first, _chunk(f"a{i}", i))
            outbox.put(second, _chunk(f"b{i}", i))
        outbox.put(by_thread, _chunk("t", 0))
        outbox.put(by_thread, _chunk("u", 1))
        assert by_thread._sync is not None and by_thread._sync.empty()  # all at the flush
        assert first._async is not None and first._async.empty()
        assert outbox
        assert outbox.flush() == []
        assert not outbox
        outbox.close()  # its waker's thread hands the loop's events over, then ends
        assert len(handed) == 1  # one hand-over for six chunks
        assert by_thread.get(lambda: True) == _chunk("t", 0)  # a thread's: in order
        assert by_thread.get(lambda: True) == _chunk("u", 1)

        async def read(channel: EventChannel) -> str:
            event = await channel.aget(lambda: True)
            assert isinstance(event, StreamChunk)
            return event.text

        assert loop.run_until_complete(read(first)) == "a0a1a2"
        assert loop.run_until_complete(read(second)) == "b0b1b2"
    finally:
        loop.close()
    outbox.put(first, _chunk("late", 3))
    assert outbox.flush() == [first]  # its loop is gone: the request is to be cancelled


def test_an_outbox_reports_a_loop_that_closed_while_its_waker_handed_events_over() -> None:
    loop = asyncio.new_event_loop()

    def closed(*args: Any) -> Any:
        raise RuntimeError("Event loop is closed")

    loop.call_soon_threadsafe = closed  # type: ignore[method-assign]
    channel = EventChannel(loop)
    outbox = Outbox()
    try:
        outbox.put(channel, _chunk("a", 0))
        assert outbox.flush() == []  # open when flushed: handed to the waker
        deadline = time.monotonic() + 5
        gone: list[EventChannel] = []
        while not gone and time.monotonic() < deadline:
            time.sleep(0.01)
            gone = outbox.flush()  # a later flush reports what the waker could not hand over
        assert gone == [channel]
    finally:
        outbox.close()
        loop.close()


def test_a_loop_reader_arms_one_watch_timer_not_one_per_read() -> None:
    async def read() -> tuple[list[object], int]:
        loop = asyncio.get_running_loop()
        armed: list[float] = []
        call_later = loop.call_later

        def counting_call_later(delay: float, *args: Any, **kwargs: Any) -> asyncio.TimerHandle:
            armed.append(delay)
            return call_later(delay, *args, **kwargs)

        loop.call_later = counting_call_later  # type: ignore[method-assign]
        channel = EventChannel.for_loop()
        read: list[object] = []

        async def reader() -> None:
            for _ in range(50):
                read.append(await channel.aget(lambda: True))

        task = asyncio.ensure_future(reader())
        for i in range(50):
            await asyncio.sleep(0)  # the reader waits before each event
            channel.put(f"event {i}")
            await asyncio.sleep(0)
        await task
        return read, len(armed)

    events, timers = asyncio.run(read())
    assert events == [f"event {i}" for i in range(50)]
    assert timers == 1  # armed by the first wait, still pending at the last


def test_a_cancelled_loop_read_leaves_the_channel_readable() -> None:
    async def read() -> object:
        channel = EventChannel.for_loop()
        waiting = asyncio.ensure_future(channel.aget(lambda: True))
        await asyncio.sleep(0)
        waiting.cancel()
        with pytest.raises(asyncio.CancelledError):
            await waiting
        channel.put("after")
        return await channel.aget(lambda: True)

    assert asyncio.run(read()) == "after"
