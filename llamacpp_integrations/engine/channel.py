"""Per-request event channels and the handle a caller holds.

The worker puts events (``StreamChunk``, embedding results, or an exception) into a channel; the
caller reads them from a thread (blocking queue) or from asyncio (an ``asyncio.Queue`` fed with
``loop.call_soon_threadsafe``, so the event loop is never blocked). Nothing else is shared between
the two sides. Every channel of one event loop posts through that loop's ``_LoopPost``: events
put while the loop has not yet taken the previous ones go with them, so a step of many streams
wakes the loop once, not once per stream, and a caller that fell behind gets its tokens in one
turn. Dropping a handle before its request ends cancels the request, like a closed
connection would on a server.
"""

from __future__ import annotations

import asyncio
import contextlib
import queue
import threading
import weakref
from collections.abc import AsyncIterator, Callable, Iterator

from ..errors import EngineClosedError, RequestCancelledError
from .results import Completion, StreamChunk, TokenLogprob

__all__ = ["EventChannel", "RequestHandle"]

_POLL_S = 0.5


class EventChannel:
    """One-way, thread-safe delivery of a request's events from the worker to its caller."""

    def __init__(self, loop: asyncio.AbstractEventLoop | None = None) -> None:
        self._sync: queue.SimpleQueue[object] | None = None
        self._async: asyncio.Queue[object] | None = None
        self._post: _LoopPost | None = None
        if loop is None:
            self._sync = queue.SimpleQueue()
        else:
            self._async = asyncio.Queue()
            self._post = _LoopPost.of(loop)

    def put(self, event: object) -> bool:
        """Deliver an event (worker side). False when the receiving event loop is gone."""
        if self._sync is not None:
            self._sync.put(event)
            return True
        assert self._post is not None and self._async is not None
        return self._post.put(self._async, event)

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
        """Wait for the next event without blocking the event loop."""
        assert self._async is not None, "this channel was made for a thread, not an event loop"
        if not self._async.empty():  # the common case mid-stream: no wait_for task per token
            return self._async.get_nowait()
        for _ in _polls(alive):
            with contextlib.suppress(TimeoutError):
                return await asyncio.wait_for(self._async.get(), timeout=_POLL_S)
        return _worker_gone()


class _LoopPost:
    """What the worker hands to one event loop: queued events, delivered in one callback.

    Only the first event put after a delivery schedules one (``call_soon_threadsafe`` writes to
    the loop's wake-up pipe, a system call); the rest join it in order.
    """

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        # Weak: the table's entry must not keep its own key (the loop) alive.
        self._loop = weakref.ref(loop)
        self._lock = threading.Lock()
        self._items: list[tuple[asyncio.Queue[object], object]] = []

    @classmethod
    def of(cls, loop: asyncio.AbstractEventLoop) -> _LoopPost:
        with _POSTS_LOCK:
            post = _POSTS.get(loop)
            if post is None:
                post = _POSTS[loop] = cls(loop)
            return post

    def put(self, target: asyncio.Queue[object], event: object) -> bool:
        """Queue ``event`` for ``target``; False when the loop is closed (nobody will read)."""
        loop = self._loop()
        if loop is None or loop.is_closed():
            return False
        with self._lock:
            self._items.append((target, event))
            if len(self._items) > 1:
                return True  # a delivery is already scheduled and will take it
        try:
            loop.call_soon_threadsafe(self._deliver)
        except RuntimeError:  # closed meanwhile
            with self._lock:
                self._items.clear()
            return False
        return True

    def _deliver(self) -> None:
        with self._lock:
            items, self._items = self._items, []
        for target, event in items:
            target.put_nowait(event)


_POSTS: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, _LoopPost] = (
    weakref.WeakKeyDictionary()
)
_POSTS_LOCK = threading.Lock()


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
