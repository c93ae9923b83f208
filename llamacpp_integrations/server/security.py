"""The server's gatekeepers, as plain ASGI middleware: a bearer key and a body size limit.

Both answer before a handler runs, in the error shape of the API the path belongs to
(``ErrorShape``, given by the app: Anthropic's on the Anthropic endpoints, whose clients send
the key as ``x-api-key``). The key is compared in constant
time (``hmac.compare_digest``), so response timing says nothing about how much of a guess was
right. ``GET /health`` stays open, for load balancers and orchestrators.
"""

from __future__ import annotations

import hmac
import json
from collections.abc import Callable
from typing import Any

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from .errors import ApiError

__all__ = ["ApiKeyMiddleware", "BodyLimitMiddleware", "ErrorShape", "openai_shape", "send_error"]

OPEN_PATHS = frozenset({"/health"})

ErrorShape = Callable[[str, ApiError], dict[str, Any]]
"""The JSON body of a refusal of a request to a path: each API family answers in its own
shape, so the app (which knows the families) gives the gatekeepers this, and they import none."""


def openai_shape(path: str, error: ApiError) -> dict[str, Any]:
    """Every refusal in OpenAI's shape, whatever the path."""
    return error.body()


async def send_error(send: Send, error: ApiError, path: str, shape: ErrorShape) -> None:
    """Answer with ``error`` as a whole JSON response, in the ``shape`` of ``path``'s API."""
    body = json.dumps(shape(path, error)).encode()
    headers = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
    headers += [(k.lower().encode(), v.encode()) for k, v in error.headers]
    await send({"type": "http.response.start", "status": error.status, "headers": headers})
    await send({"type": "http.response.body", "body": body})


class ApiKeyMiddleware:
    """Refuse (401) requests whose key is not ``api_key``: ``Authorization: Bearer <key>``,
    or ``x-api-key: <key>`` as Anthropic's clients send it."""

    def __init__(self, app: ASGIApp, api_key: str, shape: ErrorShape = openai_shape) -> None:
        self.app = app
        self._key = api_key.encode()
        self.shape = shape

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["path"] in OPEN_PATHS or scope["method"] == "OPTIONS":
            await self.app(scope, receive, send)
            return
        given = b""
        for name, value in scope.get("headers", ()):
            if name == b"authorization":
                scheme, _, token = value.partition(b" ")
                if scheme.lower() == b"bearer":
                    given = token.strip()
            elif name == b"x-api-key" and not given:
                given = value.strip()
        if not hmac.compare_digest(given, self._key):
            error = ApiError(
                401,
                "invalid or missing API key: send 'Authorization: Bearer <key>' (or "
                "'x-api-key: <key>')",
                "authentication_error",
                "invalid_api_key",
                headers=(("WWW-Authenticate", "Bearer"),),
            )
            await send_error(send, error, scope["path"], self.shape)
            return
        await self.app(scope, receive, send)


class BodyLimitMiddleware:
    """Refuse (413) request bodies over ``max_bytes``, whether they declare their length or
    are sent in chunks."""

    def __init__(self, app: ASGIApp, max_bytes: int, shape: ErrorShape = openai_shape) -> None:
        self.app = app
        self.max_bytes = max_bytes
        self.shape = shape

    def _too_large(self) -> ApiError:
        return ApiError(
            413,
            f"request body is over the server's limit of {self.max_bytes} bytes",
            "invalid_request_error",
            "request_too_large",
        )

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        for name, value in scope.get("headers", ()):
            if name == b"content-length" and value.isdigit() and int(value) > self.max_bytes:
                await send_error(send, self._too_large(), scope["path"], self.shape)
                return
        seen = 0

        async def limited() -> Message:
            nonlocal seen
            message: dict[str, Any] = dict(await receive())
            if message["type"] == "http.request":
                seen += len(message.get("body", b""))
                if seen > self.max_bytes:
                    raise self._too_large()
            return message

        await self.app(scope, limited, send)
