"""Running a plan: four thin executors (sync or async, whole or streamed), one retry policy.

Everything that decides *what* runs is in the plan (``plan.py``), and what a refusal or a
dropped answer leads to is decided once here (``RetryPolicy.attempts``, ``_StreamedAnswer``,
``_reply_plan``); the sync and async executors only call, await, iterate and sleep. For
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
import itertools
import time
from collections.abc import AsyncGenerator, Awaitable, Callable, Generator, Iterator
from dataclasses import dataclass, replace
from typing import TypeVar

from ..engine import ChatRequest, InferenceEngine, StreamChunk
from ..errors import EngineOverloadedError
from ..tools import ToolStreamChunk, written_reasoning
from .follow_up import follow_up_plan, merged_piece, merged_result, needs_answer
from .plan import CallPlan, CallResult, ChunkReader

__all__ = ["RetryAttempt", "RetryPolicy", "agenerate", "astream", "generate", "stream"]

T = TypeVar("T")

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

    def attempts(self) -> Iterator[contextlib.AbstractContextManager[RetryAttempt]]:
        """The tries of a call, each made inside the context it gives: a refusal for a full
        queue is swallowed while a retry is left (the caller waits the attempt's ``pause``
        before the next try), else raised. The caller returns from the first try that gets
        through."""
        return (self._attempt(number) for number in itertools.count())

    @contextlib.contextmanager
    def _attempt(self, number: int) -> Iterator[RetryAttempt]:
        attempt = RetryAttempt()
        try:
            yield attempt
        except EngineOverloadedError:
            pause = self.pause(number)
            if pause is None:
                raise
            attempt.pause = pause


@dataclass
class RetryAttempt:
    """One try under a ``RetryPolicy``: how long to wait before the next one, once it was
    refused and may be retried."""

    pause: float = 0.0


NO_RETRY = RetryPolicy(max_retries=0)


# ---- I/O: tries, retried while the engine's queue is full ------------------------------------


def _retried(call: Callable[[], T], retry: RetryPolicy) -> T:
    for attempt in retry.attempts():
        with attempt as tried:
            return call()
        time.sleep(tried.pause)
    raise AssertionError("unreachable: the last attempt raises its refusal")


async def _aretried(call: Callable[[], Awaitable[T]], retry: RetryPolicy) -> T:
    for attempt in retry.attempts():
        with attempt as tried:
            return await call()
        await asyncio.sleep(tried.pause)
    raise AssertionError("unreachable: the last attempt raises its refusal")


def _once(engine: InferenceEngine, plan: CallPlan, retry: RetryPolicy) -> CallResult:
    return plan.read(_retried(lambda: engine.generate(plan.request), retry))


async def _aonce(engine: InferenceEngine, plan: CallPlan, retry: RetryPolicy) -> CallResult:
    return plan.read(await _aretried(lambda: engine.agenerate(plan.request), retry))


_Started = tuple[Generator[StreamChunk, None, None], StreamChunk | None]
_AStarted = tuple[AsyncGenerator[StreamChunk, None], StreamChunk | None]


def _started(chunks: Generator[StreamChunk, None, None]) -> _Started:
    # The first chunk is where a full queue shows: a stream is retried only until then.
    return chunks, next(chunks, None)


async def _astarted(chunks: AsyncGenerator[StreamChunk, None]) -> _AStarted:
    return chunks, await anext(chunks, None)


# ---- what the executors decide: pieces, and the reply that continues an answer --------------


def _pieces(reader: ChunkReader, chunk: StreamChunk | None) -> tuple[ToolStreamChunk, ...]:
    """The piece ``chunk`` makes for the caller, if any (``None``: a stream with no chunk)."""
    piece = None if chunk is None else reader.read(chunk)
    return () if piece is None else (piece,)


def _reply_chat(plan: CallPlan, answer: CallResult | ToolStreamChunk) -> ChatRequest | None:
    """The chat a reply renders when the loop guard dropped every call of ``answer`` (the
    whole of it, or its last piece); ``None``: the answer stands as it is."""
    if answer.finish_reason is None or not needs_answer(plan, answer):
        return None
    assert plan.tools is not None
    return plan.tools.request


def _reply_plan(
    plan: CallPlan, rendered: str, *, thought: str, said: str, generated: int
) -> CallPlan | None:
    """The reply that continues an answer (``None``: no room is left for one). Its prompt
    starts after the reasoning the model already wrote."""
    spec = plan.request.reasoning
    prompt = rendered + ("" if spec is None else written_reasoning(spec, thought))
    return follow_up_plan(plan, prompt=prompt, answer_so_far=said, generated_tokens=generated)


def _whole_reply(plan: CallPlan, result: CallResult, rendered: str) -> CallPlan | None:
    used = result.completion.usage.completion_tokens
    return _reply_plan(
        plan, rendered, thought=result.reasoning, said=result.content, generated=used
    )


class _StreamedAnswer:
    """What a streamed answer said and thought so far, for the reply that may continue it."""

    def __init__(self, plan: CallPlan) -> None:
        self.plan = plan
        self._said = self._thought = ""

    def reply_chat(self, piece: ToolStreamChunk) -> ChatRequest | None:
        """Take ``piece`` in; the chat to render when it ends an answer that needs a reply
        (``None``: pass it on)."""
        self._thought += piece.reasoning
        chat = _reply_chat(self.plan, piece)
        if chat is None:
            self._said += piece.text
        return chat

    def reply(self, piece: ToolStreamChunk, rendered: str) -> CallPlan | None:
        """The reply that continues the answer ``piece`` ends (``None``: no room is left)."""
        assert piece.usage is not None
        said, used = self._said + piece.text, piece.usage.completion_tokens
        return _reply_plan(self.plan, rendered, thought=self._thought, said=said, generated=used)


def _cut(piece: ToolStreamChunk) -> ToolStreamChunk:
    """The last piece of an answer that needed a reply there was no room for."""
    return replace(piece, finish_reason="length")


# ---- the executors ---------------------------------------------------------------------------


def generate(
    engine: InferenceEngine, plan: PlanSource, retry: RetryPolicy = NO_RETRY
) -> CallResult:
    """Run a plan to its whole answer (continued with a reply when the loop guard dropped
    every call of it)."""
    built = _built(plan)
    result = _once(engine, built, retry)
    chat = _reply_chat(built, result)
    if chat is None:
        return result
    follow = _whole_reply(built, result, engine.render_chat(chat))
    return merged_result(result, None if follow is None else _once(engine, follow, retry))


async def agenerate(
    engine: InferenceEngine, plan: PlanSource, retry: RetryPolicy = NO_RETRY
) -> CallResult:
    """Async ``generate``."""
    built = await _abuilt(plan)
    result = await _aonce(engine, built, retry)
    chat = _reply_chat(built, result)
    if chat is None:
        return result
    follow = _whole_reply(built, result, await asyncio.to_thread(engine.render_chat, chat))
    return merged_result(result, None if follow is None else await _aonce(engine, follow, retry))


def _stream_once(
    engine: InferenceEngine, plan: CallPlan, retry: RetryPolicy
) -> Generator[ToolStreamChunk, None, None]:
    chunks, first = _retried(lambda: _started(engine.stream(plan.request)), retry)
    with contextlib.closing(chunks):
        reader = plan.reader()
        yield from _pieces(reader, first)
        for chunk in chunks:
            yield from _pieces(reader, chunk)


async def _astream_once(
    engine: InferenceEngine, plan: CallPlan, retry: RetryPolicy
) -> AsyncGenerator[ToolStreamChunk, None]:
    chunks, first = await _aretried(lambda: _astarted(engine.astream(plan.request)), retry)
    async with contextlib.aclosing(chunks):
        reader = plan.reader()
        for piece in _pieces(reader, first):
            yield piece
        async for chunk in chunks:
            for piece in _pieces(reader, chunk):
                yield piece


def stream(
    engine: InferenceEngine, plan: PlanSource, retry: RetryPolicy = NO_RETRY
) -> Generator[ToolStreamChunk, None, None]:
    """Run a plan, yielding its answer as it comes. Closing the iterator cancels the request.
    When the loop guard drops every call of the answer, its last piece is replaced by the
    pieces of the reply that continues it."""
    answer = _StreamedAnswer(_built(plan))
    with contextlib.closing(_stream_once(engine, answer.plan, retry)) as pieces:
        for piece in pieces:
            chat = answer.reply_chat(piece)
            if chat is None:
                yield piece
                continue
            follow = answer.reply(piece, engine.render_chat(chat))
            if follow is None:
                yield _cut(piece)
                return
            yield from (merged_piece(piece, p) for p in _stream_once(engine, follow, retry))


async def astream(
    engine: InferenceEngine, plan: PlanSource, retry: RetryPolicy = NO_RETRY
) -> AsyncGenerator[ToolStreamChunk, None]:
    """Async ``stream``; closing the generator or cancelling the task cancels the request."""
    answer = _StreamedAnswer(await _abuilt(plan))
    async with contextlib.aclosing(_astream_once(engine, answer.plan, retry)) as pieces:
        async for piece in pieces:
            chat = answer.reply_chat(piece)
            if chat is None:
                yield piece
                continue
            follow = answer.reply(piece, await asyncio.to_thread(engine.render_chat, chat))
            if follow is None:
                yield _cut(piece)
                return
            async for part in _astream_once(engine, follow, retry):
                yield merged_piece(piece, part)
