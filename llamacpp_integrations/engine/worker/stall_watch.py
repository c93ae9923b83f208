"""Cuts a decode short when its threads lost their cores, so that it runs again on fewer.

The thread governor (``thread_governor.py``) reads the machine between steps, so it can only
act once the step under way ends. Beside a program in another scheduling group (another
session, a service's cgroup), that step is the one that collapses: the group gets fewer cores
than llama.cpp has threads, the threads that have one spin at each barrier for one that has
none, and a step of milliseconds took from one to eleven seconds (``benchmarks/busy_cpu.py``).

So a thread of its own looks at the decode under way every ``WATCH_S``. A decode younger than
half of that is left alone: almost every decode ends within milliseconds, so a busy engine's
watch reads nothing. Of an older one, the watch reads this process's threads' accounting, and
at its next look at the same decode, the cores the decode had in between, as the governor
does (``cores_had``). Where that is short of the decode's threads, it asks llama.cpp to stop
the decode (``GenerationContext.interrupt``). The worker then lets the governor drop the count
from that reading (``ThreadGovernor.cut``) and decodes the same batch again: llama.cpp left
the cache as it was before the batch. The thread sleeps while the worker decodes nothing.

A request lands only while the worker says a decode is under way (``decoding`` to ``decoded``,
under one lock), so no other use of the context (an image's embeddings, a saved prompt) is
ever stopped; one that lands as the decode ends is reported by ``decoded``, for the worker to
take down.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Mapping

from .thread_governor import SchedTimes, cores_had, read_threads_schedstat, short_of_cores

__all__ = ["WATCH_S", "StallWatch"]

WATCH_S = 0.25
"""How often the watch looks: a decode stopped for lost cores has run for two or three of these.
A decode step is milliseconds; one that reads a long prompt on a slow machine can be seconds,
and the reading only stops it when its threads did lose their cores."""

# The decode under way: its serial number, threads, start, and how to stop it.
_Decode = tuple[int, int, float, Callable[[], None]]


class StallWatch:
    """Watches the worker's decodes from a thread of its own, and stops one that lost its
    cores with the ``stop`` it came with (its context's ``interrupt``).

    ``look`` is one look, called by the thread every ``WATCH_S`` (and by tests directly, with
    their own clock and accounting).

    Attributes:
        got_cores: The reading behind the last request to stop a decode.
    """

    def __init__(
        self,
        *,
        read_sched: Callable[[], Mapping[int, SchedTimes] | None] = read_threads_schedstat,
        clock: Callable[[], float] = time.monotonic,
        start: bool = True,
    ) -> None:
        self.got_cores: float | None = None
        self._clock = clock
        self._read_sched = read_sched
        self._lock = threading.Lock()
        self._decode: _Decode | None = None  # set by the worker, read by the watch
        self._serial = 0
        self._asked = False
        # The watch's own: the decode it last looked at, when, and the accounting then.
        self._seen: tuple[int, float, Mapping[int, SchedTimes]] | None = None
        self._wake = threading.Event()  # set while the worker decodes
        self._closed = threading.Event()
        self._thread: threading.Thread | None = None
        if start:
            self._thread = threading.Thread(
                target=self._run, name="llamacpp-stall-watch", daemon=True
            )
            self._thread.start()

    # ---- the worker's calls -----------------------------------------------------------------

    def decoding(self, threads: int, stop: Callable[[], None]) -> None:
        """A decode on ``threads`` begins; ``stop`` (safe from any thread) would stop it."""
        self._serial += 1
        self._decode = (self._serial, threads, self._clock(), stop)
        if not self._wake.is_set():
            self._wake.set()

    def decoded(self) -> bool:
        """The decode ended; whether the watch asked to stop it (a request that came as it
        ended is still up: the worker takes it down)."""
        with self._lock:
            self._decode = None
            asked, self._asked = self._asked, False
        return asked

    def close(self) -> None:
        self._closed.set()
        self._wake.set()
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(timeout=5.0)

    # ---- the watch's thread -----------------------------------------------------------------

    def _run(self) -> None:
        while True:
            self._wake.wait()
            if self._closed.wait(WATCH_S):  # closing: no need to finish the wait
                return
            if not self.look(self._clock()):
                # No decode under way: sleep until the worker begins one (checked once more
                # after clearing, for a decode that began in between).
                self._wake.clear()
                if self._decode is not None:
                    self._wake.set()

    def look(self, now: float) -> bool:
        """One look at the decode under way; whether there was one."""
        decode = self._decode
        if decode is None:
            self._seen = None
            return False
        serial, threads, started, stop = decode
        if threads <= 1 or now - started < WATCH_S / 2:
            return True
        after = self._read_sched()
        if after is None:
            return True
        seen = self._seen
        self._seen = (serial, now, after)
        if seen is None or seen[0] != serial:
            return True  # the first reading of this decode: what it had is read from the next
        got = cores_had(seen[2], after, threads=threads, seconds=now - seen[1])
        if got is None or not short_of_cores(got, threads):
            return True
        with self._lock:
            if self._decode == decode:  # still under way: nothing else is decoding now
                self.got_cores = got
                self._asked = True
                stop()
        return True
