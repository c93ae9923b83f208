"""``/health`` probes of a fleet's servers: one probe per server, all due servers at once.

``HealthProber`` runs in the background: every ``tick`` it asks the router which servers are
due and starts a probe of each in its own thread, so a server that hangs until its timeout
holds back no other server's probe; each result goes to the router as soon as it is known. A
server whose probe is still running is not probed again until that probe ends.

The probe threads are daemon threads, not a ``ThreadPoolExecutor``'s: the executor's workers
are joined when the interpreter exits, so one hung probe would hold up the exit of a program
that never closed its fleet. Stopping never waits for a probe; a result that arrives after
``stop`` is dropped.

The prober holds the router and the members, never the fleet, so a fleet nobody references is
still garbage-collected (and its finalizer stops the prober).
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterable, Mapping
from typing import Protocol

from .fan_out import map_bounded
from .routing import Router

__all__ = ["HealthProber", "Probed", "aprobe", "probe", "safe_ahealth", "safe_health"]

MAX_CONCURRENT_PROBES = 8


class Probed(Protocol):
    """What a prober needs of a server's engine."""

    def health(self) -> bool:
        """True when the server answers ``/health`` with OK."""
        ...

    async def ahealth(self) -> bool:
        """Async ``health``."""
        ...


def safe_health(member: Probed) -> bool:
    """``member.health()``, with a probe that raises counted as a failed probe."""
    try:
        return bool(member.health())
    except Exception:  # a probe that raises is a failed probe, whatever it raised
        return False


async def safe_ahealth(member: Probed) -> bool:
    """Async ``safe_health``."""
    try:
        return bool(await member.ahealth())
    except Exception:
        return False


def probe(router: Router, members: Mapping[str, Probed], urls: Iterable[str]) -> None:
    """Probe ``urls`` at once (up to ``MAX_CONCURRENT_PROBES`` threads) and wait for them all,
    giving the router each result as soon as it is known."""

    def probe_one(url: str) -> None:
        router.probe_result(url, safe_health(members[url]))

    map_bounded(probe_one, list(urls), MAX_CONCURRENT_PROBES)


async def aprobe(router: Router, members: Mapping[str, Probed], urls: Iterable[str]) -> None:
    """Probe ``urls`` at once, giving the router each result as soon as it is known."""

    async def probe(url: str) -> None:
        router.probe_result(url, await safe_ahealth(members[url]))

    await asyncio.gather(*(probe(url) for url in urls))


class HealthProber:
    """Probes, in the background, the servers ``router`` says are due.

    Args:
        router: Says which servers are due (``due_probes``) and takes the results
            (``probe_result``).
        members: The servers' engines, by URL.
        tick: Seconds between two looks at which servers are due.
        max_concurrent: Most probes running at once (a due server left over is probed at a
            later tick).
    """

    def __init__(
        self,
        router: Router,
        members: Mapping[str, Probed],
        *,
        tick: float,
        max_concurrent: int = MAX_CONCURRENT_PROBES,
    ) -> None:
        self._router = router
        self._members = dict(members)
        self._tick = tick
        self._max_concurrent = max(1, max_concurrent)
        self._running: set[str] = set()
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="fleet-health-probes", daemon=True)

    def start(self) -> None:
        """Start probing."""
        self._thread.start()

    def stop(self) -> None:
        """Stop probing; returns at once (probes still running are abandoned, their results
        dropped). Safe to call from any thread, a probe's own included, and more than once."""
        self._stop.set()

    def join(self, timeout: float | None = None) -> None:
        """Wait for the background loop to end after ``stop`` (probes still running are not
        waited for). Does nothing when called from the loop itself or before ``start``."""
        if self._thread.is_alive() and self._thread is not threading.current_thread():
            self._thread.join(timeout)

    def is_alive(self) -> bool:
        """Whether the background loop is running."""
        return self._thread.is_alive()

    @property
    def running(self) -> frozenset[str]:
        """The servers being probed now."""
        with self._lock:
            return frozenset(self._running)

    def _loop(self) -> None:
        while not self._stop.wait(self._tick):
            for url in self._router.due_probes():
                if self._stop.is_set():
                    return
                self._launch(url)

    def _launch(self, url: str) -> None:
        with self._lock:
            if url in self._running or len(self._running) >= self._max_concurrent:
                return
            self._running.add(url)
        try:
            threading.Thread(
                target=self._probe, args=(url,), name=f"fleet-health-probe {url}", daemon=True
            ).start()
        except RuntimeError:  # no thread to be had now (the interpreter exiting): next tick
            self._done(url)

    def _probe(self, url: str) -> None:
        try:
            ok = safe_health(self._members[url])
            if not self._stop.is_set():  # after stop the members are closing: not news
                self._router.probe_result(url, ok)
        finally:
            self._done(url)

    def _done(self, url: str) -> None:
        with self._lock:
            self._running.discard(url)
