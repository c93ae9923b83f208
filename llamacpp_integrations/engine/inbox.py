"""The bounded admission queue between callers and the worker, plus its control messages.

Callers add requests (waiting up to their own timeout when it is full) and cancellations; the worker
takes as many requests as it has free sequences, so waiting requests stay here, bounded, rather than
piling up inside the worker. A request cancelled while still waiting is answered right here.
"""

from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from ..errors import (
    EngineClosedError,
    EngineOverloadedError,
    RequestCancelledError,
    RequestTimeoutError,
)
from .requests import EmbedJob, PreparedRequest
from .types import StreamChunk, Usage

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
    def __init__(self, max_queued: int) -> None:
        self._max_queued = max_queued
        self._cond = threading.Condition()
        self._waiting: deque[Work] = deque()
        self._cancels: set[str] = set()
        self._calls: list[Callable[[Any], None]] = []
        self._closed = False

    def put(self, work: Work, *, wait: float | None) -> None:
        """Queue work; if full, wait up to ``wait`` seconds (``None``: forever) for room."""
        deadline = None if wait is None else time.monotonic() + wait
        with self._cond:
            while len(self._waiting) >= self._max_queued and not self._closed:
                remaining = None if deadline is None else deadline - time.monotonic()
                if remaining is not None and remaining <= 0:
                    raise EngineOverloadedError(
                        f"{len(self._waiting)} requests are already waiting (max_queued="
                        f"{self._max_queued})",
                        request_id=work.request_id,
                    )
                self._cond.wait(remaining)
            if self._closed:
                raise EngineClosedError("the engine is closed", request_id=work.request_id)
            self._waiting.append(work)
            self._cond.notify_all()

    def try_put(self, work: Work) -> bool:
        """Queue work if there is room, without waiting."""
        with self._cond:
            if self._closed:
                raise EngineClosedError("the engine is closed", request_id=work.request_id)
            if len(self._waiting) >= self._max_queued:
                return False
            self._waiting.append(work)
            self._cond.notify_all()
            return True

    def cancel(self, request_id: str) -> None:
        with self._cond:
            for work in self._waiting:
                if work.request_id == request_id:
                    self._waiting.remove(work)
                    self._cond.notify_all()
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

    def take(self, free_slots: int, *, block: bool, now: float) -> InboxBatch:
        """Take cancellations, calls, up to ``free_slots`` requests and any embedding jobs.

        Requests still waiting past their deadline are answered with a timeout here. With
        ``block`` the worker sleeps until something it can act on arrives.
        """
        with self._cond:
            while block and not self._has_work(free_slots) and not self._closed:
                self._cond.wait(_next_deadline_in(self._waiting, now))
                now = time.monotonic()
                self._expire(now)
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
            if len(kept) != len(self._waiting):
                self._cond.notify_all()  # room for callers waiting in put()
            self._waiting = kept
            return batch

    def _has_work(self, free_slots: int) -> bool:
        if self._cancels or self._calls:
            return True
        return any(isinstance(w, EmbedJob) or free_slots > 0 for w in self._waiting)

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
            self._cond.notify_all()

    def close(self) -> list[Work]:
        """Refuse new work; returns what was still waiting so it can be answered."""
        with self._cond:
            self._closed = True
            left = list(self._waiting)
            self._waiting.clear()
            self._cond.notify_all()
            return left

    @property
    def closed(self) -> bool:
        return self._closed

    @property
    def n_waiting(self) -> int:
        with self._cond:
            return len(self._waiting)


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


def _next_deadline_in(waiting: deque[Work], now: float) -> float | None:
    deadlines = [w.deadline for w in waiting if w.deadline is not None]
    return max(0.0, min(deadlines) - now) if deadlines else None
