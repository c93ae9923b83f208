"""ChatLlamaCpp on the real model, beyond LangChain's standard suites: chains, agents,
concurrency through continuous batching, callbacks, tokens and typed errors."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

import pytest
from langchain.agents import create_agent
from langchain.agents.middleware import ModelRequest, ModelResponse, wrap_model_call
from langchain_core.callbacks import AsyncCallbackHandler, BaseCallbackHandler
from langchain_core.messages import AIMessage, AIMessageChunk, HumanMessage, ToolMessage
from langchain_core.output_parsers import StrOutputParser
from langchain_core.prompts import ChatPromptTemplate
from langchain_core.tools import tool

from llamacpp_integrations.engine import live_engines
from llamacpp_integrations.errors import ImageInputNotSupportedError, UnsupportedContentError
from llamacpp_integrations.langchain import ChatLlamaCpp, LlamaCppEmbeddings

MODEL = "smollm2-135m"


def make_llm(**overrides: Any) -> ChatLlamaCpp:
    return ChatLlamaCpp(**{"model": MODEL, "temperature": 0, "max_tokens": 32, **overrides})


def test_lcel_chain() -> None:
    prompt = ChatPromptTemplate.from_messages(
        [("system", "You are terse."), ("human", "Name one {thing}.")]
    )
    chain = prompt | make_llm() | StrOutputParser()
    answer = chain.invoke({"thing": "river"})
    assert isinstance(answer, str) and answer.strip()


async def test_abatch_runs_in_one_batch() -> None:
    llm = make_llm(max_tokens=48)
    engine = llm._get_engine()
    seen_running: list[int] = []

    async def watch() -> None:
        while True:
            seen_running.append((await asyncio.to_thread(engine.stats)).running)
            await asyncio.sleep(0.02)

    watcher = asyncio.create_task(watch())
    try:
        prompts = [f"Write a sentence about the number {i}." for i in range(8)]
        answers = await llm.abatch(prompts)
    finally:
        watcher.cancel()
    assert len(answers) == 8 and all(isinstance(a, AIMessage) for a in answers)
    assert all(a.usage_metadata and a.usage_metadata["output_tokens"] > 0 for a in answers)
    assert max(seen_running) > 1, "the batch's requests were decoded together"


async def test_concurrent_astreams() -> None:
    llm = make_llm()

    async def one(prompt: str) -> list[AIMessageChunk]:
        return [chunk async for chunk in llm.astream(prompt)]

    streams = await asyncio.gather(*(one(f"Count to {n}.") for n in range(2, 6)))
    for chunks in streams:
        with_usage = [c for c in chunks if c.usage_metadata]
        assert len(with_usage) == 1 and with_usage[0] is chunks[-1]
        assert chunks[-1].chunk_position == "last"
        assert chunks[-1].response_metadata["finish_reason"] in ("stop", "length")
        assert len({c.id for c in chunks}) == 1


class _Tokens(BaseCallbackHandler):
    def __init__(self) -> None:
        self.tokens: list[str] = []

    def on_llm_new_token(self, token: str, **kwargs: Any) -> None:
        self.tokens.append(token)


class _AsyncTokens(AsyncCallbackHandler):
    def __init__(self) -> None:
        self.tokens: list[str] = []

    async def on_llm_new_token(self, token: str, **kwargs: Any) -> None:
        self.tokens.append(token)


def test_callbacks_get_every_delta() -> None:
    handler = _Tokens()
    text = "".join(
        str(chunk.content) for chunk in make_llm().stream("Hi!", config={"callbacks": [handler]})
    )
    assert len(handler.tokens) > 1 and "".join(handler.tokens) == text
    # streaming=True makes invoke stream internally, for token callbacks
    handler = _Tokens()
    message = make_llm(streaming=True).invoke("Hi!", config={"callbacks": [handler]})
    assert len(handler.tokens) > 1 and "".join(handler.tokens) == message.content


async def test_async_callbacks_get_every_delta() -> None:
    handler = _AsyncTokens()
    text = ""
    async for chunk in make_llm().astream("Hi!", config={"callbacks": [handler]}):
        text += str(chunk.content)
    assert len(handler.tokens) > 1 and "".join(handler.tokens) == text


def test_tokens_use_the_models_tokenizer() -> None:
    llm = make_llm()
    engine = llm._get_engine()
    text = "Tokenizers split words into pieces."
    assert llm.get_token_ids(text) == engine.tokenize(text)
    assert llm.get_num_tokens(text) == len(engine.tokenize(text))
    messages = [HumanMessage("Hello there")]
    assert (
        llm.get_num_tokens_from_messages(messages)
        == llm.invoke(messages).usage_metadata["input_tokens"]
    )  # type: ignore[index]


def test_chat_model_and_embeddings_share_the_weights() -> None:
    llm = make_llm()
    llm.invoke("Hi")
    embedder = LlamaCppEmbeddings(model=MODEL)
    before = len(live_engines())
    engine = llm._get_engine()
    assert len(embedder.embed_query("hello")) == engine.info.n_embd
    assert len(live_engines()) == before
    # (Other tests' engines for this file, with other settings such as a projector, may live.)
    assert [e for e in live_engines() if e.config == engine.config] == [engine]


def test_images_and_unknown_blocks_raise_clear_errors() -> None:
    llm = make_llm()
    image = HumanMessage(
        content=[
            {"type": "text", "text": "What is this?"},
            {"type": "image_url", "image_url": {"url": "data:image/png;base64,iVBORw0KGgo="}},
        ]
    )
    with pytest.raises(ImageInputNotSupportedError):
        llm.invoke([image])
    v1_image = HumanMessage(content=[{"type": "image", "base64": "AAAA", "mime_type": "image/png"}])
    with pytest.raises(ImageInputNotSupportedError):
        llm.invoke([v1_image])
    audio = HumanMessage(content=[{"type": "audio", "base64": "AAAA", "mime_type": "audio/wav"}])
    with pytest.raises(UnsupportedContentError):
        llm.invoke([audio])
    assert llm.invoke("Still there?").content


def test_per_call_settings_and_unknown_arguments() -> None:
    llm = make_llm()
    short = llm.invoke("Tell me a long story.", max_tokens=3)
    assert short.usage_metadata is not None and short.usage_metadata["output_tokens"] <= 3
    assert short.response_metadata["finish_reason"] == "length"
    with pytest.raises(TypeError, match="unexpected arguments"):
        llm.invoke("Hi", frobnicate=True)


@tool
def add(a: int, b: int) -> int:
    """Add two integers."""
    return a + b


@tool
def multiply(a: int, b: int) -> int:
    """Multiply two integers."""
    return a * b


def test_agent_runs_two_tool_rounds() -> None:
    """A create_agent loop: two model turns that call tools, then one that answers.

    SmolLM2-135M does not plan a two-step computation by itself; a middleware sets
    tool_choice per turn (any, any, none) — the standard way to steer an agent — so the loop
    structure is deterministic while every call's content still comes from the model.
    """
    turns: list[Any] = []

    @wrap_model_call
    def steer(
        request: ModelRequest[Any], handler: Callable[[ModelRequest[Any]], ModelResponse[Any]]
    ) -> ModelResponse[Any]:
        choice = "any" if len(turns) < 2 else "none"
        turns.append(choice)
        return handler(request.override(tool_choice=choice))

    agent = create_agent(make_llm(max_tokens=96), tools=[add, multiply], middleware=[steer])
    state = agent.invoke({"messages": [HumanMessage("What is (2 + 3) * 4? Use the tools.")]})
    messages = state["messages"]
    tool_results = [m for m in messages if isinstance(m, ToolMessage)]
    calls = [c for m in messages if isinstance(m, AIMessage) for c in m.tool_calls]
    assert turns == ["any", "any", "none"]
    # Under "any" the model may write more calls than max_tokens leaves room for: the one cut
    # short is an invalid call of a message that ended on "length", and the agent answers it
    # with an error result. Every other result is a success.
    cut_ids = {
        c["id"]
        for m in messages
        if isinstance(m, AIMessage) and m.response_metadata.get("finish_reason") == "length"
        for c in m.invalid_tool_calls
    }
    errors = [r for r in tool_results if r.status == "error"]
    assert {r.tool_call_id for r in errors} <= cut_ids
    assert len(tool_results) - len(errors) >= 2
    assert {c["name"] for c in calls} <= {"add", "multiply"}
    assert all(isinstance(c["args"]["a"], int) and isinstance(c["args"]["b"], int) for c in calls)
    final = messages[-1]
    assert isinstance(final, AIMessage) and not final.tool_calls


async def test_agent_runs_async() -> None:
    turns: list[str] = []

    @wrap_model_call
    async def steer(
        request: ModelRequest[Any],
        handler: Callable[[ModelRequest[Any]], Awaitable[ModelResponse[Any]]],
    ) -> ModelResponse[Any]:
        choice = "any" if not turns else "none"
        turns.append(choice)
        return await handler(request.override(tool_choice=choice))

    agent = create_agent(make_llm(max_tokens=96), tools=[add], middleware=[steer])
    state = await agent.ainvoke({"messages": [HumanMessage("Add 2 and 3.")]})
    assert any(isinstance(m, ToolMessage) for m in state["messages"])
    assert isinstance(state["messages"][-1], AIMessage)


def test_logprobs_on_request() -> None:
    llm = make_llm(logprobs=True, top_logprobs=2, max_tokens=8)
    message = llm.invoke("Say hi.")
    entries = message.response_metadata["logprobs"]["content"]
    assert message.usage_metadata is not None
    assert len(entries) == message.usage_metadata["output_tokens"]
    assert all(e["logprob"] <= 0 and len(e["top_logprobs"]) == 2 for e in entries)
    streamed = [
        e
        for chunk in llm.stream("Say hi.")
        for e in chunk.response_metadata.get("logprobs", {}).get("content", [])
    ]
    assert len(streamed) == len(entries)
    assert "logprobs" not in make_llm(max_tokens=4).invoke("Hi").response_metadata


def test_logprobs_while_streaming_tool_calls() -> None:
    llm = make_llm(logprobs=True, top_logprobs=1, max_tokens=64).bind_tools(
        [add], tool_choice="any"
    )
    whole = llm.invoke("Add 2 and 3.")
    assert whole.tool_calls and whole.usage_metadata is not None
    chunks = list(llm.stream("Add 2 and 3."))
    streamed = [
        e
        for chunk in chunks
        for e in chunk.response_metadata.get("logprobs", {}).get("content", [])
    ]
    last = chunks[-1]
    assert last.usage_metadata is not None
    # One entry per generated token, markup and arguments included, as without tools.
    assert len(streamed) == last.usage_metadata["output_tokens"]
    assert len(streamed) == len(whole.response_metadata["logprobs"]["content"])
