"""Which server of a fleet takes a request: affinity routing and per-server health, no I/O.

Routing is consistent hashing with bounded load (Mirrokni, Thorup and Zadimoghaddam). Every
server owns ``vnodes`` points on a 64-bit hash ring; a request's affinity key (the rendered
system prompt and tools, say) hashes to a point, and its owner is the first server clockwise.
Requests with one key keep landing on one server, so that server's prompt cache keeps hitting.
So that one hot key cannot swamp its owner, no server takes more than
``ceil(load_factor * (in_flight + 1) / healthy)`` requests at once: past that, the walk goes on
clockwise to the next server with room. Requests without a key (and every request with
``affinity=False``) go to the least-loaded healthy server, ties taken in turn.

Health is a two-state machine per server::

    healthy --(failure: connection error, 5xx, 503 while loading; or a failed probe)--> ejected
    ejected --(a probe succeeds once ``cooldown`` has passed since the ejection)--> healthy
    ejected --(a probe fails)--> ejected, the cooldown starting again

Failures are reported by the caller (passive) and by active ``/health`` probes, which the
router schedules (``due_probes``) but never runs. Time comes from an injected clock, so the
tests step it by hand. Every method is thread-safe.
"""

from __future__ import annotations

import bisect
import hashlib
import math
import threading
import time
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass
from typing import Literal

from ..errors import InvalidRequestError

__all__ = ["HashRing", "Router", "ServerState", "ServerStatus", "ring_hash"]

ServerStatus = Literal["healthy", "ejected"]


def ring_hash(data: str) -> int:
    """A stable 64-bit hash (the same in every process, unlike ``hash``)."""
    return int.from_bytes(hashlib.blake2b(data.encode("utf-8"), digest_size=8).digest(), "big")


class HashRing:
    """Servers placed on a hash ring, ``vnodes`` points each (more points: a more even split)."""

    def __init__(self, servers: Sequence[str], *, vnodes: int = 64) -> None:
        if vnodes < 1:
            raise ValueError("vnodes must be >= 1")
        if len(set(servers)) != len(servers):
            raise ValueError("servers on a ring must be distinct")
        points = sorted(
            (ring_hash(f"{server}#{i}"), server) for server in servers for i in range(vnodes)
        )
        self._hashes = [point for point, _ in points]
        self._owners = [server for _, server in points]
        self.servers = tuple(servers)

    def walk(self, key: str) -> list[str]:
        """Every server once, in ring order from ``key``'s point: its owner first."""
        if not self._owners:
            return []
        start = bisect.bisect(self._hashes, ring_hash(key)) % len(self._owners)
        seen: list[str] = []
        for i in range(len(self._owners)):
            server = self._owners[(start + i) % len(self._owners)]
            if server not in seen:
                seen.append(server)
                if len(seen) == len(self.servers):
                    break
        return seen


@dataclass(frozen=True)
class ServerState:
    """One server as the router sees it.

    Attributes:
        url: The server's base URL.
        status: ``healthy`` (takes requests) or ``ejected`` (cooling down or still failing).
        in_flight: Requests running on it now.
        requests: Requests sent to it so far.
        failures: Requests and probes that failed on it (each one ejects it).
        ejections: How many times it was ejected.
        prompt_tokens: Prompt tokens of its finished requests.
        cached_prompt_tokens: Of those, how many its prompt cache held already.
        last_error: The last failure's message, if any.
        ejected_until: Clock time its cooldown ends (``None`` when healthy).
    """

    url: str
    status: ServerStatus
    in_flight: int
    requests: int
    failures: int
    ejections: int
    prompt_tokens: int
    cached_prompt_tokens: int
    last_error: str | None
    ejected_until: float | None

    @property
    def cache_hit_rate(self) -> float | None:
        """Cached prompt tokens over prompt tokens (``None`` before any finished request)."""
        return self.cached_prompt_tokens / self.prompt_tokens if self.prompt_tokens else None


@dataclass
class _Server:
    url: str
    status: ServerStatus = "healthy"
    in_flight: int = 0
    requests: int = 0
    failures: int = 0
    ejections: int = 0
    prompt_tokens: int = 0
    cached_prompt_tokens: int = 0
    last_error: str | None = None
    ejected_at: float = 0.0
    last_probe: float | None = None

    def snapshot(self, cooldown: float) -> ServerState:
        return ServerState(
            url=self.url,
            status=self.status,
            in_flight=self.in_flight,
            requests=self.requests,
            failures=self.failures,
            ejections=self.ejections,
            prompt_tokens=self.prompt_tokens,
            cached_prompt_tokens=self.cached_prompt_tokens,
            last_error=self.last_error,
            ejected_until=self.ejected_at + cooldown if self.status == "ejected" else None,
        )


