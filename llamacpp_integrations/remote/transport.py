"""HTTP to one llama-server: pooled httpx clients, server-sent events, typed errors.

One ``Transport`` per server URL holds a sync ``httpx.Client`` and one ``httpx.AsyncClient``
per event loop (an async client's pooled connections belong to the loop that opened them).
Every failure leaves here as one of the package's errors:

* no connection, a 5xx, or 503 while the model loads: ``ServerUnavailableError``, retryable
  only while nothing of the answer was delivered (``delivered=False``);
* a 400: ``ContextOverflowError`` when the prompt does not fit, ``InvalidRequestError`` else;
* a 401/403: ``ServerAuthenticationError`` (not retryable: the key is missing or wrong
  everywhere), saying which;
* a 501 ``not_supported_error`` (embeddings or reranking not enabled...): ``ServerFeatureError``
  naming the feature and the server's build;
* past the deadline: ``RequestTimeoutError``.

What goes out, how often it is tried and what a failure or a refusal becomes is decided once,
by an ``_Exchange``; the sync and async methods only send, read and close. Behind a router
(``model``), every request names the model: a POST body's ``model`` field, a GET's ``?model=``.
The base URL may carry a path (a reverse proxy's prefix): requests are made relative to it.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import weakref
from collections.abc import AsyncIterator, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

import httpx
from pydantic import SecretStr

from ..errors import (
    ContextOverflowError,
    InvalidRequestError,
    LlamaCppIntegrationError,
    RequestTimeoutError,
    ServerAuthenticationError,
    ServerFeatureError,
    ServerUnavailableError,
)

__all__ = ["Transport", "error_for_status", "parse_event"]

POOL = httpx.Limits(max_connections=64, max_keepalive_connections=16)
# What a 501 on these paths means the server was not started with.
FEATURES = {
    "/embeddings": "embeddings (start the server with --embeddings)",
    "/v1/embeddings": "embeddings (start the server with --embeddings)",
    "/rerank": "rerank (start the server with --reranking)",
    "/v1/rerank": "rerank (start the server with --reranking)",
    "/infill": "infill",
}


def parse_event(line: str) -> dict[str, Any] | None:
    """One server-sent event line as JSON (``None`` for blank lines and comments)."""
    for prefix in ("data: ", "error: "):
        if line.startswith(prefix):
            payload = line[len(prefix) :].strip()
            if payload == "[DONE]":
                return None
            value = json.loads(payload)
            return value if isinstance(value, dict) else None
    return None


def _error_fields(body: object) -> tuple[str, str, Mapping[str, Any]]:
    error = body.get("error") if isinstance(body, Mapping) else None
    if isinstance(error, Mapping):
        return str(error.get("message", "")), str(error.get("type", "")), error
    return str(body)[:500], "", {}


def error_for_status(
    status: int,
    body: object,
    *,
    url: str,
    delivered: bool = False,
    request_id: str | None = None,
    key_sent: bool | None = None,
    path: str = "",
    build: str = "",
) -> LlamaCppIntegrationError:
    """The package's error for an HTTP error status (or an error event in a stream).

    ``key_sent`` says whether an API key went with the request (``None``: not known);
    ``path`` and ``build`` name the feature and the server when it lacks one.
    """
    message, kind, fields = _error_fields(body)
    if kind == "exceed_context_size_error":
        return ContextOverflowError(
            message,
            n_prompt_tokens=int(fields.get("n_prompt_tokens", 0)),
            n_ctx=int(fields.get("n_ctx", 0)),
            request_id=request_id,
        )
    if status in (401, 403):
        why = {
            True: "refused the API key given",
            False: "wants an API key and none was given (pass api_key=)",
            None: "refused the API key",
        }[key_sent]
        return ServerAuthenticationError(
            f"{why} ({status}): {message}", url=url, request_id=request_id
        )
    if status == 501 or kind == "not_supported_error":
        return ServerFeatureError(
            message,
            feature=FEATURES.get(path, path or "this endpoint"),
            url=url,
            build=build,
            request_id=request_id,
        )
    if status == 503:
        return ServerUnavailableError(
            f"unavailable (503, loading the model?): {message}",
            url=url,
            retryable=not delivered,
            request_id=request_id,
        )
    if status >= 500 and status != 501:
        return ServerUnavailableError(
            f"server error {status}: {message}",
            url=url,
            retryable=not delivered,
            request_id=request_id,
        )
    return InvalidRequestError(
        f"{url} refused the request ({status}): {message}", request_id=request_id
    )


def _unavailable(
    exc: httpx.HTTPError, url: str, *, delivered: bool, request_id: str | None
) -> LlamaCppIntegrationError:
    if isinstance(exc, httpx.TimeoutException) and not isinstance(exc, httpx.ConnectTimeout):
        return RequestTimeoutError(f"{url} did not answer in time", request_id=request_id)
    return ServerUnavailableError(
        f"{type(exc).__name__}: {exc}", url=url, retryable=not delivered, request_id=request_id
    )


@dataclass(frozen=True)
class _Exchange:
    """One HTTP request to one server, and what its failures become; no I/O."""

    url: str  # the server's base URL, for errors
    method: str
    path: str
    body: Mapping[str, Any] | None  # sent as JSON
    timeout: httpx.Timeout
    request_id: str | None = None
    stream: bool = False  # the answer's body is read as it comes
    params: Mapping[str, str] | None = None  # the query string
    key_sent: bool = False
    build: str = ""  # the server's, once known, for errors

    def request(self, client: httpx.Client | httpx.AsyncClient) -> httpx.Request:
        """The request, built by the client that sends it (its base URL and headers; httpx
        keeps a base URL's own path, a proxy's prefix, in front of ``path``)."""
        return client.build_request(
            self.method,
            self.path,
            json=self.body,
            params=self.params,
            timeout=self.timeout,
        )

    def attempts(self) -> Iterator[contextlib.AbstractContextManager[None]]:
        """The tries of the exchange, each made inside the context it gives; the caller
        returns from the first one that gets through. A pooled connection the server had
        already closed (it answered nothing) is tried once more, on a fresh connection; any
        other failure, or that one twice, raises the package's error."""
        yield self._failures(resend_stale=True)
        yield self._failures(resend_stale=False)

    @contextlib.contextmanager
    def _failures(self, *, resend_stale: bool) -> Iterator[None]:
        try:
            yield
        except httpx.HTTPError as exc:
            if not (resend_stale and isinstance(exc, httpx.RemoteProtocolError)):
                raise _unavailable(
                    exc, self.url, delivered=False, request_id=self.request_id
                ) from exc

    def refused(self, response: httpx.Response) -> bool:
        """Whether the answer's status is an error (its body, once read, tells which)."""
        return response.status_code >= 400

    def refusal(self, response: httpx.Response) -> LlamaCppIntegrationError:
        """The error a refused answer stands for (its body read)."""
        return error_for_status(
            response.status_code,
            _json_or_text(response),
            url=self.url,
            request_id=self.request_id,
            key_sent=self.key_sent,
            path=self.path,
            build=self.build,
        )

    def answer(self, response: httpx.Response) -> Any:
        """The answer's body (JSON, else text); a refusal raises its error."""
        if self.refused(response):
            raise self.refusal(response)
        return _json_or_text(response)


