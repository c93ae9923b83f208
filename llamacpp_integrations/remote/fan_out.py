"""Run one call per item, at most ``limit`` at a time, results in the items' order.

For independent requests that run no model (``/tokenize``, ``/health``): sent one after
another, each would wait out the last one's round trip. The first failure is raised; calls not
yet started are dropped, and running ones are awaited (threads) or cancelled (asyncio) before
it is, so nothing keeps talking to a server behind the caller's back.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import TypeVar

__all__ = ["amap_bounded", "map_bounded"]

Item = TypeVar("Item")
Result = TypeVar("Result")


def _width(limit: int, n_items: int) -> int:
    """How many calls run at once: up to ``limit``, no more than there are items, at least
    one."""
    return max(1, min(limit, n_items))


def map_bounded(call: Callable[[Item], Result], items: Sequence[Item], limit: int) -> list[Result]:
    """``[call(item) for item in items]``, on up to ``limit`` threads at once."""
    threads = _width(limit, len(items))
    if threads == 1:
        return [call(item) for item in items]
    pool = ThreadPoolExecutor(max_workers=threads)
    try:
        futures = [pool.submit(call, item) for item in items]
        return [future.result() for future in futures]
    finally:
        pool.shutdown(wait=True, cancel_futures=True)


async def amap_bounded(
    call: Callable[[Item], Awaitable[Result]], items: Sequence[Item], limit: int
) -> list[Result]:
    """Async ``map_bounded``: up to ``limit`` calls awaited at once."""
    gate = asyncio.Semaphore(_width(limit, len(items)))
    tasks = [asyncio.ensure_future(_gated(gate, call, item)) for item in items]
    try:
        return list(await asyncio.gather(*tasks))
    finally:
        await _cancel_all(tasks)


async def _gated(
    gate: asyncio.Semaphore, call: Callable[[Item], Awaitable[Result]], item: Item
) -> Result:
    async with gate:
        return await call(item)


async def _cancel_all(tasks: Sequence[asyncio.Future[Result]]) -> None:
    """Cancel what still runs of ``tasks`` and wait until all of them have ended."""
    for task in tasks:
        task.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)
