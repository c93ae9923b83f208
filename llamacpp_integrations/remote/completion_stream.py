"""One request's streamed ``/completion``, apart from the I/O: where it is sent, its lines read
into ``StreamChunk`` s, its transport failures told, and the error for a stream cut short.

``RemoteEngine.stream`` and ``astream`` open it and iterate its lines (the one with ``with`` and
``for``, the other with ``async with`` and ``async for``); everything they decide is here.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Iterator, Mapping
from typing import Any

import httpx

from ..engine.results import StreamChunk
from ..engine.types import GenerationRequest
from ..errors import ServerUnavailableError
from .stream_reading import StreamReading
from .transport import Transport

__all__ = ["COMPLETION_PATH", "CompletionStream"]

COMPLETION_PATH = "/completion"


class CompletionStream:
    """The ``/completion`` stream of ``request`` (its JSON ``body`` built) on ``transport``.

    Attributes:
        finished: Whether the last event (the one with the finish reason) was read.
    """

    def __init__(
        self, request: GenerationRequest, body: Mapping[str, Any], transport: Transport
    ) -> None:
        self._body = body
        self._timeout = request.timeout
        self._request_id = request.request_id
        self._transport = transport
        self._reading = StreamReading(request, transport)
        self.finished = False

    @contextlib.contextmanager
    def open(self) -> Iterator[httpx.Response]:
        """The open response; failures while reading it raise the package's errors."""
        with (
            self._transport.stream(
                COMPLETION_PATH, self._body, timeout=self._timeout, request_id=self._request_id
            ) as response,
            self._failures_told(),
        ):
            yield response

    @contextlib.asynccontextmanager
    async def aopen(self) -> AsyncIterator[httpx.Response]:
        """Async ``open``."""
        async with self._transport.astream(
            COMPLETION_PATH, self._body, timeout=self._timeout, request_id=self._request_id
        ) as response:
            with self._failures_told():
                yield response

    @contextlib.contextmanager
    def _failures_told(self) -> Iterator[None]:
        try:
            yield
        except httpx.HTTPError as exc:
            raise self._reading.failed(exc) from exc

    def chunks(self, line: str) -> tuple[StreamChunk, ...]:
        """The chunk a line of the stream holds, if any; reading the last one sets
        ``finished`` (the caller stops reading there)."""
        chunk = self._reading.read(line)
        if chunk is None:
            return ()
        self.finished = chunk.finish_reason is not None
        return (chunk,)

    def cut_short(self) -> ServerUnavailableError:
        """The error for a stream that ended before its last event."""
        return self._reading.cut_short()
