"""Whole answers from streams: how ``generate`` is built on ``stream`` for remote engines.

A remote answer arrives only as a stream, so ``generate`` and ``agenerate`` of one server and of
a fleet collect their own streams into a ``Completion``. The last chunk carries the finish
reason, usage and timings; a stream that ends without it was cut off by the server.
"""

from __future__ import annotations

from collections.abc import AsyncGenerator, Iterable

from ..engine.results import Completion, StreamChunk, Timings
from ..engine.types import GenerationRequest
from ..errors import ServerUnavailableError

__all__ = ["acollect", "collect"]


def collect(request: GenerationRequest, chunks: Iterable[StreamChunk], *, url: str) -> Completion:
    """The ``Completion`` of ``request`` from its chunks; ``url`` names the server for the error
    a cut-off stream gives."""
    return _completion(request, list(chunks), url)


async def acollect(
    request: GenerationRequest, chunks: AsyncGenerator[StreamChunk, None], *, url: str
) -> Completion:
    """Async ``collect``; the stream is closed however collecting ends (a cancelled caller
    closes it, which aborts the request on the server)."""
    collected: list[StreamChunk] = []
    try:
        async for chunk in chunks:
            collected.append(chunk)
    finally:
        await chunks.aclose()
    return _completion(request, collected, url)


def _completion(request: GenerationRequest, chunks: list[StreamChunk], url: str) -> Completion:
    last = chunks[-1] if chunks else None
    if last is None or last.finish_reason is None or last.usage is None:
        raise ServerUnavailableError(
            "the answer ended without its last chunk",
            url=url,
            retryable=False,
            request_id=request.request_id,
        )
    return Completion(
        request_id=request.request_id,
        text="".join(chunk.text for chunk in chunks),
        token_ids=tuple(token for chunk in chunks for token in chunk.token_ids),
        finish_reason=last.finish_reason,
        usage=last.usage,
        timings=last.timings or Timings(0.0, None, 0.0, 0.0, 0.0),
        logprobs=None
        if request.logprobs is None
        else tuple(logprob for chunk in chunks for logprob in chunk.logprobs),
        reasoning="".join(chunk.reasoning for chunk in chunks),
        stop_string=last.stop_string,
    )
