"""The bounded admission queue between callers and the worker, plus its control messages.

Callers add requests (waiting up to their own timeout when it is full: threads on a condition,
asyncio tasks on a future) and cancellations; the worker takes as many requests as it has free
sequences, so waiting requests stay here, bounded, rather than piling up inside the worker. A
request cancelled while still waiting is answered right here.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from ...errors import (
    EngineClosedError,
    EngineOverloadedError,
    RequestCancelledError,
    RequestTimeoutError,
)
from ..embedding.job import EmbedJob
from ..results import StreamChunk, Usage
from .requests import PreparedRequest

__all__ = ["Inbox", "InboxBatch"]

Work = PreparedRequest | EmbedJob


@dataclass
class InboxBatch:
    """What the worker takes in one look: new work, cancellations, and calls to run."""

    requests: list[PreparedRequest] = field(default_factory=list)
    embeds: list[EmbedJob] = field(default_factory=list)
    cancels: set[str] = field(default_factory=set)
    calls: list[Callable[[Any], None]] = field(default_factory=list)
    closed: bool = False


class Inbox:
    """One engine's queue. ``cond`` may be shared by several inboxes, so that the one worker
    serving them all can sleep until any of them has something for it."""

    def __init__(self, max_queued: int, cond: threading.Condition | None = None) -> None:
        self._max_queued = max_queued
        self._cond = cond or threading.Condition()
        self._waiting: deque[Work] = deque()
        self._cancels: set[str] = set()
        self._calls: list[Callable[[Any], None]] = []
        self._room_waiters: list[tuple[asyncio.AbstractEventLoop, asyncio.Future[None]]] = []
        self._closed = False

    # ---- callers ---------------------------------------------------------------------------

    def put(self, work: Work, *, wait: float | None) -> None:
        """Queue work; if full, wait up to ``wait`` seconds (``None``: forever) for room."""
        deadline = _deadline(wait)
        with self._cond:
            while not self._try_append(work):
                self._cond.wait(self._time_left(work, deadline))

    async def aput(self, work: Work, *, wait: float | None) -> None:
        """``put`` for asyncio: waits for room on a future the worker resolves, so the event
        loop keeps running and no thread is held while the queue is full."""
        loop = asyncio.get_running_loop()
        deadline = _deadline(wait)
        while (room := self._append_or_wait(work, loop)) is not None:
            try:
                await asyncio.wait_for(room, self._time_left(work, deadline))
            except TimeoutError:
                raise self._overloaded(work) from None
            finally:
                self._stop_waiting(loop, room)

    def _time_left(self, work: Work, deadline: float | None) -> float | None:
        """Seconds ``work`` may still wait for room (``None``: no limit); once none are left,
        ``EngineOverloadedError``."""
        if deadline is None:
            return None
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            raise self._overloaded(work)
        return remaining

    def _append_or_wait(
        self, work: Work, loop: asyncio.AbstractEventLoop
    ) -> asyncio.Future[None] | None:
        """Queue ``work``, or else a future ``loop`` sees resolved once room is made
        (``None``: queued)."""
        room: asyncio.Future[None] = loop.create_future()
        with self._cond:
            if self._try_append(work):
                return None
            self._room_waiters.append((loop, room))
        return room

    def _stop_waiting(self, loop: asyncio.AbstractEventLoop, room: asyncio.Future[None]) -> None:
        with self._cond:
            if (loop, room) in self._room_waiters:
                self._room_waiters.remove((loop, room))

    def _try_append(self, work: Work) -> bool:
        """Queue ``work`` if there is room (``_cond`` held); raise if the inbox is closed."""
        if self._closed:
            raise EngineClosedError("the engine is closed", request_id=work.request_id)
        if len(self._waiting) >= self._max_queued:
            return False
        self._waiting.append(work)
        self._cond.notify_all()
        return True

    def _overloaded(self, work: Work) -> EngineOverloadedError:
        return EngineOverloadedError(
            f"{len(self._waiting)} requests are already waiting (max_queued={self._max_queued})",
            request_id=work.request_id,
        )

    def cancel(self, request_id: str) -> None:
        with self._cond:
            for work in self._waiting:
                if work.request_id == request_id:
                    self._waiting.remove(work)
                    self._made_room()
                    _answer_cancelled(work)
                    return
            self._cancels.add(request_id)
            self._cond.notify_all()

    def call(self, fn: Callable[[Any], None]) -> None:
        """Run ``fn`` on the worker thread at its next look."""
        with self._cond:
            if self._closed:
                raise EngineClosedError("the engine is closed")
            self._calls.append(fn)
            self._cond.notify_all()

    # ---- the worker ------------------------------------------------------------------------

    def ready(self, free_slots: int) -> bool:
        """Whether ``take`` would find something to act on (call with the condition held)."""
        if self._cancels or self._calls or self._closed:
            return True
        return any(isinstance(w, EmbedJob) or free_slots > 0 for w in self._waiting)

    def next_deadline(self) -> float | None:
        """The earliest deadline of a waiting request (call with the condition held)."""
        deadlines = [w.deadline for w in self._waiting if w.deadline is not None]
        return min(deadlines) if deadlines else None

    def take(self, free_slots: int, *, now: float) -> InboxBatch:
        """Take cancellations, calls, up to ``free_slots`` requests and any embedding jobs.

        Requests still waiting past their deadline are answered with a timeout here.
        """
        with self._cond:
            if self._closed:
                return InboxBatch(closed=True)
            self._expire(now)
            batch = InboxBatch(cancels=self._cancels, calls=self._calls)
            self._cancels, self._calls = set(), []
            kept: deque[Work] = deque()
            for work in self._waiting:
                if isinstance(work, EmbedJob):
                    batch.embeds.append(work)
                elif len(batch.requests) < free_slots:
                    batch.requests.append(work)
                else:
                    kept.append(work)
            changed = len(kept) != len(self._waiting)
            self._waiting = kept
            if changed:
                self._made_room()
            return batch

    def _expire(self, now: float) -> None:
        expired = [w for w in self._waiting if w.deadline is not None and w.deadline <= now]
        for work in expired:
            self._waiting.remove(work)
            work.channel.put(
                RequestTimeoutError(
                    "the request timed out while waiting for a free sequence",
                    request_id=work.request_id,
                )
            )
        if expired:
            self._made_room()

    def _made_room(self) -> None:
        """Wake callers waiting in ``put`` and ``aput`` (``_cond`` held)."""
        self._cond.notify_all()
        for loop, room in self._room_waiters:
            with contextlib.suppress(RuntimeError):  # that loop is closed: nobody waits
                loop.call_soon_threadsafe(_resolve, room)
        self._room_waiters.clear()

    def close(self, reason: str = "the engine was closed") -> None:
        """Refuse new work and answer what still waits with ``EngineClosedError(reason)``."""
        with self._cond:
            self._closed = True
            left = list(self._waiting)
            self._waiting.clear()
            self._made_room()
        for work in left:
            work.channel.put(EngineClosedError(reason, request_id=work.request_id))

    @property
    def closed(self) -> bool:
        return self._closed

    @property
    def n_waiting(self) -> int:
        with self._cond:
            return len(self._waiting)


def _deadline(wait: float | None) -> float | None:
    return None if wait is None else time.monotonic() + wait


def _resolve(future: asyncio.Future[None]) -> None:
    if not future.done():
        future.set_result(None)


def _answer_cancelled(work: Work) -> None:
    if isinstance(work, PreparedRequest):
        work.channel.put(
            StreamChunk(
                request_id=work.request_id,
                text="",
                finish_reason="cancelled",
                usage=Usage(prompt_tokens=len(work.prompt_tokens), completion_tokens=0),
            )
        )
    else:
        work.channel.put(RequestCancelledError("cancelled", request_id=work.request_id))
