"""One streamed ``/completion`` read into ``StreamChunk`` s: the request's deadline, error events
in the stream, and what a broken or cut-short stream raises.

A failure before the first chunk is delivered is a retryable ``ServerUnavailableError`` (a fleet
may send the request elsewhere); after it, not, since the caller has seen part of an answer.
"""

from __future__ import annotations

import time
from collections.abc import Mapping

import httpx

from ..engine.results import StreamChunk
from ..engine.types import GenerationRequest
from ..errors import LlamaCppIntegrationError, RequestTimeoutError, ServerUnavailableError
from .chunks import ChunkReader
from .transport import Transport, error_for_status, parse_event

__all__ = ["StreamReading"]


class StreamReading:
    """The reading of one request's event stream from ``transport``'s server."""

    def __init__(self, request: GenerationRequest, transport: Transport) -> None:
        self._reader = ChunkReader(request)
        self._transport = transport
        self._request_id = request.request_id
        self._deadline = None if request.timeout is None else time.monotonic() + request.timeout

    def read(self, line: str) -> StreamChunk | None:
        """The chunk a line of the stream holds (None: a line with no event)."""
        reader = self._reader
        if self._deadline is not None and time.monotonic() > self._deadline:
            raise RequestTimeoutError(
                "the request timed out", request_id=self._request_id, partial_text=reader.text
            )
        event = parse_event(line)
        if event is None:
            return None
        if "error" in event:
            error = event["error"]
            code = int(error.get("code", 500)) if isinstance(error, Mapping) else 500
            raise error_for_status(
                code,
                event,
                url=self._transport.url,
                delivered=reader.delivered > 0,
                request_id=self._request_id,
            )
        chunk = reader.read(event)
        if chunk is not None:
            reader.delivered += 1
        return chunk

    def failed(self, exc: httpx.HTTPError) -> LlamaCppIntegrationError:
        """The error for a transport failure while reading."""
        error = self._transport.stream_error(
            exc, delivered=self._reader.delivered > 0, request_id=self._request_id
        )
        if isinstance(error, RequestTimeoutError):
            error.partial_text = self._reader.text
        return error

    def cut_short(self) -> ServerUnavailableError:
        """The error for a stream that ended before its last event."""
        return ServerUnavailableError(
            "the stream ended before its last event",
            url=self._transport.url,
            retryable=self._reader.delivered == 0,
            request_id=self._request_id,
        )
