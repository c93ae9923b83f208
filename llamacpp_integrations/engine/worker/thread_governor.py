"""How many threads the engine's decodes run on when ``n_threads`` is left to it: fewer while
other work keeps the cores busy, the whole budget again once cores go idle.

llama.cpp splits every step of a decode across its threads and waits for the last of them at
each of a decode's hundreds of barriers. When another program keeps one core busy, one of the
threads is off its core part of the time, and the whole decode waits for it. On 2 cores beside
one busy process, 2 threads decoded SmolLM2 at about 40 tokens/s where 1 thread kept 80; with
that process in another session (its own scheduling group), at under 1 token/s
(``benchmarks/busy_cpu.py``). No default read at start can know about that work, so the worker
watches for it.

The signal is the kernel's scheduler accounting of this process's threads (Linux's
``/proc/self/task/*/schedstat``): for each, the time it ran and the time it was ready but waited
for a CPU. Threads that sleep (an idle pool, a thread waiting for the GIL, a decode thread
parked at a barrier) count as neither, so what waits is what wanted a core and had none. Over a
second of steps, ``threads * (1 - the waiting share)`` is about the cores the decode really
had, and so is the CPU time the process used per second of steps (llama.cpp's threads spin
while they compute or wait at a barrier, so a decode with its cores uses one per thread; one
whose threads sleep at barriers for a starved thread uses far less, while waiting little).
When the lower of the two is half a core or more short of the threads, the count drops to it.
Every thread counts, not only the worker's: where the scheduler shares the CPUs between groups
of processes first (Linux's autogroup, one per session; a service's or container's cgroup),
the thread left on a core the other group wants may be any of llama.cpp's, while the worker
sleeps at a barrier waiting for it. A window is read when it ends, after the step that crosses
it; a step beside a busy group can take seconds, so the stall watch (``stall_watch.py``) reads
the step under way too, stops it when its threads lost their cores, and hands its reading to
``cut`` for the worker to decode the step again on fewer.

Going back up is read from ``/proc/stat``: the room for decode threads over a window is what
this process's CPUs sat idle plus what the decode itself used (its threads, for the share of
the window the worker stepped), less the CPUs past the target (idle anyway: a core's second
hyperthread); the count rises to that room, rounded. Unlike a drop, a rise needs no busy window:
an engine that sat idle while the neighbour left sees the idle CPUs at its next step, so a
request that comes after a build has ended starts on every thread, not after a window of
decoding on fewer. A rise that the next window (or the stall watch) takes back makes the
governor wait twice as long before the next one, so a steady neighbour costs one slow window
every few minutes at most.

The decision is pure (``ThreadGovernor.tick`` with injected readers); the worker applies the
count with ``llama_set_n_threads``. It changes how fast a decode runs, not what it computes:
llama.cpp's CPU kernels split rows between threads, so each row is computed the same way at
any count (the logits of both test models are bit for bit the same on 1, 2 and 3 threads).
Elsewhere than Linux, or where the kernel keeps no such accounting, the count stays put.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass

from ..cpu_budget import own_cpus

__all__ = [
    "SchedTimes",
    "ThreadGovernor",
    "cores_had",
    "read_idle_ticks",
    "read_schedstat",
    "read_threads_schedstat",
    "short_of_cores",
]

log = logging.getLogger("llamacpp_integrations.engine")

WINDOW_S = 1.0
"""How long the governor watches before it decides (a decode step is milliseconds)."""
HOLD_S = 5.0
"""After a drop, how long before the count may rise again; doubled by a rise taken back."""
MAX_HOLD_S = 160.0
SHORT_BY = 0.5
"""A decode that had this much of a core fewer than its threads, or more, drops threads."""
BUSY_SHARE = 0.5
"""A window in which the worker stepped for less of the time than this drops nothing: the
waits of an idle engine's process are not the decode's. (It may still rise.)"""


@dataclass(frozen=True)
class SchedTimes:
    """A thread's scheduler accounting so far: nanoseconds on a CPU and ready but waiting."""

    run_ns: int
    wait_ns: int


_NEVER_RAN = SchedTimes(0, 0)


