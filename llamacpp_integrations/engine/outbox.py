"""How a worker step's events reach their callers: gathered, then handed over at once.

One hand-over per event loop per step instead of one per stream: waking a loop
(``loop.call_soon_threadsafe``) writes to its wake-up socket, and sixteen streams on one loop
would wake it sixteen times a step.

When the hand-over happens matters as much. Writing to the wake-up socket lets go of the GIL for
the system call, the loop's thread (woken on another core) takes it, and the writer then waits
for it back while the loop runs its readers. A thread reading a channel, woken by its event,
takes the GIL the next time the worker lets go of it too. So the worker hands a step's events
over right before its next ``llama_decode`` (``EngineCore.hand_over``), and the loops are woken
by a thread of the outbox's own (``_LoopWaker``): the worker only queues their events and goes
on into the decode, where it lets go of the GIL for the kernels' whole run, and the readers run
beside the kernels instead of between two decodes.
"""

from __future__ import annotations

import asyncio
import threading
from collections import deque

from .channel import EventChannel

__all__ = ["Outbox"]

_Events = list[tuple[EventChannel, object]]


class Outbox:
    """Events for channels, gathered until ``flush`` hands them over: each event loop's at once
    (by the loop waker's thread), a thread's channel's in order. Only the worker thread uses it;
    a channel's events keep their order as long as everything put on it directly comes after
    the flush of what was gathered for it. ``close`` when done (it stops the waker's thread)."""

    def __init__(self) -> None:
        self._by_loop: dict[asyncio.AbstractEventLoop, _Events] = {}
        self._by_thread: _Events = []
        self._waker: _LoopWaker | None = None  # started when a loop first reads

    def __bool__(self) -> bool:
        return bool(self._by_loop or self._by_thread)

    def put(self, channel: EventChannel, event: object) -> None:
        loop = channel.loop
        if loop is None:
            self._by_thread.append((channel, event))
        else:
            self._by_loop.setdefault(loop, []).append((channel, event))

    def flush(self) -> list[EventChannel]:
        """Hand every gathered event over; the channels whose loop was found closed since the
        last flush (nobody will read them: their requests are to be cancelled)."""
        # Called before every decode, mostly with nothing gathered: then it swaps nothing.
        if self._by_thread:
            by_thread, self._by_thread = self._by_thread, []
            for channel, event in by_thread:
                channel.put(event)  # a queue put: it keeps the GIL
        gone: list[EventChannel] = []
        if self._by_loop:
            by_loop, self._by_loop = self._by_loop, {}
            for loop, events in by_loop.items():
                if loop.is_closed():
                    gone.extend(channel for channel, _ in events)
                else:
                    if self._waker is None:
                        self._waker = _LoopWaker()
                    self._waker.send(loop, events)
        if self._waker is not None:
            gone += self._waker.take_gone()
        return gone

    def close(self) -> None:
        """Let the waker hand over what it holds, and stop its thread."""
        if self._waker is not None:
            self._waker.close()
            self._waker = None


class _LoopWaker:
    """A thread that hands events to event loops (``loop.call_soon_threadsafe``), in the order
    they were sent, so that the worker never lets go of the GIL to wake a loop."""

    def __init__(self) -> None:
        self._cond = threading.Condition(threading.Lock())
        self._pending: deque[tuple[asyncio.AbstractEventLoop, _Events]] = deque()
        self._gone: list[EventChannel] = []
        self._closing = False
        self._thread = threading.Thread(target=self._run, name="llamacpp-loop-waker", daemon=True)
        self._thread.start()

    def send(self, loop: asyncio.AbstractEventLoop, events: _Events) -> None:
        with self._cond:
            self._pending.append((loop, events))
            self._cond.notify()

    def take_gone(self) -> list[EventChannel]:
        """The channels whose loop turned out closed when their events were handed over."""
        if not self._gone:  # the usual case, read without the lock: the next call sees a late one
            return []
        with self._cond:
            gone, self._gone = self._gone, []
        return gone

    def close(self) -> None:
        with self._cond:
            self._closing = True
            self._cond.notify()
        if self._thread is not threading.current_thread():
            self._thread.join()

    def _run(self) -> None:
        while True:
            with self._cond:
                while not self._pending and not self._closing:
                    self._cond.wait()
                if not self._pending:
                    return
                sends = list(self._pending)
                self._pending.clear()
            for loop, events in sends:
                try:
                    loop.call_soon_threadsafe(_deliver, events)
                except RuntimeError:  # the loop was closed: nobody will read these
                    with self._cond:
                        self._gone.extend(channel for channel, _ in events)


def _deliver(events: _Events) -> None:
    for channel, event in events:
        channel.put_on_loop(event)
