"""What only a remote engine has: the adapters' ``base_url``, health, stats, builds, failures.

The other remote tests are the shared ones (``any_engine``, ``any_vision``...) in the other
modules. These run on the same llama-servers, or replay their cassettes
(tests/live/remote_servers.py).
"""

from __future__ import annotations

import pytest
from langchain_core.messages import AIMessage
from llama_index.core.base.llms.types import ChatMessage as IndexMessage
from pydantic import BaseModel

from llamacpp_integrations.engine import ChatMessage, ChatRequest, SamplingParams
from llamacpp_integrations.errors import ServerUnavailableError
from llamacpp_integrations.langchain import ChatLlamaCpp, LlamaCppEmbeddings
from llamacpp_integrations.llama_index import LlamaCpp, LlamaCppEmbedding
from llamacpp_integrations.remote import RemoteEngine, connect
from tests.live.llama_servers import free_port

GREEDY = SamplingParams(temperature=0.0)
pytestmark = [pytest.mark.vcr, pytest.mark.remote]


def _chat(text: str, **kwargs: object) -> ChatRequest:
    return ChatRequest(messages=[ChatMessage(role="user", content=text)], sampling=GREEDY, **kwargs)  # type: ignore[arg-type]


class City(BaseModel):
    name: str
    country: str


def test_langchain_chat_model_over_base_url(remote_urls: tuple[str, str]) -> None:
    generation, _ = remote_urls
    llm = ChatLlamaCpp(base_url=generation, temperature=0.0, max_tokens=24)
    answer = llm.invoke("Name a colour.")
    assert isinstance(answer, AIMessage) and answer.content
    assert answer.usage_metadata is not None and answer.usage_metadata["output_tokens"] > 0
    city = llm.with_structured_output(City).invoke("Paris is a city in France. As JSON:")
    assert isinstance(city, City)
    chunks = list(llm.stream("Say hi."))
    assert chunks and chunks[-1].response_metadata.get("finish_reason") in ("stop", "length")


def test_langchain_tool_call_over_base_url(remote_urls: tuple[str, str]) -> None:
    def get_weather(city: str) -> str:
        """The weather in a city."""
        return "sunny"

    llm = ChatLlamaCpp(base_url=remote_urls[0], temperature=0.0, max_tokens=64)
    answer = llm.bind_tools([get_weather], tool_choice="get_weather").invoke("Weather in Oslo?")
    assert isinstance(answer, AIMessage)
    assert [call["name"] for call in answer.tool_calls] == ["get_weather"]
    assert isinstance(answer.tool_calls[0]["args"].get("city"), str)


def test_langchain_embeddings_over_base_url(remote_urls: tuple[str, str]) -> None:
    generation, embeddings = remote_urls
    embedder = LlamaCppEmbeddings(base_url=generation, embeddings_url=embeddings)
    vectors = embedder.embed_documents(["a cat", "a dog"])
    assert [len(v) for v in vectors] == [576, 576]
    assert len(embedder.embed_query("a bird")) == 576


def test_llama_index_over_base_url(remote_urls: tuple[str, str]) -> None:
    generation, embeddings = remote_urls
    llm = LlamaCpp(base_url=generation, temperature=0.0, max_tokens=16)
    response = llm.chat([IndexMessage(role="user", content="Name a fruit.")])
    assert response.message.content
    assert llm.complete("The sky is").text
    assert llm.metadata.context_window > 0
    embedder = LlamaCppEmbedding(base_url=generation, embeddings_url=embeddings)
    assert len(embedder.get_text_embedding("hello")) == 576


def test_health_info_stats_and_counting(remote_engine: RemoteEngine) -> None:
    assert remote_engine.health()
    info = remote_engine.info
    assert info.n_ctx_per_seq == 1024 and info.n_vocab > 0 and info.supports_images
    assert remote_engine.build_info
    request = _chat("Count to three.", max_tokens=8)
    result = remote_engine.generate(request)
    assert remote_engine.count_prompt_tokens(request) == result.usage.prompt_tokens
    again = remote_engine.generate(request)
    assert again.usage.cached_prompt_tokens > 0  # the server's slot kept the prompt
    stats = remote_engine.stats()
    assert stats.running == 0 and len(stats.slots) == 4 and stats.steps > 0
    assert remote_engine.detokenize(remote_engine.tokenize("Hello world")) == "Hello world"


async def test_async_health(remote_engine: RemoteEngine) -> None:
    assert await remote_engine.ahealth()


def test_an_unknown_build_is_used_by_default(
    remote_urls: tuple[str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("llamacpp_integrations.remote.builds.TESTED_BUILDS", frozenset())
    with RemoteEngine(remote_urls[0]) as engine:
        assert engine.generate(_chat("Hi", max_tokens=2)).usage.completion_tokens > 0


@pytest.mark.usefixtures("live_remote")
def test_no_server_is_a_retryable_unavailable_error() -> None:
    url = f"http://127.0.0.1:{free_port()}"
    engine = connect(url)
    assert isinstance(engine, RemoteEngine) and not engine.health()
    with pytest.raises(ServerUnavailableError) as caught:
        engine.generate(_chat("Hi", max_tokens=2))
    assert caught.value.retryable and caught.value.url == url
    engine.close()
    assert connect([url]).closed is False
