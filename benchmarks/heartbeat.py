"""The heartbeat the event-loop benchmarks share: how late each 1 ms sleep of the loop wakes."""

from __future__ import annotations

import asyncio
import time

SLEEP_S = 0.001


async def heartbeat(
    gaps: list[float], stop: asyncio.Event, starts: list[float] | None = None
) -> None:
    """Until ``stop`` is set: each wake-up's lateness into ``gaps`` (the longest is the longest
    stretch the loop could run nothing else), and when its sleep began into ``starts``."""
    last = time.perf_counter()
    while not stop.is_set():
        await asyncio.sleep(SLEEP_S)
        now = time.perf_counter()
        gaps.append(now - last - SLEEP_S)
        if starts is not None:
            starts.append(last)
        last = now
