"""A full queue is retried before the first token, streams included.

The engine here has one sequence and room for one waiting request; a long request holds the
sequence and another fills the queue, so any new request is refused with
``EngineOverloadedError`` until room is made. Room is made at the moment the executor decides
to retry (its retry policy's ``pause``), so what is tested is the decision, not a race.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from langchain_core.messages import HumanMessage
from llama_index.core.base.llms.types import ChatMessage as LIChatMessage

from llamacpp_integrations import client
from llamacpp_integrations.engine import Engine, EngineConfig, RequestHandle
from llamacpp_integrations.errors import EngineOverloadedError
from llamacpp_integrations.langchain import ChatLlamaCpp
from llamacpp_integrations.llama_index import LlamaCpp

from .helpers import chat, wait_for


@pytest.fixture
def saturated(smollm_path: Path) -> Iterator[tuple[Engine, RequestHandle]]:
    """An engine whose one sequence is busy and whose queue (one place) is full; yields the
    engine and the queued request's handle."""
    with Engine(EngineConfig(model=str(smollm_path), n_seq_max=1, max_queued=1)) as engine:
        busy = engine.submit(chat("Tell me a long story.", max_tokens=400, ignore_eos=True))
        wait_for(engine, lambda stats: stats.running == 1)
        queued = engine.submit(chat("Wait your turn.", max_tokens=4))
        with pytest.raises(EngineOverloadedError):
            engine.submit(chat("No room.", max_tokens=4))
        yield engine, queued
        busy.cancel()
        queued.cancel()


@pytest.fixture
def retries(saturated: tuple[Engine, RequestHandle], monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """The attempts after which a retry was decided; the first decision frees the queue."""
    engine, queued = saturated
    decided: list[int] = []
    pause = client.RetryPolicy.pause

    def free_room_then_pause(policy: client.RetryPolicy, attempt: int) -> float | None:
        decided.append(attempt)
        queued.cancel()
        wait_for(engine, lambda stats: stats.waiting == 0)
        return pause(policy, attempt)

    monkeypatch.setattr(client.RetryPolicy, "pause", free_room_then_pause)
    return decided


def test_executor_streams_are_retried(
    saturated: tuple[Engine, RequestHandle], retries: list[int]
) -> None:
    engine, _ = saturated
    plan = client.CallPlan(chat("Say hello.", max_tokens=8))
    pieces = list(client.stream(engine, plan, client.RetryPolicy(max_retries=1)))
    assert retries == [0]
    assert pieces[-1].finish_reason is not None
    assert pieces[-1].usage is not None and pieces[-1].usage.completion_tokens > 0


async def test_executor_async_streams_are_retried(
    saturated: tuple[Engine, RequestHandle], retries: list[int]
) -> None:
    engine, _ = saturated
    plan = client.CallPlan(chat("Say hello.", max_tokens=8))
    pieces = [p async for p in client.astream(engine, plan, client.RetryPolicy(max_retries=1))]
    assert retries == [0]
    assert pieces[-1].finish_reason is not None


def test_langchain_streams_are_retried(
    saturated: tuple[Engine, RequestHandle], retries: list[int]
) -> None:
    llm = ChatLlamaCpp(engine=saturated[0], max_retries=1, max_tokens=4, temperature=0)
    chunks = list(llm.stream([HumanMessage("Hi")]))
    assert retries == [0]
    assert chunks[-1].response_metadata["finish_reason"] is not None


async def test_langchain_async_streams_are_retried(
    saturated: tuple[Engine, RequestHandle], retries: list[int]
) -> None:
    llm = ChatLlamaCpp(engine=saturated[0], max_retries=1, max_tokens=4, temperature=0)
    chunks = [chunk async for chunk in llm.astream([HumanMessage("Hi")])]
    assert retries == [0]
    assert chunks[-1].response_metadata["finish_reason"] is not None


def test_llama_index_streams_are_retried(
    saturated: tuple[Engine, RequestHandle], retries: list[int]
) -> None:
    llm = LlamaCpp(engine=saturated[0], max_retries=1, max_tokens=4, temperature=0)
    responses = list(llm.stream_chat([LIChatMessage(role="user", content="Hi")]))
    assert retries == [0]
    assert responses[-1].raw["finish_reason"] is not None


async def test_llama_index_async_streams_are_retried(
    saturated: tuple[Engine, RequestHandle], retries: list[int]
) -> None:
    llm = LlamaCpp(engine=saturated[0], max_retries=1, max_tokens=4, temperature=0)
    stream = await llm.astream_chat([LIChatMessage(role="user", content="Hi")])
    responses = [response async for response in stream]
    assert retries == [0]
    assert responses[-1].raw["finish_reason"] is not None


async def test_a_queue_that_stays_full_is_reported_after_the_retries(
    saturated: tuple[Engine, RequestHandle],
) -> None:
    engine, _ = saturated
    langchain = ChatLlamaCpp(engine=engine, max_retries=2, max_tokens=4)
    with pytest.raises(EngineOverloadedError):
        list(langchain.stream([HumanMessage("Hi")]))
    llama_index = LlamaCpp(engine=engine, max_retries=1, max_tokens=4)
    stream = await llama_index.astream_chat([LIChatMessage(role="user", content="Hi")])
    with pytest.raises(EngineOverloadedError):
        [response async for response in stream]
    assert not engine.closed