class Router:
    """Picks servers for requests and keeps each server's load and health.

    Args:
        servers: The servers' base URLs (distinct; order is the tie-break order).
        load_factor: How far above the average in-flight load one server may go before a key
            it owns spills over to the next server on the ring (``>= 1``).
        cooldown: Seconds an ejected server waits before a successful probe readmits it.
        probe_interval: Seconds between active probes of one server.
        affinity: Route keyed requests by the hash ring; ``False`` sends every request to the
            least-loaded healthy server (taken in turn on ties).
        vnodes: Ring points per server.
        clock: Monotonic time in seconds (injected so tests are deterministic).
    """

    def __init__(
        self,
        servers: Sequence[str],
        *,
        load_factor: float = 1.25,
        cooldown: float = 10.0,
        probe_interval: float = 5.0,
        affinity: bool = True,
        vnodes: int = 64,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        problems = []
        if not servers:
            problems.append("a fleet needs at least one server")
        if len(set(servers)) != len(servers):
            problems.append("a server is given twice")
        if not load_factor >= 1.0:
            problems.append("load_factor must be >= 1")
        if not cooldown >= 0.0:
            problems.append("cooldown must be >= 0 seconds")
        if not probe_interval > 0.0:
            problems.append("probe_interval must be > 0 seconds")
        if problems:
            raise InvalidRequestError("; ".join(problems))
        self._ring = HashRing(servers, vnodes=vnodes)
        self._servers = {url: _Server(url) for url in servers}
        self.load_factor = load_factor
        self.cooldown = cooldown
        self.probe_interval = probe_interval
        self.affinity = affinity
        self._clock = clock
        self._turn = 0  # round-robin position for least-loaded ties
        self._lock = threading.Lock()

    @property
    def urls(self) -> tuple[str, ...]:
        return self._ring.servers

    # ---- routing ---------------------------------------------------------------------------

    def capacity(self) -> int:
        """Most requests one healthy server may hold once the next request is placed."""
        with self._lock:
            return self._capacity()

    def _capacity(self) -> int:
        healthy = [s for s in self._servers.values() if s.status == "healthy"]
        if not healthy:
            return 0
        total = sum(s.in_flight for s in healthy) + 1
        return math.ceil(self.load_factor * total / len(healthy))

    def pick(self, key: str | None, exclude: Collection[str] = ()) -> str | None:
        """The server for a request with affinity ``key`` (``None``: no preference), skipping
        ejected servers and ``exclude`` (servers this request already failed on). ``None`` when
        no server is left. The caller must ``start`` the returned server."""
        with self._lock:
            candidates = [
                url
                for url, server in self._servers.items()
                if server.status == "healthy" and url not in exclude
            ]
            if not candidates:
                return None
            if key is not None and self.affinity:
                capacity = self._capacity()
                for url in self._ring.walk(key):
                    if url in candidates and self._servers[url].in_flight < capacity:
                        return url
                # Every candidate is full (only when excluded servers carry the slack): fall
                # through to the least loaded one.
            return self._least_loaded(candidates)

    def _least_loaded(self, candidates: list[str]) -> str:
        low = min(self._servers[url].in_flight for url in candidates)
        tied = [url for url in candidates if self._servers[url].in_flight == low]
        self._turn += 1
        return tied[self._turn % len(tied)]

    # ---- request outcomes ------------------------------------------------------------------

    def start(self, url: str) -> None:
        """A request was sent to ``url``."""
        with self._lock:
            server = self._servers[url]
            server.in_flight += 1
            server.requests += 1

    def finish(self, url: str, *, prompt_tokens: int = 0, cached_prompt_tokens: int = 0) -> None:
        """A request on ``url`` ended without a server failure (done, cancelled, refused as
        invalid...); the token counts come from its usage, when it has one."""
        with self._lock:
            server = self._servers[url]
            server.in_flight = max(0, server.in_flight - 1)
            server.prompt_tokens += prompt_tokens
            server.cached_prompt_tokens += cached_prompt_tokens

    def fail(self, url: str, error: str) -> None:
        """A request on ``url`` ended in a server failure: it ends and the server is ejected."""
        with self._lock:
            server = self._servers[url]
            server.in_flight = max(0, server.in_flight - 1)
            self._eject(server, error)

    def eject(self, url: str, error: str) -> None:
        """A call on ``url`` that was not a routed request (a token count, say) found the
        server failing: eject it."""
        with self._lock:
            self._eject(self._servers[url], error)

    def _eject(self, server: _Server, error: str) -> None:
        server.failures += 1
        server.last_error = error
        if server.status == "healthy":
            server.ejections += 1
        # Every failure (a probe of an ejected server too) restarts the cooldown.
        server.status = "ejected"
        server.ejected_at = self._clock()

    # ---- active probes ---------------------------------------------------------------------

    def due_probes(self) -> list[str]:
        """Servers whose ``/health`` should be probed now: healthy ones ``probe_interval`` after
        their last probe, ejected ones once their cooldown is over (and at most every
        ``probe_interval`` after that)."""
        now = self._clock()
        due: list[str] = []
        with self._lock:
            for url, server in self._servers.items():
                last = server.last_probe
                interval_over = last is None or now - last >= self.probe_interval
                if server.status == "ejected":
                    cooled = now - server.ejected_at >= self.cooldown
                    since_ejection = last is None or last < server.ejected_at
                    if cooled and (since_ejection or interval_over):
                        due.append(url)
                elif interval_over:
                    due.append(url)
        return due

    def probe_result(self, url: str, ok: bool, error: str = "health probe failed") -> None:
        """Record an active probe: a failure ejects; a success readmits an ejected server
        whose cooldown is over."""
        with self._lock:
            server = self._servers[url]
            server.last_probe = self._clock()
            if not ok:
                self._eject(server, error)
            elif server.status == "ejected" and (
                server.last_probe - server.ejected_at >= self.cooldown
            ):
                server.status = "healthy"

    # ---- state -----------------------------------------------------------------------------

    def healthy(self) -> list[str]:
        """Healthy servers, in the order they were given."""
        with self._lock:
            return [url for url, s in self._servers.items() if s.status == "healthy"]

    def states(self) -> tuple[ServerState, ...]:
        """Every server's state, in the order they were given."""
        with self._lock:
            return tuple(s.snapshot(self.cooldown) for s in self._servers.values())

    def state(self, url: str) -> ServerState:
        with self._lock:
            return self._servers[url].snapshot(self.cooldown)
