"""Server-sent events, and watching for a client that went away.

A stream's events come from an async generator over the engine; ``EventStream`` sends them as
SSE while it listens for ``http.disconnect``. When the client drops, the generator is closed
at once, which cancels the engine request: the engine stops it at its next step and frees its
sequence. ``until_disconnect`` does the same for a whole (non-streamed) answer.

Why not sse-starlette's ``EventSourceResponse``: the framing is one line here (``sse``,
``named_sse``), while what the stream must do around it is not what that response does. Its end
has to tell whether the client left (the outcome counted, the leased models given back once), an
error after the headers goes out as the API family's own error event and then its terminator
(OpenAI's ``[DONE]``, nothing for Anthropic), and a whole answer needs the same disconnect watch
(``until_disconnect``), which it has no part for. It also keeps shutdown state in a
process-wide class (``AppStatus``) and sends a ping comment every 15 seconds unasked; a
graceful shutdown is uvicorn's own here (``run.serve``).
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncGenerator, Awaitable, Callable
from typing import Any, TypeVar

from starlette.requests import Request
from starlette.responses import Response
from starlette.types import Receive, Scope, Send

from .errors import ApiError

__all__ = ["DONE", "ClientGone", "EventStream", "named_sse", "sse", "until_disconnect"]

T = TypeVar("T")

DONE = b"data: [DONE]\n\n"


class ClientGone(Exception):
    """The client closed the connection before its answer was sent."""


def sse(body: dict[str, Any]) -> bytes:
    """One server-sent event carrying ``body`` as JSON."""
    return b"data: " + json.dumps(body, separators=(",", ":")).encode() + b"\n\n"


def named_sse(event: str, body: dict[str, Any]) -> bytes:
    """One server-sent event of type ``event`` carrying ``body`` as JSON (the Anthropic and
    Responses streams name each event)."""
    data = json.dumps(body, separators=(",", ":"))
    return f"event: {event}\ndata: {data}\n\n".encode()


async def _disconnected(receive: Receive) -> None:
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            return


async def until_disconnect(request: Request, work: Awaitable[T]) -> T:
    """``work``'s result; if the client disconnects first, ``work`` is cancelled (cancelling
    its engine request) and ``ClientGone`` raised."""
    task = asyncio.ensure_future(work)
    watch = asyncio.ensure_future(_disconnected(request.receive))
    try:
        await asyncio.wait((task, watch), return_when=asyncio.FIRST_COMPLETED)
    finally:
        watch.cancel()
        if not task.done():
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
    if task.cancelled():
        raise ClientGone
    return task.result()


class EventStream(Response):
    """An SSE response of ``events`` (bytes, each a whole event). An error raised by the
    generator after the stream began (an ``ApiError``) is sent as ``error_event`` of it, then
    ``done`` (OpenAI's ``[DONE]`` by default; ``None``: nothing). ``on_close`` and those
    ``after_close`` adds are called at the end with whether the client went away."""

    def __init__(
        self,
        events: AsyncGenerator[bytes, None],
        on_close: Callable[[bool], None] | None = None,
        *,
        error_event: Callable[[ApiError], bytes] = ApiError.sse,
        done: bytes | None = DONE,
    ) -> None:
        super().__init__(media_type="text/event-stream")
        self.events = events
        self.on_close = [on_close] if on_close is not None else []
        self.error_event = error_event
        self.done = done
        self.client_gone = False

    def after_close(self, callback: Callable[[bool], None]) -> None:
        """Call ``callback`` too when the stream ends."""
        self.on_close.append(callback)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        headers = [
            (b"content-type", b"text/event-stream; charset=utf-8"),
            (b"cache-control", b"no-cache"),
            (b"x-accel-buffering", b"no"),
        ]
        watch = asyncio.ensure_future(_disconnected(receive))
        pump = asyncio.ensure_future(self._pump(send, headers))
        try:
            await asyncio.wait((pump, watch), return_when=asyncio.FIRST_COMPLETED)
            if not pump.done():  # the client left: stop the engine request now
                self.client_gone = True
                pump.cancel()
                await asyncio.gather(pump, return_exceptions=True)
            elif pump.exception() is not None and not isinstance(pump.exception(), OSError):
                raise pump.exception()  # type: ignore[misc]
        finally:
            watch.cancel()
            await self.events.aclose()
            for callback in self.on_close:
                callback(self.client_gone)

    async def _pump(self, send: Send, headers: list[tuple[bytes, bytes]]) -> None:
        await send({"type": "http.response.start", "status": 200, "headers": headers})
        try:
            async for event in self.events:
                await send({"type": "http.response.body", "body": event, "more_body": True})
        except ApiError as error:
            body = self.error_event(error)
            await send({"type": "http.response.body", "body": body, "more_body": True})
        await send({"type": "http.response.body", "body": self.done or b"", "more_body": False})
