"""Per-request event channels and the handle a caller holds.

The worker puts events (``StreamChunk``, embedding results, or an exception) into a channel; the
caller reads them from a thread (blocking queue) or from asyncio (a queue of the loop's own,
``_LoopQueue``, fed with ``loop.call_soon_threadsafe``, so the event loop is never blocked).
Nothing else is shared between the two sides. Dropping a handle before its request ends cancels
the request, like a closed connection would on a server.

An event loop that falls behind (many streams, a framework's work per chunk) reads the chunks
already waiting for it as one: the loop wakes once per read whatever the backlog, so a reader
never holds it for a run of chunks, and a slow reader pays its per-chunk cost once per batch of
tokens instead of once per token.

A worker step's events reach their callers through an ``Outbox`` (``outbox.py``).
"""

from __future__ import annotations

import asyncio
import contextlib
import queue
from collections import deque
from collections.abc import AsyncIterator, Callable, Iterator, Sequence
from dataclasses import replace

from ..errors import EngineClosedError, RequestCancelledError
from .results import Completion, StreamChunk, TokenLogprob

__all__ = ["EventChannel", "RequestHandle"]

_POLL_S = 0.5


class EventChannel:
    """One-way, thread-safe delivery of a request's events from the worker to its caller."""

    def __init__(self, loop: asyncio.AbstractEventLoop | None = None) -> None:
        self._loop = loop
        self._sync: queue.SimpleQueue[object] | None = None
        self._async: _LoopQueue | None = None
        # An event read while merging the backlog that could not join it (an error, another
        # request's end...): the next read returns it first.
        self._held: object | None = None
        if loop is None:
            self._sync = queue.SimpleQueue()
        else:
            self._async = _LoopQueue(loop)

    def put(self, event: object) -> bool:
        """Deliver an event (worker side). False when the receiving event loop is gone."""
        if self._sync is not None:
            self._sync.put(event)
            return True
        assert self._loop is not None and self._async is not None
        try:
            self._loop.call_soon_threadsafe(self._async.put, event)
        except RuntimeError:  # the loop was closed: nobody will ever read this
            return False
        return True

    @property
    def loop(self) -> asyncio.AbstractEventLoop | None:
        """The event loop that reads this channel (``None``: a thread reads it)."""
        return self._loop

    def put_on_loop(self, event: object) -> None:
        """Queue an event, on the reading loop's thread (what ``put`` schedules there)."""
        assert self._async is not None
        self._async.put(event)

    @classmethod
    def for_loop(cls) -> EventChannel:
        """A channel read by the running event loop (call it on that loop)."""
        return cls(asyncio.get_running_loop())

    def get(self, alive: Callable[[], bool]) -> object:
        """Wait for the next event (thread side); ``alive`` guards against a dead worker."""
        assert self._sync is not None, "this channel belongs to an event loop"
        for _ in _polls(alive):
            with contextlib.suppress(queue.Empty):
                return self._sync.get(timeout=_POLL_S)
        return _worker_gone()

    async def aget(self, alive: Callable[[], bool]) -> object:
        """Wait for the next event without blocking the event loop; stream chunks already
        waiting behind it come merged into it."""
        assert self._async is not None, "this channel was made for a thread, not an event loop"
        if self._held is not None:
            event, self._held = self._held, None
            return event
        if not await self._async.wait(alive):
            return _worker_gone()
        return self._merge_backlog(self._async.get_nowait())

    def _merge_backlog(self, event: object) -> object:
        """``event`` with the stream chunks queued behind it merged in, up to a request's end.
        The queue fills only from loop callbacks, so it cannot grow while this runs."""
        assert self._async is not None
        waiting: list[StreamChunk] = []
        while (
            isinstance(event, StreamChunk)
            and event.finish_reason is None
            and not self._async.empty()
        ):
            waiting.append(event)
            event = self._async.get_nowait()
        if not waiting:
            return event
        if not isinstance(event, StreamChunk):
            self._held = event  # an error ends the stream after the tokens before it
            return _merged(waiting)
        return _merged([*waiting, event])


class _LoopQueue:
    """The events of a channel read on an event loop, touched only on that loop's thread and
    read by one task at a time (the request's handle).

    A read that finds nothing waits on one future, which ``put`` resolves. What guards against
    a dead worker is one timer per channel, armed while a read waits and checked every
    ``_POLL_S``, rather than a timer and a task per read (``asyncio.wait_for``), which a
    stream of many chunks would pay on the loop for every chunk.
    """

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop
        self._events: deque[object] = deque()
        self._waiter: asyncio.Future[None] | None = None
        self._watch: asyncio.TimerHandle | None = None

    def put(self, event: object) -> None:
        self._events.append(event)
        waiter = self._waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    def empty(self) -> bool:
        return not self._events

    def get_nowait(self) -> object:
        return self._events.popleft()

    async def wait(self, alive: Callable[[], bool]) -> bool:
        """Until an event waits (True), or the worker that would send one is gone (False).
        The first wait asks nothing: a worker that ended may have sent its last event
        (``call_soon_threadsafe``) to the loop still."""
        first = True
        while not self._events:
            if not first and not alive():
                return False
            first = False
            self._waiter = self._loop.create_future()
            if self._watch is None:
                self._watch = self._loop.call_later(_POLL_S, self._check)
            try:
                await self._waiter
            finally:
                self._waiter = None
        return True

    def _check(self) -> None:
        """The watch's turn: a read still waiting wakes to ask whether the worker lives (and
        arms the watch again if it does)."""
        self._watch = None
        waiter = self._waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)


