"""``RemoteEngine`` streams over a stand-in llama-server (httpx's mock transport): chunks as
the events come, sync and async alike; a stream cut short, broken off or ending in an error
event raises the package's error, retryable only while nothing was delivered; and leaving
early closes the response."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Callable, Iterator
from typing import Any

import httpx
import pytest

from llamacpp_integrations.engine import CompletionRequest, StreamChunk
from llamacpp_integrations.errors import ServerUnavailableError
from llamacpp_integrations.remote import RemoteEngine
from llamacpp_integrations.remote.transport import Transport

URL = "http://server.test"
PROPS = {
    "build_info": "b1-test",
    "model_path": "/models/m.gguf",
    "default_generation_settings": {"n_ctx": 256},
    "total_slots": 1,
}
MODELS = {"data": [{"meta": {"n_vocab": 100, "n_ctx_train": 256, "n_embd": 8}}]}
FINAL = {
    "content": "",
    "tokens": [],
    "stop": True,
    "stop_type": "eos",
    "timings": {"cache_n": 0, "prompt_n": 2, "prompt_ms": 1.0, "predicted_ms": 1.0},
}


def event(body: dict[str, Any], kind: str = "data") -> str:
    return f"{kind}: {json.dumps(body)}"


def text(content: str, token: int) -> str:
    return event({"content": content, "tokens": [token]})


class Body(httpx.SyncByteStream, httpx.AsyncByteStream):
    """A streamed body of lines that may break off with ``error``; records being closed."""

    def __init__(self, lines: list[str], error: Exception | None = None) -> None:
        self.lines = [line.encode() + b"\n\n" for line in lines]
        self.error = error
        self.closed = False

    def __iter__(self) -> Iterator[bytes]:
        yield from self.lines
        if self.error is not None:
            raise self.error

    async def __aiter__(self) -> AsyncIterator[bytes]:
        for line in self:
            yield line

    def close(self) -> None:
        self.closed = True

    async def aclose(self) -> None:
        self.closed = True


class Server:
    """Answers what the engine asks before it streams, then each ``/completion`` with the
    next of ``bodies``."""

    def __init__(self) -> None:
        self.bodies: list[Body] = []

    def __call__(self, request: httpx.Request) -> httpx.Response:
        answers = {"/props": PROPS, "/v1/models": MODELS, "/tokenize": {"tokens": []}}
        path = request.url.path
        if path in answers:
            return httpx.Response(200, json=answers[path])
        assert path == "/completion"
        return httpx.Response(200, stream=self.bodies.pop(0))


@pytest.fixture
def served(monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[RemoteEngine, Server]]:
    server = Server()
    mock = httpx.MockTransport(server)
    client = httpx.Client(base_url=URL, transport=mock)
    aclient = httpx.AsyncClient(base_url=URL, transport=mock)
    monkeypatch.setattr(Transport, "client", lambda self: client)
    monkeypatch.setattr(Transport, "aclient", lambda self: aclient)
    with RemoteEngine(URL) as engine:
        yield engine, server


REQUEST = CompletionRequest(prompt="hi", max_tokens=8)


def both(served: tuple[RemoteEngine, Server], make: Callable[[], Body]) -> list[Any]:
    """The chunks (or error) of ``stream`` and then of ``astream``, each over a body ``make``
    gives."""
    engine, server = served
    server.bodies.extend([make(), make()])
    outcomes: list[Any] = []
    try:
        outcomes.append(list(engine.stream(REQUEST)))
    except ServerUnavailableError as error:
        outcomes.append(error)

    async def run() -> list[StreamChunk]:
        return [chunk async for chunk in engine.astream(REQUEST)]

    try:
        outcomes.append(asyncio.run(run()))
    except ServerUnavailableError as error:
        outcomes.append(error)
    return outcomes


def test_chunks_come_as_the_events_do(served: tuple[RemoteEngine, Server]) -> None:
    for chunks in both(served, lambda: Body([text("Hel", 1), text("lo", 2), event(FINAL)])):
        assert isinstance(chunks, list)
        assert "".join(c.text for c in chunks) == "Hello"
        assert chunks[-1].finish_reason == "stop"
        assert chunks[-1].stop_string is None


def test_the_stop_string_the_server_names_ends_the_answer(
    served: tuple[RemoteEngine, Server],
) -> None:
    final = FINAL | {"stop_type": "word", "stopping_word": "END"}
    for chunks in both(served, lambda: Body([text("a", 1), event(final)])):
        assert isinstance(chunks, list)
        assert (chunks[-1].finish_reason, chunks[-1].stop_string) == ("stop", "END")
    engine, server = served
    server.bodies.append(Body([text("a", 1), event(final)]))
    assert engine.generate(REQUEST).stop_string == "END"


def test_a_stream_cut_short_is_retryable_only_before_its_first_chunk(
    served: tuple[RemoteEngine, Server],
) -> None:
    for error in both(served, lambda: Body([])):
        assert isinstance(error, ServerUnavailableError) and error.retryable
        assert "ended before its last event" in str(error)
    for error in both(served, lambda: Body([text("Hel", 1)])):
        assert isinstance(error, ServerUnavailableError) and not error.retryable


def test_a_broken_off_stream_and_an_error_event_are_server_errors(
    served: tuple[RemoteEngine, Server],
) -> None:
    broken = lambda: Body([text("Hel", 1)], httpx.ReadError("connection reset"))  # noqa: E731
    for error in both(served, broken):
        assert isinstance(error, ServerUnavailableError) and not error.retryable
        assert isinstance(error.__cause__, httpx.ReadError)
    failed = {"error": {"code": 500, "message": "slot died"}}
    for error in both(served, lambda: Body([event(failed, "error")])):
        assert isinstance(error, ServerUnavailableError) and error.retryable
        assert "slot died" in str(error)


def test_leaving_early_closes_the_response(served: tuple[RemoteEngine, Server]) -> None:
    engine, server = served
    sync_body, async_body = (Body([text("a", 1), text("b", 2), event(FINAL)]) for _ in "ab")
    server.bodies.extend([sync_body, async_body])
    chunks = engine.stream(REQUEST)
    assert next(chunks).text == "a"
    chunks.close()
    assert sync_body.closed

    async def first() -> str:
        stream = engine.astream(REQUEST)
        try:
            return (await anext(stream)).text
        finally:
            await stream.aclose()

    assert asyncio.run(first()) == "a"
    assert async_body.closed
