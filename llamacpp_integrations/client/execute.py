"""Running a plan: four thin executors (sync or async, whole or streamed), one retry policy.

Everything that decides *what* runs is in the plan (``plan.py``); these only do the I/O. For
asyncio callers the plan is built on a thread (rendering templates, building grammars and
reading images are CPU work that must not stall the event loop), and the engine's ``a``-methods
do the rest off the loop.

Retries: a full engine queue (``EngineOverloadedError``) is retried with a growing pause, but
only before the answer's first piece arrived, streams included; after that a retry would
repeat text the caller already has.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncGenerator, Callable, Generator, Iterator
from dataclasses import dataclass

from ..engine import InferenceEngine, StreamChunk
from ..errors import EngineOverloadedError
from ..tools import ToolStreamChunk
from .plan import CallPlan, CallResult

__all__ = ["RetryPolicy", "agenerate", "astream", "generate", "stream"]

PlanSource = CallPlan | Callable[[], CallPlan]
"""A plan, or a function that builds one (async executors call it on a thread)."""


def _built(plan: PlanSource) -> CallPlan:
    return plan if isinstance(plan, CallPlan) else plan()


async def _abuilt(plan: PlanSource) -> CallPlan:
    return plan if isinstance(plan, CallPlan) else await asyncio.to_thread(plan)


@dataclass(frozen=True)
class RetryPolicy:
    """Retries of a call the engine refused for a full queue: ``max_retries`` more tries,
    after pauses of ``base_delay_s``, doubling each time."""

    max_retries: int = 2
    base_delay_s: float = 0.05

    def pause(self, attempt: int) -> float | None:
        """The pause before retry ``attempt + 1``, or ``None`` when no retry is left."""
        return None if attempt >= self.max_retries else self.base_delay_s * 2**attempt


NO_RETRY = RetryPolicy(max_retries=0)


def generate(
    engine: InferenceEngine, plan: PlanSource, retry: RetryPolicy = NO_RETRY
) -> CallResult:
    """Run a plan to its whole answer."""
    built = _built(plan)
    attempt = 0
    while True:
        try:
            return built.read(engine.generate(built.request))
        except EngineOverloadedError:
            pause = retry.pause(attempt)
            if pause is None:
                raise
            time.sleep(pause)
            attempt += 1


async def agenerate(
    engine: InferenceEngine, plan: PlanSource, retry: RetryPolicy = NO_RETRY
) -> CallResult:
    """Async ``generate``."""
    built = await _abuilt(plan)
    attempt = 0
    while True:
        try:
            return built.read(await engine.agenerate(built.request))
        except EngineOverloadedError:
            pause = retry.pause(attempt)
            if pause is None:
                raise
            await asyncio.sleep(pause)
            attempt += 1


def stream(
    engine: InferenceEngine, plan: PlanSource, retry: RetryPolicy = NO_RETRY
) -> Generator[ToolStreamChunk, None, None]:
    """Run a plan, yielding its answer as it comes. Closing the iterator cancels the request."""
    built = _built(plan)
    attempt = 0
    while True:
        chunks = engine.stream(built.request)
        with contextlib.closing(chunks):
            try:
                first = next(chunks)
            except StopIteration:
                return
            except EngineOverloadedError:
                pause = retry.pause(attempt)
                if pause is None:
                    raise
                time.sleep(pause)
                attempt += 1
                continue
            reader = built.reader()
            for chunk in _chain(first, chunks):
                piece = reader.read(chunk)
                if piece is not None:
                    yield piece
            return


async def astream(
    engine: InferenceEngine, plan: PlanSource, retry: RetryPolicy = NO_RETRY
) -> AsyncGenerator[ToolStreamChunk, None]:
    """Async ``stream``; closing the generator or cancelling the task cancels the request."""
    built = await _abuilt(plan)
    attempt = 0
    while True:
        chunks = engine.astream(built.request)
        try:
            try:
                first = await anext(chunks)
            except StopAsyncIteration:
                return
            except EngineOverloadedError:
                pause = retry.pause(attempt)
                if pause is None:
                    raise
                await asyncio.sleep(pause)
                attempt += 1
                continue
            reader = built.reader()
            piece = reader.read(first)
            if piece is not None:
                yield piece
            async for chunk in chunks:
                piece = reader.read(chunk)
                if piece is not None:
                    yield piece
            return
        finally:
            await chunks.aclose()


def _chain(first: StreamChunk, rest: Iterator[StreamChunk]) -> Iterator[StreamChunk]:
    yield first
    yield from rest