def _merged(chunks: Sequence[StreamChunk]) -> StreamChunk:
    """Consecutive chunks of one request as one: their texts, tokens, logprobs and reasoning in
    order, and the last one's end (finish reason, usage, timings, stop string)."""
    if len(chunks) == 1:
        return chunks[0]
    return replace(
        chunks[-1],
        text="".join(c.text for c in chunks),
        token_ids=tuple(t for c in chunks for t in c.token_ids),
        logprobs=tuple(p for c in chunks for p in c.logprobs),
        reasoning="".join(c.reasoning for c in chunks),
    )


def _polls(alive: Callable[[], bool]) -> Iterator[None]:
    """One turn per wait of ``_POLL_S`` seconds for an event, for as long as the worker that
    would send it is alive."""
    yield
    while alive():
        yield


def _worker_gone() -> EngineClosedError:
    return EngineClosedError("the engine stopped before the request finished")


class RequestHandle:
    """A submitted generation request: iterate it (sync or async) for chunks, or cancel it.

    Iteration yields ``StreamChunk`` objects; the last one carries ``finish_reason`` and
    ``usage``. A request that fails raises its typed error from the iteration. A cancelled
    request ends with a chunk whose ``finish_reason`` is ``"cancelled"``. ``result()`` works
    before, during or after iteration: the handle keeps what it has read.
    """

    def __init__(
        self,
        request_id: str,
        channel: EventChannel,
        cancel: Callable[[str], None],
        alive: Callable[[], bool],
        *,
        logprobs: bool = False,
    ) -> None:
        self.request_id = request_id
        self._channel = channel
        self._cancel = cancel
        self._alive = alive
        self._texts: list[str] = []
        self._reasoning: list[str] = []
        self._tokens: list[int] = []
        self._logprobs: list[TokenLogprob] | None = [] if logprobs else None
        self._end: StreamChunk | BaseException | None = None

    @property
    def done(self) -> bool:
        """Whether the request's last event (its end or its error) has been read."""
        return self._end is not None

    def cancel(self) -> None:
        """Ask the engine to stop this request at its next step and free its sequence."""
        if self._end is None:
            self._cancel(self.request_id)

    def _accept(self, event: object) -> StreamChunk:
        if isinstance(event, BaseException):
            self._end = event
            raise event
        assert isinstance(event, StreamChunk)
        self._texts.append(event.text)
        if event.reasoning:
            self._reasoning.append(event.reasoning)
        self._tokens.extend(event.token_ids)
        if self._logprobs is not None:
            self._logprobs.extend(event.logprobs)
        if event.finish_reason is not None:
            self._end = event
        return event

    def __iter__(self) -> Iterator[StreamChunk]:
        try:
            while self._end is None:
                yield self._accept(self._channel.get(self._alive))
        finally:
            self.cancel()  # a no-op when finished; otherwise the consumer walked away

    async def __aiter__(self) -> AsyncIterator[StreamChunk]:
        try:
            while self._end is None:
                yield self._accept(await self._channel.aget(self._alive))
        finally:
            self.cancel()

    def result(self) -> Completion:
        """Wait for the whole answer. Raises ``RequestCancelledError`` if it was cancelled."""
        for _ in self:
            pass
        return self._completion()

    async def aresult(self) -> Completion:
        """Async ``result``."""
        async for _ in self:
            pass
        return self._completion()

    def _completion(self) -> Completion:
        end = self._end
        if isinstance(end, BaseException):
            raise end
        assert end is not None and end.finish_reason is not None
        text = "".join(self._texts)
        if end.finish_reason == "cancelled":
            raise RequestCancelledError(
                "the request was cancelled", request_id=self.request_id, partial_text=text
            )
        assert end.usage is not None and end.timings is not None
        return Completion(
            request_id=self.request_id,
            text=text,
            token_ids=tuple(self._tokens),
            finish_reason=end.finish_reason,
            usage=end.usage,
            timings=end.timings,
            logprobs=None if self._logprobs is None else tuple(self._logprobs),
            reasoning="".join(self._reasoning),
            stop_string=end.stop_string,
        )

    def __del__(self) -> None:
        if self._end is None:
            # At interpreter shutdown the inbox may be gone: nothing is left to free then.
            with contextlib.suppress(Exception):
                self._cancel(self.request_id)
