"""Bounded fan-out of remote calls: order kept, the limit held, the first failure raised and
nothing left running behind it."""

from __future__ import annotations

import asyncio
import threading
import time

import pytest

from llamacpp_integrations.remote.fan_out import amap_bounded, map_bounded


class Gauge:
    """How many calls run at once, at most."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.now = 0
        self.most = 0

    def enter(self) -> None:
        with self._lock:
            self.now += 1
            self.most = max(self.most, self.now)

    def leave(self) -> None:
        with self._lock:
            self.now -= 1


def test_threads_keep_the_order_and_the_limit() -> None:
    gauge = Gauge()

    def square(n: int) -> int:
        gauge.enter()
        time.sleep(0.01 * (5 - n % 5))  # later items finish first
        gauge.leave()
        return n * n

    assert map_bounded(square, list(range(12)), 3) == [n * n for n in range(12)]
    assert gauge.most == 3
    assert map_bounded(square, [4], 3) == [16]
    assert map_bounded(square, [], 3) == []


def test_threads_raise_the_first_failure_and_start_nothing_after_it() -> None:
    started: list[int] = []

    def call(n: int) -> int:
        started.append(n)
        if n == 1:
            raise ValueError("one")
        time.sleep(0.05)
        return n

    with pytest.raises(ValueError, match="one"):
        map_bounded(call, list(range(40)), 2)
    time.sleep(0.1)
    assert len(started) < 40  # the rest were dropped, not run in the background


async def test_tasks_keep_the_order_and_the_limit() -> None:
    gauge = Gauge()

    async def square(n: int) -> int:
        gauge.enter()
        await asyncio.sleep(0.01 * (5 - n % 5))
        gauge.leave()
        return n * n

    assert await amap_bounded(square, list(range(12)), 4) == [n * n for n in range(12)]
    assert gauge.most == 4
    assert await amap_bounded(square, [], 4) == []


async def test_tasks_cancel_the_rest_on_the_first_failure() -> None:
    finished: list[int] = []

    async def call(n: int) -> int:
        if n == 2:
            raise ValueError("two")
        await asyncio.sleep(0.2)
        finished.append(n)
        return n

    with pytest.raises(ValueError, match="two"):
        await amap_bounded(call, list(range(10)), 4)
    await asyncio.sleep(0.3)
    assert finished == []
    assert len(asyncio.all_tasks()) == 1  # only this test's own task is left


async def test_cancelling_the_caller_cancels_every_call() -> None:
    finished: list[int] = []

    async def call(n: int) -> int:
        await asyncio.sleep(0.2)
        finished.append(n)
        return n

    caller = asyncio.ensure_future(amap_bounded(call, list(range(6)), 3))
    await asyncio.sleep(0.05)
    caller.cancel()
    with pytest.raises(asyncio.CancelledError):
        await caller
    await asyncio.sleep(0.3)
    assert finished == []
