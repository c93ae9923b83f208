"""The engine's inbox and event channels without a model: a full inbox makes callers wait up
to their timeout (threads and tasks alike), room made wakes them, a closed inbox refuses, and
a channel whose worker died answers with ``EngineClosedError`` instead of waiting forever."""

from __future__ import annotations

import asyncio
import gc
import threading
import time
import weakref

import pytest

from llamacpp_integrations.engine.channel import EventChannel
from llamacpp_integrations.engine.embedding.job import EmbedJob
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


def test_a_loops_channels_share_one_wake_up_per_burst() -> None:
    """Events put from another thread while the loop is busy reach every channel in order,
    delivered by one callback (one write to the loop's wake-up pipe), not one per event."""

    async def run() -> tuple[list[list[object]], int]:
        loop = asyncio.get_running_loop()
        wakes: list[int] = []
        schedule = loop.call_soon_threadsafe

        def counted(callback: object, *args: object) -> asyncio.Handle:
            wakes.append(1)
            return schedule(callback, *args)  # type: ignore[arg-type]

        loop.call_soon_threadsafe = counted  # type: ignore[method-assign]
        channels = [EventChannel.for_loop() for _ in range(4)]

        def worker() -> None:  # the loop is blocked in join() meanwhile: it is behind
            for step in range(3):
                for index, channel in enumerate(channels):
                    assert channel.put((index, step))

        thread = threading.Thread(target=worker)
        thread.start()
        thread.join()
        got = [[await c.aget(lambda: True) for _ in range(3)] for c in channels]
        return got, len(wakes)

    got, wakes = asyncio.run(run())
    assert got == [[(i, s) for s in range(3)] for i in range(4)]
    assert wakes == 1


def test_a_closed_loops_channel_refuses_events_and_the_loop_can_go() -> None:
    loop = asyncio.new_event_loop()
    channel = EventChannel(loop)
    assert channel.put("queued")
    loop.close()
    assert not channel.put("late")
    gone = weakref.ref(loop)
    del loop
    gc.collect()
    assert gone() is None  # the channels' table does not keep a loop alive
