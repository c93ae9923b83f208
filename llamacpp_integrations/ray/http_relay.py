"""An HTTP request carried from the ingress to a replica and its answer carried back, as ASGI
messages. No Ray: the deployments (``serve_app``) do the carrying.

The ingress reads the body (it must: the router keys on the prompt) and sends a ``RoutedHttp``;
the replica runs the whole ``create_app`` app on it (``answer``) and yields the messages the app
sends, which the ingress passes on to Serve's proxy. The app sees a client that sent its body
and then stays until the answer ends or the call is cancelled; a cancelled call (the client
left, the ingress gave up) cancels the app's task, and with it the engine request.

When the replica dies, the ingress answers in the shape of the route's API family
(``failure_messages``): before the answer began, a 503 with the family's error body; once a
stream began, the family's error event and its end, so an SDK raises its typed error instead of
reading a cut stream as a finished one.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncGenerator, MutableMapping
from typing import Any

from starlette.types import ASGIApp, Receive

from ..server.anthropic.errors import anthropic_error_body, anthropic_error_event, speaks_anthropic
from ..server.errors import ApiError
from ..server.streaming import DONE
from .prefix_keys import RoutedHttp

__all__ = ["answer", "failure_messages", "plain_scope", "read_body", "route_path"]

Message = MutableMapping[str, Any]
_SCOPE_KEYS = (
    "type",
    "asgi",
    "http_version",
    "method",
    "scheme",
    "path",
    "raw_path",
    "query_string",
    "root_path",
    "headers",
    "client",
    "server",
)
_ENDED = object()


def plain_scope(scope: MutableMapping[str, Any]) -> dict[str, Any]:
    """The fields of an HTTP scope a replica's app needs, without the ingress's own state
    (apps, routers, extensions), which need not pickle."""
    return {key: scope[key] for key in _SCOPE_KEYS if key in scope}


def route_path(scope: MutableMapping[str, Any]) -> str:
    """The path under the application's route prefix (``/v1/chat/completions``)."""
    path: str = scope.get("path", "")
    root: str = scope.get("root_path", "")
    return path[len(root) :] if root and path.startswith(root) else path


async def read_body(receive: Receive, limit: int) -> bytes | None:
    """The request's body, cut one byte past ``limit`` (enough for the replica's body limit to
    answer 413 without this side holding a huge body); ``None`` when the client left first."""
    parts: list[bytes] = []
    size = 0
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            return None
        chunk = message.get("body", b"")
        parts.append(chunk[: limit + 1 - size])
        size += len(parts[-1])
        if size > limit or not message.get("more_body", False):
            break
    return b"".join(parts)


async def answer(
    app: ASGIApp, call: RoutedHttp, headers: list[tuple[bytes, bytes]]
) -> AsyncGenerator[Message, None]:
    """The ASGI messages ``app`` sends in answer to ``call``, ``headers`` added to its start."""
    sent: asyncio.Queue[Any] = asyncio.Queue()
    body_read = False
    finished = asyncio.Event()

    async def receive() -> Message:
        nonlocal body_read
        if not body_read:
            body_read = True
            return {"type": "http.request", "body": call.body, "more_body": False}
        await finished.wait()  # the client stays until the answer ends
        return {"type": "http.disconnect"}

    async def send(message: Message) -> None:
        if message["type"] == "http.response.start":
            message = {**message, "headers": [*message.get("headers", ()), *headers]}
        await sent.put(message)

    task = asyncio.ensure_future(app(dict(call.scope), receive, send))
    task.add_done_callback(lambda _: sent.put_nowait(_ENDED))
    started = False
    try:
        while (message := await sent.get()) is not _ENDED:
            started = started or message["type"] == "http.response.start"
            yield message
        # A bug escaped the app's handlers before it answered: say so rather than nothing.
        if not started and not task.cancelled() and task.exception() is not None:
            for message in failure_messages(route_path(call.scope), None, "internal error"):
                yield message
    finally:
        finished.set()
        if not task.done():  # the call was cancelled: so is the app, and its engine request
            task.cancel()
        await asyncio.gather(task, return_exceptions=True)


def failure_messages(path: str, start: Message | None, reason: str) -> list[Message]:
    """What the ingress sends when the replica answering ``path`` failed: a whole 503 answer if
    none began (``start`` is ``None``), else the end of the begun one (an error event first
    when it is a stream)."""
    error = ApiError(503, f"the replica failed: {reason}", "server_error", "replica_failed")
    anthropic = speaks_anthropic(path)
    if start is None:
        body = anthropic_error_body(error) if anthropic else error.body()
        return [
            {
                "type": "http.response.start",
                "status": 503,
                "headers": [(b"content-type", b"application/json"), (b"retry-after", b"1")],
            },
            {"type": "http.response.body", "body": json.dumps(body).encode(), "more_body": False},
        ]
    content_type = dict(start.get("headers", ())).get(b"content-type", b"")
    tail = b""
    if content_type.startswith(b"text/event-stream"):
        tail = anthropic_error_event(error) if anthropic else error.sse() + DONE
    return [{"type": "http.response.body", "body": tail, "more_body": False}]
