"""``n`` answers to one request: one engine request each, decoded together.

The plan is built once and copied; each copy is its own engine request, submitted at the same
time, so the engine decodes them in one batch and reads their common prompt once (a request
in flight shares the prompt cells it has read with the others: see ``engine/prompt_cache``).
Each answer runs through the client core's executors (``agenerate``/``astream``), so tools,
grammars and reasoning behave as they do for one answer.

Seeds: a seeded request's copies get seeds ``seed``, ``seed + 1``, ... (modulo 2**32), so they
differ from each other and choice 0 is the answer ``n=1`` gives with that seed; copies of an
unseeded request each draw a random seed. Greedy sampling (``temperature`` 0) gives ``n`` equal
answers, as it must.

Usage is counted the way OpenAI counts it: the prompt once, the completion tokens of every
answer summed; ``cached_tokens`` is what the answer that read least from the cache took from it.
A failure before any answer's first piece fails the whole request (with its HTTP status); a
failure after that ends the stream with an error event.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncGenerator, Awaitable, Callable, Sequence
from dataclasses import replace
from typing import Any, TypeVar

from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from ...client import CallPlan, CallResult, agenerate, astream
from ...engine import InferenceEngine, Usage
from ...engine.types import new_request_id
from ...tools import ToolStreamChunk
from ..exchange import Exchange
from ..streaming import sse, until_disconnect
from .bodies import AnswerBodies, usage_body
from .schemas import SamplingFields

__all__ = [
    "all_or_none",
    "answer_choices",
    "choice_plans",
    "choices_usage",
    "merged_choices",
    "whole_choices",
    "whole_response",
]

T = TypeVar("T")

_SEEDS = 2**32


def choice_plans(plan: CallPlan, n: int) -> list[CallPlan]:
    """``n`` copies of ``plan``, each its own engine request with a seed of its own (see the
    module docstring); the first keeps the plan's request id."""
    plans = []
    for index in range(n):
        sampling = plan.request.sampling
        seed = None if sampling.seed is None else (sampling.seed + index) % _SEEDS
        request = replace(
            plan.request,
            sampling=replace(sampling, seed=seed),
            request_id=plan.request.request_id if index == 0 else new_request_id(),
        )
        plans.append(replace(plan, request=request))
    return plans


async def all_or_none(works: Sequence[Awaitable[T]]) -> list[T]:
    """Every result of ``works``, run together; the first failure cancels the others (and so
    their engine requests) and is raised."""
    tasks = [asyncio.ensure_future(work) for work in works]
    try:
        return list(await asyncio.gather(*tasks))
    finally:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)


async def whole_choices(engine: InferenceEngine, plans: Sequence[CallPlan]) -> list[CallResult]:
    """The whole answers of ``plans``, run together."""
    return await all_or_none([agenerate(engine, plan) for plan in plans])


def choices_usage(usages: Sequence[Usage]) -> Usage:
    """The usage of ``n`` answers to one prompt: the prompt counted once."""
    first = usages[0]
    return Usage(
        prompt_tokens=first.prompt_tokens,
        completion_tokens=sum(u.completion_tokens for u in usages),
        cached_prompt_tokens=min(u.cached_prompt_tokens for u in usages),
        prompt_image_tokens=first.prompt_image_tokens,
        reasoning_tokens=sum(u.reasoning_tokens for u in usages),
    )


def whole_response(bodies: AnswerBodies, results: Sequence[CallResult]) -> dict[str, Any]:
    """One response body with a choice per result (``bodies`` is choice 0's)."""
    wholes = [bodies.again(index).whole(result) for index, result in enumerate(results)]
    usage = choices_usage([result.completion.usage for result in results])
    return wholes[0] | {
        "choices": [whole["choices"][0] for whole in wholes],
        "usage": usage_body(usage),
    }


async def merged_choices(
    engine: InferenceEngine, plans: Sequence[CallPlan]
) -> AsyncGenerator[tuple[int, ToolStreamChunk], None]:
    """The streamed answers of ``plans`` as ``(choice index, piece)`` in the order they come.

    Nothing is yielded before every answer's first piece came (or its stream ended empty), so
    a refusal of any of them (a full queue, a prompt too long) is raised before anything was
    sent. Closing the generator cancels the answers still running.
    """
    streams = [astream(engine, plan) for plan in plans]
    queue: asyncio.Queue[tuple[int, ToolStreamChunk | BaseException | None]] = asyncio.Queue()

    async def pump(index: int) -> None:
        try:
            async for piece in streams[index]:
                await queue.put((index, piece))
            await queue.put((index, None))
        except Exception as error:  # handed to the reader, which raises it
            await queue.put((index, error))

    pumps: list[asyncio.Task[None]] = []
    try:
        firsts = await all_or_none([anext(stream, None) for stream in streams])
        live = set()
        for index, first in enumerate(firsts):
            if first is not None and first.finish_reason is None:
                live.add(index)
        for index, first in enumerate(firsts):
            if first is not None:
                yield index, first
        pumps = [asyncio.ensure_future(pump(index)) for index in sorted(live)]
        while live:
            index, item = await queue.get()
            if isinstance(item, BaseException):
                raise item
            if item is None:
                live.discard(index)
                continue
            if item.finish_reason is not None:
                live.discard(index)
            yield index, item
    finally:
        for task in pumps:
            task.cancel()
        await asyncio.gather(*pumps, return_exceptions=True)
        for stream in streams:
            await stream.aclose()


async def answer_choices(
    exchange: Exchange,
    request: Request,
    endpoint: str,
    engine: InferenceEngine,
    plan: CallPlan | Callable[[], CallPlan],
    body: SamplingFields,
    bodies: AnswerBodies,
) -> Response:
    """Answer with ``body.n`` choices of ``plan``, whole or streamed as ``body`` asks (each
    chunk names its choice's ``index``; with ``include_usage`` the last chunk carries the
    summed usage)."""
    n = body.n or 1
    include_usage = bool(body.stream_options and body.stream_options.include_usage)
    built = plan if isinstance(plan, CallPlan) else await asyncio.to_thread(plan)
    plans = choice_plans(built, n)
    metrics = exchange.metrics
    if not body.stream:
        results = await until_disconnect(request, whole_choices(engine, plans))
        for result in results:
            metrics.answered(result.completion.usage, result.completion.timings)
        return JSONResponse(whole_response(bodies, results))
    pieces = merged_choices(engine, plans)
    try:
        first = await until_disconnect(request, anext(pieces, None))
    except BaseException:
        await pieces.aclose()
        raise

    async def events() -> AsyncGenerator[bytes, None]:
        choices = [bodies.again(index) for index in range(n)]
        for choice in choices:
            if (opening := choice.opening()) is not None:
                yield sse(opening)
        usages: dict[int, Usage] = {}
        item = first
        while item is not None:
            index, piece = item
            if piece.finish_reason is not None:
                metrics.answered(piece.usage, piece.timings)
                if piece.usage is not None:
                    usages[index] = piece.usage
            yield sse(choices[index].chunk(piece))
            item = await anext(pieces, None)
        if include_usage and usages:
            yield sse(bodies.usage(choices_usage([usages[i] for i in sorted(usages)])))

    return exchange.stream(endpoint, pieces, events())
