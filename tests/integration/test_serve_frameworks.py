"""LangChain's ``ChatOpenAI`` / ``OpenAIEmbeddings`` and LlamaIndex's ``OpenAILike`` /
``OpenAILikeEmbedding``, unchanged, against the server: chat, stream, tools with a named
choice, structured output and embeddings."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from langchain_core.tools import tool
from langchain_openai import ChatOpenAI, OpenAIEmbeddings
from llama_index.core.base.llms.types import ChatMessage
from llama_index.core.prompts import PromptTemplate
from llama_index.core.tools import FunctionTool
from llama_index.embeddings.openai_like import OpenAILikeEmbedding
from llama_index.llms.openai_like import OpenAILike
from pydantic import BaseModel

from llamacpp_integrations.engine.engine import Engine
from tests.integration.serve_helpers import running_server


class Person(BaseModel):
    """A person."""

    name: str
    age: int


def get_weather(city: str) -> str:
    """The weather in a city."""
    return f"Sunny in {city}"


def get_time(zone: str) -> str:
    """The time in a time zone."""
    return f"Noon in {zone}"


@pytest.fixture(scope="module")
def base(engine: Engine) -> Iterator[str]:
    with running_server(engine) as url:
        yield f"{url}/v1"


# ---- LangChain ----------------------------------------------------------------------------


@pytest.fixture(scope="module")
def chat(base: str) -> ChatOpenAI:
    return ChatOpenAI(
        base_url=base, api_key="unused", model="smollm", temperature=0, max_tokens=24, max_retries=0
    )


def test_langchain_invoke_and_stream_agree(chat: ChatOpenAI) -> None:
    whole = chat.invoke("Say hello.")
    assert isinstance(whole.content, str) and whole.content
    assert whole.usage_metadata is not None and whole.usage_metadata["output_tokens"] > 0
    streamed = "".join(str(chunk.content) for chunk in chat.stream("Say hello."))
    assert streamed == whole.content


def test_langchain_named_tool_choice(chat: ChatOpenAI) -> None:
    bound = chat.bind_tools([tool(get_weather), tool(get_time)], tool_choice="get_time")
    answer = bound.invoke("What is the weather in Rome?")
    (call,) = answer.tool_calls
    assert call["name"] == "get_time" and isinstance(call["args"]["zone"], str)
    chunks = list(bound.stream("What is the weather in Rome?"))
    merged = chunks[0]
    for chunk in chunks[1:]:
        merged += chunk
    assert [c["name"] for c in merged.tool_calls] == ["get_time"]  # type: ignore[attr-defined]


def test_langchain_structured_output(chat: ChatOpenAI) -> None:
    structured = chat.bind(max_tokens=64).with_structured_output(Person, method="json_schema")
    person = structured.invoke("Invent a person.")
    assert isinstance(person, Person)


def test_langchain_embeddings(base: str, engine: Engine) -> None:
    embeddings = OpenAIEmbeddings(
        base_url=base, api_key="unused", model="smollm", check_embedding_ctx_length=False
    )
    vectors = embeddings.embed_documents(["a cat", "a dog", "a car"])
    assert len(vectors) == 3 and all(len(v) == engine.info.n_embd for v in vectors)
    assert embeddings.embed_query("a cat") == pytest.approx(vectors[0], abs=1e-5)


# ---- LlamaIndex ---------------------------------------------------------------------------


@pytest.fixture(scope="module")
def llm(base: str, engine: Engine) -> OpenAILike:
    return OpenAILike(
        model="smollm",
        api_base=base,
        api_key="unused",
        is_chat_model=True,
        is_function_calling_model=True,
        context_window=engine.info.n_ctx_per_seq,
        max_tokens=24,
        temperature=0,
        max_retries=0,
    )


def test_llama_index_chat_and_stream_agree(llm: OpenAILike) -> None:
    messages = [ChatMessage(role="user", content="Say hello.")]
    whole = llm.chat(messages)
    assert whole.message.content
    *_, last = llm.stream_chat(messages)
    assert last.message.content == whole.message.content


async def test_llama_index_async_completion(llm: OpenAILike) -> None:
    answer = await llm.acomplete("Once upon a time")
    assert answer.text


def test_llama_index_required_tool(llm: OpenAILike) -> None:
    tools = [FunctionTool.from_defaults(get_weather)]
    llm = llm.model_copy(update={"max_tokens": 96})  # room for the whole call
    response = llm.chat_with_tools(tools, user_msg="Weather in Lima?", tool_required=True)
    (call,) = llm.get_tool_calls_from_response(response)
    assert call.tool_name == "get_weather" and isinstance(call.tool_kwargs["city"], str)


def test_llama_index_structured_predict(llm: OpenAILike) -> None:
    llm = llm.model_copy(update={"max_tokens": 96})
    person = llm.structured_predict(
        Person, PromptTemplate("Invent a person named {name}."), name="Ada"
    )
    assert isinstance(person, Person)


def test_llama_index_embeddings(base: str, engine: Engine) -> None:
    embed = OpenAILikeEmbedding(model_name="smollm", api_base=base, api_key="unused")
    vectors = embed.get_text_embedding_batch(["a cat", "a dog"])
    assert len(vectors) == 2 and len(vectors[0]) == engine.info.n_embd
