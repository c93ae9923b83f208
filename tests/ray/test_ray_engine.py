"""Chains and agents against a Ray Serve deployment through ``RayEngine``.

One app (a replica of ``EngineService`` over SmolLM2, one CPU) serves the module; the adapters
run over ``RayEngine`` as over a local engine: LangChain's invoke, stream and astream, a named tool
call and a structured answer, LlamaIndex's chat and structured prediction, embeddings equal
to the local engine's, a cancelled stream that frees its sequence on the replica, and the
replica's typed errors arriving as the local engine raises them.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from langchain_core.messages import AIMessageChunk
from pydantic import BaseModel, Field

from llamacpp_integrations.engine import ChatMessage, ChatRequest, shared_engine
from llamacpp_integrations.engine.interface import InferenceEngine
from llamacpp_integrations.errors import ContextOverflowError
from llamacpp_integrations.langchain import ChatLlamaCpp, LlamaCppEmbeddings
from llamacpp_integrations.ray import EngineService, RayEngine

serve = pytest.importorskip("ray.serve")

SETTINGS: dict[str, Any] = {"n_ctx_per_seq": 512, "n_seq_max": 2}
QUESTION = "Name three colours of the rainbow."


@pytest.fixture(scope="module")
def handle(serve_port: int, smollm_path: Path) -> Iterator[Any]:
    """One replica of ``EngineService`` over SmolLM2, deleted after the module."""
    name = f"ray-engine-{uuid.uuid4().hex[:8]}"
    app = serve.deployment(EngineService, num_replicas=1, ray_actor_options={"num_cpus": 1}).bind(
        model=str(smollm_path), **SETTINGS
    )
    try:
        yield serve.run(app, name=name, route_prefix=None)
    finally:
        serve.delete(name)


@pytest.fixture(scope="module")
def engine(handle: Any) -> RayEngine:
    return RayEngine(handle)


@pytest.fixture(scope="module")
def local(smollm_path: Path) -> InferenceEngine:
    """The same model and settings in this process."""
    return shared_engine(model=str(smollm_path), **SETTINGS)


@pytest.fixture(scope="module")
def chat(engine: RayEngine) -> ChatLlamaCpp:
    """One chat model for the module: its template is probed once (each probe a handle call)."""
    return ChatLlamaCpp(engine=engine, temperature=0, max_tokens=64)


def add(a: int, b: int) -> int:
    """Add two integers."""
    return a + b


class Colour(BaseModel):
    """A colour and how it is written in hex."""

    name: str = Field(min_length=1, max_length=20)
    hex_code: str = Field(min_length=1, max_length=8)


def wait_until_idle(engine: RayEngine) -> int:
    """The replica's running requests once none run (a bound on waiting, not a timing check)."""
    deadline = time.monotonic() + 30
    while engine.stats().running and time.monotonic() < deadline:
        time.sleep(0.05)
    return engine.stats().running


def test_engine_describes_the_replicas_model(engine: RayEngine, local: InferenceEngine) -> None:
    assert isinstance(engine, InferenceEngine)
    # The replica decodes on the one CPU Ray reserved for it (num_cpus=1), whatever the node has.
    placement = engine.info.placement
    assert placement is not None and placement.n_threads == 1
    assert local.info.placement is not None
    assert engine.info == replace(local.info, placement=replace(local.info.placement, n_threads=1))
    assert engine.tokenize("Hello") == local.tokenize("Hello")
    assert engine.chunks_long_texts and engine.media_marker is None


async def test_invoke_stream_and_astream_add_up(chat: ChatLlamaCpp) -> None:
    answer = await asyncio.to_thread(chat.invoke, QUESTION, max_tokens=16)
    assert isinstance(answer.content, str) and answer.content.strip()
    chunks = await asyncio.to_thread(lambda: list(chat.stream(QUESTION, max_tokens=16)))
    whole = chunks[0]
    for chunk in chunks[1:]:
        whole += chunk
    assert isinstance(whole, AIMessageChunk)
    assert whole.content == answer.content
    assert whole.usage_metadata and whole.usage_metadata["output_tokens"] > 0
    pieces = [chunk.content async for chunk in chat.astream(QUESTION, max_tokens=16)]
    assert "".join(str(p) for p in pieces) == answer.content


def test_named_tool_call(chat: ChatLlamaCpp) -> None:
    message = chat.bind_tools([add], tool_choice="add").invoke("What is 12 + 30?")
    (call,) = message.tool_calls
    assert call["name"] == "add"
    assert isinstance(call["args"]["a"], int) and isinstance(call["args"]["b"], int)


def test_structured_answer(chat: ChatLlamaCpp) -> None:
    structured = chat.with_structured_output(Colour)
    colour = structured.invoke("Describe the colour red.")
    assert isinstance(colour, Colour)


def test_llama_index_chat_and_structured_prediction(engine: RayEngine) -> None:
    from llama_index.core.base.llms.types import ChatMessage as IndexMessage
    from llama_index.core.prompts import PromptTemplate

    from llamacpp_integrations.llama_index import LlamaCpp

    index_llm = LlamaCpp(engine=engine, temperature=0.0, max_tokens=64)
    reply = index_llm.chat([IndexMessage(role="user", content=QUESTION)], max_tokens=16)
    assert reply.message.content
    colour = index_llm.structured_predict(
        Colour, PromptTemplate("Describe the colour {name}."), name="blue"
    )
    assert isinstance(colour, Colour)


def test_embeddings_equal_the_local_ones(engine: RayEngine, local: InferenceEngine) -> None:
    texts = ["The river runs to the sea.", "A cat sleeps.", "Ray spreads work over machines."]
    remote = LlamaCppEmbeddings(engine=engine).embed_documents(texts)
    here = LlamaCppEmbeddings(engine=local).embed_documents(texts)
    assert len(remote) == len(texts)
    for a, b in zip(remote, here, strict=True):
        assert a == pytest.approx(b, abs=1e-5)


def test_leaving_a_stream_early_frees_its_sequence(engine: RayEngine) -> None:
    request = ChatRequest(
        messages=[ChatMessage(role="user", content="Write a long story about a river.")],
        max_tokens=200,
    )
    stream = engine.stream(request)
    assert next(stream).request_id == request.request_id
    stream.close()
    assert wait_until_idle(engine) == 0


async def test_cancelling_an_async_stream_frees_its_sequence(engine: RayEngine) -> None:
    request = ChatRequest(
        messages=[ChatMessage(role="user", content="Write a long story about a lake.")],
        max_tokens=200,
    )
    started = asyncio.Event()

    async def read() -> None:
        async for _ in engine.astream(request):
            started.set()

    task = asyncio.create_task(read())
    await started.wait()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert await asyncio.to_thread(wait_until_idle, engine) == 0


async def test_the_replicas_typed_error_arrives_as_raised(
    engine: RayEngine, local: InferenceEngine, chat: ChatLlamaCpp
) -> None:
    request = ChatRequest(messages=[ChatMessage(role="user", content="river " * 800)], max_tokens=8)
    with pytest.raises(ContextOverflowError) as here:
        local.generate(request)
    with pytest.raises(ContextOverflowError) as there:
        await asyncio.to_thread(engine.generate, request)
    assert type(there.value) is ContextOverflowError
    assert str(there.value) == str(here.value)
    assert vars(there.value) == vars(here.value)
    with pytest.raises(ContextOverflowError):
        async for _ in engine.astream(request):
            pass
    with pytest.raises(ContextOverflowError):
        await chat.ainvoke("river " * 800, max_tokens=8)
