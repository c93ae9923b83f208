"""``Transport`` without a server (httpx's mock transport): a pooled connection the server had
closed is tried once more, every other failure and refusal becomes the package's error, sync and
async alike, and a stream's response is closed however the caller leaves it."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Callable, Iterator
from typing import Any

import httpx
import pytest

from llamacpp_integrations.errors import (
    ContextOverflowError,
    InvalidRequestError,
    RequestTimeoutError,
    ServerUnavailableError,
)
from llamacpp_integrations.remote.transport import Transport

URL = "http://server.test"
Handler = Callable[[httpx.Request], httpx.Response]


class Server:
    """Answers each request with the next step of a script: a response, or an error raised."""

    def __init__(self, *steps: httpx.Response | Exception) -> None:
        self.steps = list(steps)
        self.requests: list[httpx.Request] = []

    def __call__(self, request: httpx.Request) -> httpx.Response:
        self.requests.append(request)
        step = self.steps.pop(0)
        if isinstance(step, Exception):
            raise step
        return step


def transport_for(server: Server, monkeypatch: pytest.MonkeyPatch) -> Transport:
    transport = Transport(URL, api_key=None, timeout=5.0)
    mock = httpx.MockTransport(server)
    client = httpx.Client(base_url=URL, transport=mock)
    clients: dict[asyncio.AbstractEventLoop, httpx.AsyncClient] = {}

    def aclient() -> httpx.AsyncClient:
        loop = asyncio.get_running_loop()
        return clients.setdefault(loop, httpx.AsyncClient(base_url=URL, transport=mock))

    monkeypatch.setattr(transport, "client", lambda: client)
    monkeypatch.setattr(transport, "aclient", aclient)
    return transport


def tokenize_both(transport: Transport) -> tuple[list[int] | BaseException, ...]:
    """``tokenize`` and then ``atokenize`` of one text: each one's tokens, or its error."""

    def sync() -> list[int] | BaseException:
        try:
            return transport.tokenize("hi", add_special=True, parse_special=False)
        except Exception as error:  # the test looks at which
            return error

    async def run() -> list[int] | BaseException:
        try:
            return await transport.atokenize("hi", add_special=True, parse_special=False)
        except Exception as error:
            return error

    return sync(), asyncio.run(run())


def tokens(*ids: int) -> httpx.Response:
    return httpx.Response(200, json={"tokens": list(ids)})


def stale() -> httpx.RemoteProtocolError:
    return httpx.RemoteProtocolError("Server disconnected without sending a response.")


def test_a_stale_pooled_connection_is_tried_once_more(monkeypatch: pytest.MonkeyPatch) -> None:
    server = Server(stale(), tokens(1, 2), stale(), tokens(1, 2))
    assert tokenize_both(transport_for(server, monkeypatch)) == ([1, 2], [1, 2])
    assert len(server.requests) == 4
    body = json.loads(server.requests[0].content)
    assert list(body.items()) == [
        ("content", "hi"),
        ("add_special", True),
        ("parse_special", False),
    ]


