"""Sync and async twins decide one way and differ only in their I/O: each pair answers the
same, and what is decided before any I/O (an empty input, a missing query, a bad image source)
is decided before a thread or the engine is reached."""

from __future__ import annotations

import asyncio
from typing import Any

import llama_index.core.instrumentation as instrument
import pytest
from langchain_core.documents import Document
from llama_index.core.instrumentation.event_handlers import BaseEventHandler
from llama_index.core.instrumentation.events import BaseEvent
from llama_index.core.prompts import PromptTemplate
from llama_index.core.schema import NodeWithScore, QueryBundle, TextNode
from pydantic import BaseModel, Field

from llamacpp_integrations.errors import ImageLoadError, InvalidRequestError
from llamacpp_integrations.langchain import LlamaCppEmbeddings, LlamaCppReranker
from llamacpp_integrations.llama_index import LlamaCpp, LlamaCppRerank
from llamacpp_integrations.multimodal import loading
from llamacpp_integrations.testing import ScriptedRerankingEngine

from .tiny_model import INFO, by_length, tiny_engine

DOCS = [Document(page_content=text) for text in ("bb", "a", "ccc")]


async def test_langchain_reranker_twins_rank_alike() -> None:
    engine = ScriptedRerankingEngine(info=INFO, score=by_length)
    reranker = LlamaCppReranker(engine=engine, top_n=2)
    whole = reranker.compress_documents(DOCS, "q")
    awaited = await reranker.acompress_documents(DOCS, "q")
    assert [d.page_content for d in whole] == [d.page_content for d in awaited] == ["ccc", "bb"]
    assert whole[0].metadata["relevance_score"] == 3.0
    assert reranker.compress_documents([], "q") == await reranker.acompress_documents([], "q") == []
    assert len(engine.reranks) == 2  # the empty lists never reached the engine


async def test_llama_index_reranker_twins_rank_alike() -> None:
    engine = ScriptedRerankingEngine(info=INFO, score=by_length)
    reranker = LlamaCppRerank(engine=engine, top_n=2)
    nodes = [NodeWithScore(node=TextNode(text=t.page_content)) for t in DOCS]
    query = QueryBundle("q")
    whole = reranker._postprocess_nodes(nodes, query)
    awaited = await reranker._apostprocess_nodes(nodes, query)
    assert [n.score for n in whole] == [n.score for n in awaited] == [3.0, 2.0]
    assert reranker._postprocess_nodes([], None) == await reranker._apostprocess_nodes([]) == []
    with pytest.raises(InvalidRequestError, match="needs a query"):
        reranker._postprocess_nodes(nodes)
    with pytest.raises(InvalidRequestError, match="needs a query"):
        await reranker._apostprocess_nodes(nodes)
    assert len(engine.reranks) == 2


async def test_langchain_embedding_twins_embed_alike() -> None:
    embeddings = LlamaCppEmbeddings(engine=tiny_engine(), batch_size=1)
    texts = ["a", "bb"]
    assert embeddings.embed_documents(texts, show_progress=True) == (
        await embeddings.aembed_documents(texts, show_progress=True)
    )
    assert embeddings.embed_query("abc") == await embeddings.aembed_query("abc")


class Person(BaseModel):
    name: str


class Events(BaseEventHandler):
    names: list[str] = Field(default_factory=list)

    def handle(self, event: BaseEvent, **kwargs: Any) -> None:
        if "StructuredPredict" in event.class_name():
            self.names.append(event.class_name())


@pytest.fixture
def events() -> Any:
    handler = Events(names=[])
    dispatcher = instrument.get_dispatcher()  # type: ignore[attr-defined]  # re-exported
    dispatcher.add_event_handler(handler)
    try:
        yield handler
    finally:
        dispatcher.event_handlers.remove(handler)


async def test_structured_predict_twins_answer_and_report_alike(events: Events) -> None:
    llm = LlamaCpp(engine=tiny_engine(script=('{"name": ', '"Ada"}')))
    prompt = PromptTemplate("Who? {who}")
    assert llm.structured_predict(Person, prompt, who="x") == Person(name="Ada")
    assert await llm.astructured_predict(Person, prompt, who="x") == Person(name="Ada")
    whole_events = list(events.names)
    events.names.clear()
    streamed = list(llm.stream_structured_predict(Person, prompt, who="x"))
    stream_events = list(events.names)
    events.names.clear()
    awaited = [o async for o in await llm.astream_structured_predict(Person, prompt, who="x")]
    assert streamed[-1] == awaited[-1] == Person(name="Ada")
    assert [type(o).__name__ for o in streamed] == [type(o).__name__ for o in awaited]
    assert events.names == stream_events
    start, progress, end = (
        "LLMStructuredPredictStartEvent",
        "LLMStructuredPredictInProgressEvent",
        "LLMStructuredPredictEndEvent",
    )
    assert whole_events == [start, end, start, end]
    assert stream_events[0] == start and stream_events[-1] == end
    assert set(stream_events[1:-1]) == {progress}


async def test_aload_image_decides_before_taking_a_thread(monkeypatch: pytest.MonkeyPatch) -> None:
    async def no_thread(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("a thread was taken for a source refused up front")

    monkeypatch.setattr(asyncio, "to_thread", no_thread)
    with pytest.raises(ImageLoadError, match="not int") as refused:
        await loading.aload_image(42)  # type: ignore[arg-type]
    assert refused.value.reason == "bad-source"
    with pytest.raises(InvalidRequestError):
        await loading.aload_image(b"\x89PNG", max_side=0)
    with pytest.raises(ImageLoadError, match="not int"):
        loading.load_image(42)  # type: ignore[arg-type]
