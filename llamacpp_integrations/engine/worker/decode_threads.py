"""The thread count the worker's decodes run on, where it follows the machine's load.

Three parts meet here: the governor (``thread_governor.py``) decides the count from the last
window's CPU accounting after each step; the stall watch (``stall_watch.py``) stops a decode
under way whose threads lost their cores, for the governor to ``cut`` the count and the same
batch to be decoded again; and every context the engine has made gets the count. With a count
that never moves (``n_threads`` set, ``deterministic``, a GPU, an OS without the accounting),
none of it runs: ``run`` is the decode alone.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable
from typing import TypeVar

from ..native.interrupt import DecodeInterrupted
from ..native.runner import NativeContext
from .stall_watch import StallWatch
from .thread_governor import ThreadGovernor

__all__ = ["DecodeThreads"]

log = logging.getLogger("llamacpp_integrations.engine")

R = TypeVar("R")


class DecodeThreads:
    """The count of one engine's decodes, on its worker thread.

    ``contexts`` gives the contexts made so far; ``publish`` puts fresh stats out when the
    count changed. ``start`` starts the watch (last, when the engine is built: nothing may
    leave its thread running).

    Attributes:
        watched: Whether decodes are watched, so contexts must be made ``interruptible``.
    """

    def __init__(
        self,
        target: int,
        *,
        follow_load: bool,
        contexts: Callable[[], Iterable[NativeContext]],
        publish: Callable[[], None],
    ) -> None:
        self.target = target
        self._governor = ThreadGovernor(target) if follow_load else None
        self.watched = self._governor is not None and self._governor.enabled
        self._watch: StallWatch | None = None
        self._contexts = contexts
        self._publish = publish

    @property
    def count(self) -> int:
        """The count decodes run on now."""
        return self.target if self._governor is None else self._governor.threads

    def start(self) -> None:
        if self.watched:
            self._watch = StallWatch()

    def stepped(self, seconds: float) -> None:
        """After a step that took ``seconds``: let the governor weigh the last window's CPU
        waits, and put its count on every context made so far (a context made since a drop
        starts with the full count)."""
        governor = self._governor
        if governor is None:
            return
        changed = governor.tick(time.monotonic(), seconds)
        if changed is not None or governor.threads != governor.target:
            self._apply(governor.threads)
        if changed is not None:
            self._publish()

    def run(self, context: NativeContext, decode: Callable[[], R]) -> R:
        """``decode()`` on ``context``, under the stall watch where there is one: a decode it
        stopped for lost cores runs again on the fewer threads the governor drops to
        (llama.cpp left the cache as before it)."""
        watch, governor = self._watch, self._governor
        if watch is None or governor is None:
            return decode()
        while True:
            watch.decoding(context.n_threads, context.interrupt)
            try:
                return decode()
            except DecodeInterrupted:
                pass
            finally:
                if watch.decoded():
                    context.clear_interrupt()  # a request that came as the decode ended
            got, threads = watch.got_cores, context.n_threads
            if got is None or governor.cut(time.monotonic(), got) is None:
                return decode()  # no fewer threads to go to: unwatched
            self._apply(governor.threads)
            self._publish()
            log.info(
                "stopped a decode on %d threads that had about %.1f cores; decoding it again on %d",
                threads,
                got,
                governor.threads,
            )

    def close(self) -> None:
        if self._watch is not None:
            self._watch.close()

    def _apply(self, threads: int) -> None:
        for context in self._contexts():
            context.set_threads(threads)
