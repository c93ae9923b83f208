"""Running a plan: four thin executors (sync or async, whole or streamed), one retry policy.

Everything that decides *what* runs is in the plan (``plan.py``); these only do the I/O. For
asyncio callers the plan is built on a thread (rendering templates, building grammars and
reading images are CPU work that must not stall the event loop), and the engine's ``a``-methods
do the rest off the loop.

Retries: a full engine queue (``EngineOverloadedError``) is retried with a growing pause, but
only before the answer's first piece arrived, streams included; after that a retry would
repeat text the caller already has. An answer whose calls the loop guard all dropped is
continued with a reply (``follow_up.py``).
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncGenerator, Callable, Generator, Iterator
from dataclasses import dataclass, replace

from ..engine import InferenceEngine, StreamChunk
from ..errors import EngineOverloadedError
from ..tools import ToolStreamChunk, written_reasoning
from .follow_up import follow_up_plan, merged_piece, merged_result, needs_answer
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


def _once(engine: InferenceEngine, plan: CallPlan, retry: RetryPolicy) -> CallResult:
    attempt = 0
    while True:
        try:
            return plan.read(engine.generate(plan.request))
        except EngineOverloadedError:
            pause = retry.pause(attempt)
            if pause is None:
                raise
            time.sleep(pause)
            attempt += 1


async def _aonce(engine: InferenceEngine, plan: CallPlan, retry: RetryPolicy) -> CallResult:
    attempt = 0
    while True:
        try:
            return plan.read(await engine.agenerate(plan.request))
        except EngineOverloadedError:
            pause = retry.pause(attempt)
            if pause is None:
                raise
            await asyncio.sleep(pause)
            attempt += 1


def _thought(plan: CallPlan, reasoning: str) -> str:
    # A continuation starts after the reasoning the model already wrote.
    spec = plan.request.reasoning
    return "" if spec is None else written_reasoning(spec, reasoning)


def _follow_up(plan: CallPlan, prompt: str, answer: str, generated: int) -> CallPlan | None:
    return follow_up_plan(plan, prompt=prompt, answer_so_far=answer, generated_tokens=generated)


def generate(
    engine: InferenceEngine, plan: PlanSource, retry: RetryPolicy = NO_RETRY
) -> CallResult:
    """Run a plan to its whole answer (continued with a reply when the loop guard dropped
    every call of it)."""
    built = _built(plan)
    result = _once(engine, built, retry)
    if not needs_answer(built, result):
        return result
    assert built.tools is not None
    prompt = engine.render_chat(built.tools.request) + _thought(built, result.reasoning)
    used = result.completion.usage.completion_tokens
    follow = _follow_up(built, prompt, result.content, used)
    return merged_result(result, None if follow is None else _once(engine, follow, retry))


async def agenerate(
    engine: InferenceEngine, plan: PlanSource, retry: RetryPolicy = NO_RETRY
) -> CallResult:
    """Async ``generate``."""
    built = await _abuilt(plan)
    result = await _aonce(engine, built, retry)
    if not needs_answer(built, result):
        return result
    assert built.tools is not None
    prompt = await asyncio.to_thread(engine.render_chat, built.tools.request)
    prompt += _thought(built, result.reasoning)
    used = result.completion.usage.completion_tokens
    follow = _follow_up(built, prompt, result.content, used)
    return merged_result(result, None if follow is None else await _aonce(engine, follow, retry))


def _stream_once(
    engine: InferenceEngine, plan: CallPlan, retry: RetryPolicy
) -> Generator[ToolStreamChunk, None, None]:
    attempt = 0
    while True:
        chunks = engine.stream(plan.request)
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
            reader = plan.reader()
            for chunk in _chain(first, chunks):
                piece = reader.read(chunk)
                if piece is not None:
                    yield piece
            return


async def _astream_once(
    engine: InferenceEngine, plan: CallPlan, retry: RetryPolicy
) -> AsyncGenerator[ToolStreamChunk, None]:
    attempt = 0
    while True:
        chunks = engine.astream(plan.request)
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
            reader = plan.reader()
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


def stream(
    engine: InferenceEngine, plan: PlanSource, retry: RetryPolicy = NO_RETRY
) -> Generator[ToolStreamChunk, None, None]:
    """Run a plan, yielding its answer as it comes. Closing the iterator cancels the request.
    When the loop guard drops every call of the answer, its last piece is replaced by the
    pieces of the reply that continues it."""
    built = _built(plan)
    said = thought = ""
    pieces = _stream_once(engine, built, retry)
    with contextlib.closing(pieces):
        for piece in pieces:
            thought += piece.reasoning
            if piece.finish_reason is None or not needs_answer(built, piece):
                said += piece.text
                yield piece
                continue
            assert built.tools is not None and piece.usage is not None
            prompt = engine.render_chat(built.tools.request) + _thought(built, thought)
            follow = _follow_up(built, prompt, said + piece.text, piece.usage.completion_tokens)
            if follow is None:
                yield replace(piece, finish_reason="length")
                return
            yield from (merged_piece(piece, p) for p in _stream_once(engine, follow, retry))


async def astream(
    engine: InferenceEngine, plan: PlanSource, retry: RetryPolicy = NO_RETRY
) -> AsyncGenerator[ToolStreamChunk, None]:
    """Async ``stream``; closing the generator or cancelling the task cancels the request."""
    built = await _abuilt(plan)
    said = thought = ""
    pieces = _astream_once(engine, built, retry)
    try:
        async for piece in pieces:
            thought += piece.reasoning
            if piece.finish_reason is None or not needs_answer(built, piece):
                said += piece.text
                yield piece
                continue
            assert built.tools is not None and piece.usage is not None
            prompt = await asyncio.to_thread(engine.render_chat, built.tools.request)
            prompt += _thought(built, thought)
            follow = _follow_up(built, prompt, said + piece.text, piece.usage.completion_tokens)
            if follow is None:
                yield replace(piece, finish_reason="length")
                return
            async for part in _astream_once(engine, follow, retry):
                yield merged_piece(piece, part)
    finally:
        await pieces.aclose()


def _chain(first: StreamChunk, rest: Iterator[StreamChunk]) -> Iterator[StreamChunk]:
    yield first
    yield from rest