def read_schedstat(path: str) -> SchedTimes | None:
    """One thread's ``SchedTimes`` from its ``schedstat`` file; ``None`` where there is none."""
    try:
        with open(path, encoding="ascii") as file:
            fields = file.read().split()
        return SchedTimes(int(fields[0]), int(fields[1]))
    except (OSError, ValueError, IndexError):
        return None


def read_threads_schedstat(tasks: str = "/proc/self/task") -> dict[int, SchedTimes] | None:
    """Every thread of this process: its id and ``SchedTimes``; ``None`` off Linux or where
    the kernel keeps no such accounting."""
    try:
        ids = os.listdir(tasks)
    except OSError:
        return None
    threads = {}
    for tid in ids:
        times = read_schedstat(f"{tasks}/{tid}/schedstat")
        if times is not None:  # a thread may end between the listing and the read
            threads[int(tid)] = times
    return threads or None


def read_idle_ticks(cpus: Collection[int], path: str = "/proc/stat") -> tuple[int, int] | None:
    """Idle and total clock ticks so far, summed over ``cpus`` (``/proc/stat``'s per-CPU
    lines; idle counts iowait too); ``None`` where there is no such file."""
    idle = total = 0
    try:
        with open(path, encoding="ascii") as file:
            for line in file:
                name, _, rest = line.partition(" ")
                if not name.startswith("cpu") or name == "cpu":
                    continue
                if int(name[3:]) not in cpus:
                    continue
                ticks = [int(value) for value in rest.split()]
                idle += ticks[3] + ticks[4]
                total += sum(ticks[:8])  # guest time is counted in user time already
    except (OSError, ValueError, IndexError):
        return None
    return (idle, total) if total else None


def cores_had(
    before: Mapping[int, SchedTimes],
    after: Mapping[int, SchedTimes],
    *,
    threads: int,
    seconds: float,
) -> float | None:
    """About the cores a decode on ``threads`` had over ``seconds`` of decoding, from this
    process's threads' accounting before and after; ``None`` where nothing ran.

    Two readings, the lower counting: the threads less the share of their time spent waiting
    for a CPU, and the CPU time the process used per second (where llama.cpp's threads sleep at
    barriers for a starved one, the waits are few but so is the running)."""
    ran = waited = 0
    for tid, times in after.items():
        # A thread started in between (llama.cpp's own, at the first decode) counts from its
        # start; one that ended in between is left out.
        earlier = before.get(tid, _NEVER_RAN)
        ran += max(0, times.run_ns - earlier.run_ns)  # a thread id used again: no less
        waited += max(0, times.wait_ns - earlier.wait_ns)
    if ran <= 0 or seconds <= 0:
        return None
    return min(threads * ran / (ran + waited), ran / (seconds * 1e9))


def short_of_cores(got_cores: float, threads: int) -> bool:
    """Whether a decode on ``threads`` that had ``got_cores`` should run on fewer."""
    return threads > 1 and got_cores <= threads - SHORT_BY


