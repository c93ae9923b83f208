"""``RayEngine`` over a stand-in handle: which replica method each call takes, blocking calls
from inside an event loop, streams cancelled when left, and failures said in our terms."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from typing import Any

import pytest

from llamacpp_integrations import errors
from llamacpp_integrations.engine.types import ChatRequest

pytest.importorskip("ray")

from ray.exceptions import ActorDiedError, RayTaskError

from llamacpp_integrations.ray.engine import RayEngine
from llamacpp_integrations.testing import ScriptedEngine

INFO = ScriptedEngine().info
REQUEST = ChatRequest(messages=[{"role": "user", "content": "Hi"}], request_id="req-1")


def _in_loop() -> bool:
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return False
    return True


class Response:
    """A handle call's response: a value, an error, or (streamed) items where an exception
    item is raised when reached. Blocking reads refuse a thread that runs a loop, as Serve's."""

    def __init__(self, outcome: Any) -> None:
        self.outcome = outcome
        self.items: Iterator[Any] = iter(outcome if isinstance(outcome, list) else ())
        self.cancelled = False

    def result(self) -> Any:
        if _in_loop():
            raise RuntimeError("Sync methods should not be called from within an asyncio loop")
        if isinstance(self.outcome, BaseException):
            raise self.outcome
        return self.outcome

    def __await__(self) -> Any:
        async def read() -> Any:
            if isinstance(self.outcome, BaseException):
                raise self.outcome
            return self.outcome

        return read().__await__()

    def __next__(self) -> Any:
        if _in_loop():
            raise RuntimeError("Sync methods should not be called from within an asyncio loop")
        item = next(self.items)
        if isinstance(item, BaseException):
            raise item
        return item

    async def __anext__(self) -> Any:
        item = next(self.items, StopAsyncIteration())
        if isinstance(item, BaseException):
            raise item
        return item

    def cancel(self) -> None:
        self.cancelled = True


class Handle:
    """A deployment handle whose methods answer from ``answers`` (method name to outcome)."""

    app_name = "app"
    deployment_name = "EngineService"

    def __init__(self, answers: dict[str, Any], method: str | None = None) -> None:
        self.answers = answers
        self.method = method
        self.calls: list[tuple[str | None, tuple[Any, ...], dict[str, Any]]] = []
        self.responses: list[Response] = []

    def options(self, *, method_name: str | None = None, stream: bool = False) -> Handle:
        twin = Handle(self.answers, method_name)
        twin.calls, twin.responses = self.calls, self.responses
        return twin

    def remote(self, *args: Any, **kwargs: Any) -> Response:
        self.calls.append((self.method, args, kwargs))
        response = Response(self.answers[self.method])
        self.responses.append(response)
        return response


def replica_failure(cause: BaseException) -> RayTaskError:
    error = RayTaskError("agenerate", "Traceback ...", cause, proctitle="r", pid=1, ip="10.0.0.1")
    return error.as_instanceof_cause()


def test_calls_take_the_replicas_async_methods_and_info_is_asked_once() -> None:
    handle = Handle({"info": INFO, "agenerate": "done", "aembed": [[1.0]], "tokenize": [1, 2]})
    engine = RayEngine(handle)  # type: ignore[arg-type]
    assert engine.info is engine.info == INFO
    assert engine.generate(REQUEST) == "done"  # type: ignore[comparison-overlap]
    assert engine.embed(("a",), truncate=True) == [[1.0]]
    assert engine.tokenize("ab") == [1, 2]
    names = [name for name, _, _ in handle.calls]
    assert names == ["info", "agenerate", "aembed", "tokenize"]
    assert handle.calls[2][1] == (["a"],) and handle.calls[2][2]["truncate"] is True
    assert repr(engine) == "RayEngine('ray-serve://app/EngineService')"
    engine.close()
    with pytest.raises(errors.EngineClosedError):
        engine.tokenize("ab")


async def test_a_blocking_call_inside_an_event_loop_waits_on_a_helper_thread() -> None:
    engine = RayEngine(Handle({"render_chat": "prompt"}))  # type: ignore[arg-type]
    assert engine.render_chat(REQUEST) == "prompt"


def test_leaving_a_stream_early_cancels_the_call() -> None:
    handle = Handle({"stream": ["a", "b", "c"]})
    stream = RayEngine(handle).stream(REQUEST)  # type: ignore[arg-type]
    assert next(stream) == "a"
    stream.close()
    assert handle.responses[0].cancelled
    whole = Handle({"stream": ["a", "b"]})
    assert list(RayEngine(whole).stream(REQUEST)) == ["a", "b"]  # type: ignore[arg-type]
    assert not whole.responses[0].cancelled


async def test_closing_an_async_stream_cancels_the_call() -> None:
    handle = Handle({"stream": ["a", "b", "c"]})
    stream = RayEngine(handle).astream(REQUEST)  # type: ignore[arg-type]
    assert await stream.__anext__() == "a"
    await stream.aclose()
    assert handle.responses[0].cancelled


def test_the_replicas_typed_error_arrives_as_raised() -> None:
    raised = errors.ContextOverflowError("too long", n_prompt_tokens=900, n_ctx=512)
    engine = RayEngine(Handle({"agenerate": replica_failure(raised)}))  # type: ignore[arg-type]
    with pytest.raises(errors.ContextOverflowError) as caught:
        engine.generate(REQUEST)
    assert caught.value is raised


def test_a_replica_dying_mid_stream_is_unavailable_and_not_retryable() -> None:
    engine = RayEngine(Handle({"stream": ["a", ActorDiedError()]}))  # type: ignore[arg-type]
    stream = engine.stream(REQUEST)
    assert next(stream) == "a"
    with pytest.raises(errors.ServerUnavailableError) as caught:
        next(stream)
    assert not caught.value.retryable and caught.value.request_id == "req-1"
    early = RayEngine(Handle({"stream": [ActorDiedError()]}))  # type: ignore[arg-type]
    with pytest.raises(errors.ServerUnavailableError) as before:
        list(early.stream(REQUEST))
    assert before.value.retryable