def test_a_connection_closed_twice_is_a_retryable_server_error(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    server = Server(stale(), stale(), stale(), stale())
    for error in tokenize_both(transport_for(server, monkeypatch)):
        assert isinstance(error, ServerUnavailableError)
        assert error.retryable and error.url == URL
        assert isinstance(error.__cause__, httpx.RemoteProtocolError)
    assert len(server.requests) == 4


def test_other_failures_are_not_sent_again(monkeypatch: pytest.MonkeyPatch) -> None:
    refused = httpx.ConnectError("connection refused")
    late = httpx.ReadTimeout("timed out")
    server = Server(refused, refused, late, late)
    transport = transport_for(server, monkeypatch)
    assert [type(e) for e in tokenize_both(transport)] == [ServerUnavailableError] * 2
    assert [type(e) for e in tokenize_both(transport)] == [RequestTimeoutError] * 2
    assert len(server.requests) == 4


def test_refusals_become_typed_errors_carrying_the_request_id(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    overflow = {"error": {"type": "exceed_context_size_error", "message": "too long", "n_ctx": 8}}
    server = Server(
        httpx.Response(400, json=overflow),
        httpx.Response(503, json={"error": {"message": "Loading model"}}),
        httpx.Response(404, text="no such page"),
    )
    transport = transport_for(server, monkeypatch)
    with pytest.raises(ContextOverflowError) as overflowed:
        transport.post_json("/completion", {"prompt": "x"}, request_id="r-1")
    assert overflowed.value.request_id == "r-1" and overflowed.value.n_ctx == 8

    async def loading() -> None:
        await transport.apost_json("/completion", {"prompt": "x"}, request_id="r-2")

    with pytest.raises(ServerUnavailableError, match="503") as unavailable:
        asyncio.run(loading())
    assert unavailable.value.retryable and unavailable.value.request_id == "r-2"
    with pytest.raises(InvalidRequestError, match="no such page"):
        transport.get_json("/nowhere")


class Lines(httpx.SyncByteStream, httpx.AsyncByteStream):
    """A streamed body that records whether it was closed."""

    def __init__(self, *lines: str) -> None:
        self.lines = [line.encode() + b"\n" for line in lines]
        self.closed = False

    def __iter__(self) -> Iterator[bytes]:
        yield from self.lines

    async def __aiter__(self) -> AsyncIterator[bytes]:
        for line in self.lines:
            yield line

    def close(self) -> None:
        self.closed = True

    async def aclose(self) -> None:
        self.closed = True


def test_a_stream_is_closed_when_the_caller_leaves(monkeypatch: pytest.MonkeyPatch) -> None:
    sync_body, async_body = Lines("data: 1", "data: 2"), Lines("data: 1", "data: 2")
    server = Server(httpx.Response(200, stream=sync_body), httpx.Response(200, stream=async_body))
    transport = transport_for(server, monkeypatch)
    with transport.stream("/completion", {}, timeout=None, request_id="r") as response:
        assert next(response.iter_lines()) == "data: 1"
    assert sync_body.closed

    async def read_one() -> str:
        async with transport.astream("/completion", {}, timeout=None, request_id="r") as answer:
            async for line in answer.aiter_lines():
                return line
        raise AssertionError("no line")

    assert asyncio.run(read_one()) == "data: 1"
    assert async_body.closed
    assert all(request.method == "POST" for request in server.requests)


def test_a_refused_stream_raises_its_error_and_is_closed(monkeypatch: pytest.MonkeyPatch) -> None:
    error = json.dumps({"error": {"message": "slots busy"}})
    sync_body, async_body = Lines(error), Lines(error)
    server = Server(httpx.Response(500, stream=sync_body), httpx.Response(500, stream=async_body))
    transport = transport_for(server, monkeypatch)
    with (
        pytest.raises(ServerUnavailableError, match="slots busy"),
        transport.stream("/completion", {}, timeout=None, request_id="r"),
    ):
        raise AssertionError("a refused stream is not entered")
    assert sync_body.closed

    async def enter() -> None:
        async with transport.astream("/completion", {}, timeout=None, request_id="r"):
            raise AssertionError("a refused stream is not entered")

    with pytest.raises(ServerUnavailableError, match="slots busy") as caught:
        asyncio.run(enter())
    assert caught.value.request_id == "r"
    assert async_body.closed


def test_a_request_timeout_only_shortens_the_transports_own(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    server = Server(tokens(), tokens())
    transport = transport_for(server, monkeypatch)
    transport.post_json("/tokenize", {}, timeout=1.0)
    transport.post_json("/tokenize", {}, timeout=60.0)
    reads: list[Any] = [r.extensions["timeout"]["read"] for r in server.requests]
    assert reads == [1.0, 5.0]
