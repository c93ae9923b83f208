"""The engine's inbox and event channels without a model: a full inbox makes callers wait up
to their timeout (threads and tasks alike), room made wakes them, a closed inbox refuses, and
a channel whose worker died answers with ``EngineClosedError`` instead of waiting forever."""

from __future__ import annotations

import asyncio
import threading
import time

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