class Transport:
    """Pooled HTTP clients for one server URL (``model``: the model a router routes to)."""

    def __init__(
        self,
        url: str,
        *,
        api_key: SecretStr | None,
        timeout: float,
        model: str | None = None,
    ) -> None:
        self.url = url.rstrip("/")
        self.timeout = timeout
        self.model = model
        self.build = ""  # set once the server's /props was read, for errors naming it
        self._key_sent = api_key is not None
        self._headers = {"Accept": "application/json"}
        if api_key is not None:
            self._headers["Authorization"] = f"Bearer {api_key.get_secret_value()}"
        self._client: httpx.Client | None = None
        self._async: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, httpx.AsyncClient] = (
            weakref.WeakKeyDictionary()
        )

    def _timeout(self, seconds: float | None) -> httpx.Timeout:
        total = self.timeout if seconds is None else min(seconds, self.timeout)
        return httpx.Timeout(total, connect=min(total, 10.0))

    def client(self) -> httpx.Client:
        if self._client is None:
            self._client = httpx.Client(
                base_url=self.url, headers=self._headers, limits=POOL, timeout=self._timeout(None)
            )
        return self._client

    def aclient(self) -> httpx.AsyncClient:
        loop = asyncio.get_running_loop()
        client = self._async.get(loop)
        if client is None:
            client = self._async[loop] = httpx.AsyncClient(
                base_url=self.url, headers=self._headers, limits=POOL, timeout=self._timeout(None)
            )
        return client

    def close(self) -> None:
        if self._client is not None:
            self._client.close()
        self._async.clear()  # their loops may be gone: the connections go with the clients

    def _exchange(
        self,
        method: str,
        path: str,
        body: Mapping[str, Any] | None = None,
        *,
        timeout: float | None = None,
        request_id: str | None = None,
        stream: bool = False,
        routed: bool = True,
    ) -> _Exchange:
        params = None
        if routed and self.model is not None:
            if method == "GET":
                params = {"model": self.model}
            elif body is not None and "model" not in body:
                body = {**body, "model": self.model}
        return _Exchange(
            self.url,
            method,
            path,
            body,
            self._timeout(timeout),
            request_id,
            stream=stream,
            params=params,
            key_sent=self._key_sent,
            build=self.build,
        )

    def _send(self, exchange: _Exchange) -> httpx.Response:
        client = self.client()
        for attempt in exchange.attempts():
            with attempt:
                return client.send(exchange.request(client), stream=exchange.stream)
        raise AssertionError("unreachable: the last attempt raises its failure")

    async def _asend(self, exchange: _Exchange) -> httpx.Response:
        client = self.aclient()
        for attempt in exchange.attempts():
            with attempt:
                return await client.send(exchange.request(client), stream=exchange.stream)
        raise AssertionError("unreachable: the last attempt raises its failure")

    # ---- plain requests ---------------------------------------------------------------------

    # ``routed=False``: the server's own answer, not the routed model's (a router's /props).

    def get(
        self, path: str, *, timeout: float | None = None, routed: bool = True
    ) -> httpx.Response:
        return self._send(self._exchange("GET", path, timeout=timeout, routed=routed))

    async def aget(
        self, path: str, *, timeout: float | None = None, routed: bool = True
    ) -> httpx.Response:
        return await self._asend(self._exchange("GET", path, timeout=timeout, routed=routed))

    def get_json(self, path: str, *, routed: bool = True) -> Any:
        exchange = self._exchange("GET", path, routed=routed)
        return exchange.answer(self._send(exchange))

    async def aget_json(self, path: str, *, routed: bool = True) -> Any:
        exchange = self._exchange("GET", path, routed=routed)
        return exchange.answer(await self._asend(exchange))

    def post_json(
        self,
        path: str,
        body: Mapping[str, Any],
        *,
        timeout: float | None = None,
        request_id: str | None = None,
    ) -> Any:
        exchange = self._exchange("POST", path, body, timeout=timeout, request_id=request_id)
        return exchange.answer(self._send(exchange))

    async def apost_json(
        self,
        path: str,
        body: Mapping[str, Any],
        *,
        timeout: float | None = None,
        request_id: str | None = None,
    ) -> Any:
        exchange = self._exchange("POST", path, body, timeout=timeout, request_id=request_id)
        return exchange.answer(await self._asend(exchange))

    def tokenize(self, text: str, *, add_special: bool, parse_special: bool) -> list[int]:
        """Token ids of ``text`` by the server's ``/tokenize``."""
        body = _tokenize_body(text, add_special, parse_special)
        return _tokens(self.post_json("/tokenize", body))

    async def atokenize(self, text: str, *, add_special: bool, parse_special: bool) -> list[int]:
        """Async ``tokenize``."""
        body = _tokenize_body(text, add_special, parse_special)
        return _tokens(await self.apost_json("/tokenize", body))

    # ---- streams ------------------------------------------------------------------------------

    def _stream_exchange(
        self, path: str, body: Mapping[str, Any], timeout: float | None, request_id: str
    ) -> _Exchange:
        return self._exchange(
            "POST", path, body, timeout=timeout, request_id=request_id, stream=True
        )

    @contextlib.contextmanager
    def stream(
        self, path: str, body: Mapping[str, Any], *, timeout: float | None, request_id: str
    ) -> Iterator[httpx.Response]:
        """An open streamed response with a good status; closing it aborts the request."""
        exchange = self._stream_exchange(path, body, timeout, request_id)
        with contextlib.closing(self._send(exchange)) as response:
            if exchange.refused(response):
                response.read()
                raise exchange.refusal(response)
            yield response

    @contextlib.asynccontextmanager
    async def astream(
        self, path: str, body: Mapping[str, Any], *, timeout: float | None, request_id: str
    ) -> AsyncIterator[httpx.Response]:
        """Async ``stream``."""
        exchange = self._stream_exchange(path, body, timeout, request_id)
        async with contextlib.aclosing(await self._asend(exchange)) as response:
            if exchange.refused(response):
                await response.aread()
                raise exchange.refusal(response)
            yield response

    def stream_error(
        self, exc: httpx.HTTPError, *, delivered: bool, request_id: str
    ) -> LlamaCppIntegrationError:
        """The error for a failure while reading a stream."""
        return _unavailable(exc, self.url, delivered=delivered, request_id=request_id)


def _tokenize_body(text: str, add_special: bool, parse_special: bool) -> dict[str, Any]:
    return {"content": text, "add_special": add_special, "parse_special": parse_special}


def _tokens(answer: Any) -> list[int]:
    return [int(t) for t in answer["tokens"]]


def _json_or_text(response: httpx.Response) -> Any:
    try:
        return response.json()
    except ValueError:
        return response.text
