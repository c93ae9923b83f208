"""HTTP to one llama-server: pooled httpx clients, server-sent events, typed errors.

One ``Transport`` per server URL holds a sync ``httpx.Client`` and one ``httpx.AsyncClient``
per event loop (an async client's pooled connections belong to the loop that opened them).
Every failure leaves here as one of the package's errors:

* no connection, a 5xx, or 503 while the model loads: ``ServerUnavailableError``, retryable
  only while nothing of the answer was delivered (``delivered=False``);
* a 400: ``ContextOverflowError`` when the prompt does not fit, ``InvalidRequestError`` else;
* a 401/403: ``ServerUnavailableError`` (not retryable: the key is wrong everywhere);
* past the deadline: ``RequestTimeoutError``.
"""

from __future__ import annotations

import asyncio
import json
import weakref
from collections.abc import AsyncIterator, Iterator, Mapping
from contextlib import asynccontextmanager, contextmanager
from typing import Any

import httpx
from pydantic import SecretStr

from ..errors import (
    ContextOverflowError,
    InvalidRequestError,
    LlamaCppIntegrationError,
    RequestTimeoutError,
    ServerUnavailableError,
)

__all__ = ["Transport", "error_for_status", "parse_event"]

POOL = httpx.Limits(max_connections=64, max_keepalive_connections=16)


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
) -> LlamaCppIntegrationError:
    """The package's error for an HTTP error status (or an error event in a stream)."""
    message, kind, fields = _error_fields(body)
    if kind == "exceed_context_size_error":
        return ContextOverflowError(
            message,
            n_prompt_tokens=int(fields.get("n_prompt_tokens", 0)),
            n_ctx=int(fields.get("n_ctx", 0)),
            request_id=request_id,
        )
    if status in (401, 403):
        return ServerUnavailableError(
            f"refused the API key ({status}): {message}",
            url=url,
            retryable=False,
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


class Transport:
    """Pooled HTTP clients for one server URL."""

    def __init__(self, url: str, *, api_key: SecretStr | None, timeout: float) -> None:
        self.url = url.rstrip("/")
        self.timeout = timeout
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

    # ---- plain requests ---------------------------------------------------------------------

    def _checked(self, response: httpx.Response, request_id: str | None) -> Any:
        body = _json_or_text(response)
        if response.status_code >= 400:
            raise error_for_status(response.status_code, body, url=self.url, request_id=request_id)
        return body

    def _send(
        self,
        method: str,
        path: str,
        body: Mapping[str, Any] | None,
        timeout: float | None,
        *,
        stream: bool = False,
    ) -> httpx.Response:
        client = self.client()
        for attempt in range(2):
            request = client.build_request(method, path, json=body, timeout=self._timeout(timeout))
            try:
                return client.send(request, stream=stream)
            except httpx.RemoteProtocolError:
                # A pooled connection the server had already closed (it answered nothing):
                # once more, on a fresh connection.
                if attempt:
                    raise
        raise AssertionError("unreachable")

    async def _asend(
        self,
        method: str,
        path: str,
        body: Mapping[str, Any] | None,
        timeout: float | None,
        *,
        stream: bool = False,
    ) -> httpx.Response:
        client = self.aclient()
        for attempt in range(2):
            request = client.build_request(method, path, json=body, timeout=self._timeout(timeout))
            try:
                return await client.send(request, stream=stream)
            except httpx.RemoteProtocolError:
                if attempt:
                    raise
        raise AssertionError("unreachable")

    def get(self, path: str, *, timeout: float | None = None) -> httpx.Response:
        try:
            return self._send("GET", path, None, timeout)
        except httpx.HTTPError as exc:
            raise _unavailable(exc, self.url, delivered=False, request_id=None) from exc

    async def aget(self, path: str, *, timeout: float | None = None) -> httpx.Response:
        try:
            return await self._asend("GET", path, None, timeout)
        except httpx.HTTPError as exc:
            raise _unavailable(exc, self.url, delivered=False, request_id=None) from exc

    def get_json(self, path: str) -> Any:
        return self._checked(self.get(path), None)

    async def aget_json(self, path: str) -> Any:
        return self._checked(await self.aget(path), None)

    def post_json(
        self,
        path: str,
        body: Mapping[str, Any],
        *,
        timeout: float | None = None,
        request_id: str | None = None,
    ) -> Any:
        try:
            response = self._send("POST", path, body, timeout)
        except httpx.HTTPError as exc:
            raise _unavailable(exc, self.url, delivered=False, request_id=request_id) from exc
        return self._checked(response, request_id)

    async def apost_json(
        self,
        path: str,
        body: Mapping[str, Any],
        *,
        timeout: float | None = None,
        request_id: str | None = None,
    ) -> Any:
        try:
            response = await self._asend("POST", path, body, timeout)
        except httpx.HTTPError as exc:
            raise _unavailable(exc, self.url, delivered=False, request_id=request_id) from exc
        return self._checked(response, request_id)

    def tokenize(self, text: str, *, add_special: bool, parse_special: bool) -> list[int]:
        """Token ids of ``text`` by the server's ``/tokenize``."""
        body = {"content": text, "add_special": add_special, "parse_special": parse_special}
        return [int(t) for t in self.post_json("/tokenize", body)["tokens"]]

    async def atokenize(self, text: str, *, add_special: bool, parse_special: bool) -> list[int]:
        """Async ``tokenize``."""
        body = {"content": text, "add_special": add_special, "parse_special": parse_special}
        return [int(t) for t in (await self.apost_json("/tokenize", body))["tokens"]]

    # ---- streams ------------------------------------------------------------------------------

    @contextmanager
    def stream(
        self, path: str, body: Mapping[str, Any], *, timeout: float | None, request_id: str
    ) -> Iterator[httpx.Response]:
        """An open streamed response with a good status; closing it aborts the request."""
        try:
            response = self._send("POST", path, body, timeout, stream=True)
        except httpx.HTTPError as exc:
            raise _unavailable(exc, self.url, delivered=False, request_id=request_id) from exc
        try:
            if response.status_code >= 400:
                response.read()
                raise error_for_status(
                    response.status_code,
                    _json_or_text(response),
                    url=self.url,
                    request_id=request_id,
                )
            yield response
        finally:
            response.close()

    @asynccontextmanager
    async def astream(
        self, path: str, body: Mapping[str, Any], *, timeout: float | None, request_id: str
    ) -> AsyncIterator[httpx.Response]:
        """Async ``stream``."""
        try:
            response = await self._asend("POST", path, body, timeout, stream=True)
        except httpx.HTTPError as exc:
            raise _unavailable(exc, self.url, delivered=False, request_id=request_id) from exc
        try:
            if response.status_code >= 400:
                await response.aread()
                raise error_for_status(
                    response.status_code,
                    _json_or_text(response),
                    url=self.url,
                    request_id=request_id,
                )
            yield response
        finally:
            await response.aclose()

    def stream_error(
        self, exc: httpx.HTTPError, *, delivered: bool, request_id: str
    ) -> LlamaCppIntegrationError:
        """The error for a failure while reading a stream."""
        return _unavailable(exc, self.url, delivered=delivered, request_id=request_id)


def _json_or_text(response: httpx.Response) -> Any:
    try:
        return response.json()
    except ValueError:
        return response.text