class ThreadGovernor:
    """Decides the decode's thread count, between 1 and ``target`` (``n_threads`` resolved),
    from what this process's threads waited for CPUs while the worker stepped; ``tick`` is
    called by the worker after each step.

    Attributes:
        threads: The count decodes should run on now.
        got_cores: About the cores the decode's threads had over the last window that
            decided, ``None`` before one.
    """

    def __init__(
        self,
        target: int,
        *,
        cpus: Collection[int] | None = None,
        read_sched: Callable[[], Mapping[int, SchedTimes] | None] = read_threads_schedstat,
        read_idle: Callable[[Collection[int]], tuple[int, int] | None] = read_idle_ticks,
    ) -> None:
        self.target = self.threads = target
        self.got_cores: float | None = None
        self._cpus = own_cpus() if cpus is None else cpus
        self._read_sched = read_sched
        self._read_idle = read_idle
        self._start: float | None = None
        self._stepped = 0.0  # seconds of steps in this window
        self._sched: Mapping[int, SchedTimes] | None = None
        self._idle: tuple[int, int] | None = None
        self._hold = HOLD_S
        self._rise_until = 0.0  # no rise before this
        self._rose_at: float | None = None  # the last rise, until a window confirms it
        self._warned = False
        self.enabled = target > 1 and read_sched() is not None

    def tick(self, now: float, stepped: float) -> int | None:
        """Called after each step (``now``: ``time.monotonic()``; ``stepped``: the seconds the
        step took); the new count when it changes, else ``None``. Reads files once a window,
        nothing in between."""
        if not self.enabled:
            return None
        if self._start is None:
            self._begin(now)
            return None
        self._stepped += stepped
        elapsed = now - self._start
        if elapsed < WINDOW_S:
            return None
        before, stepped, idle = self._sched, self._stepped, self._idle
        self._begin(now)
        if before is None or self._sched is None:
            self.enabled = False
            return None
        if stepped >= BUSY_SHARE * elapsed:  # else mostly idle: the waits were not the decode's
            got = cores_had(before, self._sched, threads=self.threads, seconds=stepped)
            if got is not None:
                self.got_cores = got
                if short_of_cores(got, self.threads):
                    return self._drop(now)
                if self._rose_at is not None:  # a busy window after a rise, no drop: it held
                    self._rose_at = None
                    self._hold = HOLD_S
        return self._rise(now, idle, busy=min(1.0, stepped / elapsed))

    def cut(self, now: float, got_cores: float) -> int | None:
        """A decode cut short for having had ``got_cores`` (``StallWatch``'s reading, taken
        while it ran): the lower count to decode it again on, or ``None`` where that reading
        drops nothing. The next window starts here."""
        if not self.enabled or not short_of_cores(got_cores, self.threads):
            return None
        self.got_cores = got_cores
        self._begin(now)
        return self._drop(now)

    def _begin(self, now: float) -> None:
        self._start = now
        self._stepped = 0.0
        self._sched = self._read_sched()
        # Idle CPUs only matter while the count is below the target (a rise is possible).
        self._idle = self._read_idle(self._cpus) if self.threads < self.target else None

    def _rise(self, now: float, idle_before: tuple[int, int] | None, *, busy: float) -> int | None:
        """The higher count a window leaves room for (``busy``: the share of it the worker
        stepped), or ``None``."""
        # Below the target, ``_begin`` has just read the idle ticks that end this window.
        idle_after = self._idle
        if self.threads >= self.target or now < self._rise_until:
            return None
        if idle_before is None or idle_after is None:
            return None
        ticks = idle_after[1] - idle_before[1]
        idle_cpus = len(self._cpus) * (idle_after[0] - idle_before[0]) / ticks if ticks else 0.0
        # The decode's own threads had its cores while it stepped; the CPUs past the target sit
        # idle even on a quiet machine (a core's second hyperthread, a container's CPUs past
        # its limit): only what is idle beyond them is room. A neighbour that left mid-window
        # leaves half a CPU, which rounds up.
        room = idle_cpus + self.threads * busy - (len(self._cpus) - self.target)
        threads = min(self.target, int(room + 0.5))
        if threads <= self.threads:
            return None
        self.threads = threads
        self._rose_at = now
        log.info(
            "CPUs went idle (%.1f of %d): decoding on %s again",
            idle_cpus,
            len(self._cpus),
            _threads(self.threads),
        )
        return self.threads

    def _drop(self, now: float) -> int:
        got = self.got_cores
        assert got is not None
        threads = max(1, min(self.threads - 1, int(got + 0.5)))
        if self._rose_at is not None:  # the last rise did not hold: wait longer next time
            self._hold = min(MAX_HOLD_S, self._hold * 2)
            self._rose_at = None
        before, self.threads = self.threads, threads
        self._rise_until = now + self._hold
        self._idle = self._read_idle(self._cpus)
        level = logging.INFO if self._warned else logging.WARNING
        self._warned = True
        log.log(
            level,
            "llama.cpp's %d decode threads had about %.1f cores lately (other work is using "
            "this machine's CPUs, and a decode waits for its slowest thread): "
            "decoding on %s until cores are idle again. Set n_threads to keep a fixed count.",
            before,
            got,
            _threads(threads),
        )
        return threads


def _threads(count: int) -> str:
    return f"{count} thread" if count == 1 else f"{count} threads"
