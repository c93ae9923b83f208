"""Dedicated embedding and reranking models on tiny random-weight encoder GGUFs.

The tiny encoders (tests/builders/tiny_encoder.py) are random: these tests check what the engine
and adapters guarantee (one deterministic vector per text, unit length, different texts apart,
prefixes applied, scores deterministic and batch-independent, order following the scores), never
that the vectors or scores mean anything.
"""

from __future__ import annotations

import asyncio
import math
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
from langchain_core.documents import Document
from llama_index.core.schema import NodeWithScore, QueryBundle, TextNode

from llamacpp_integrations.engine import ChatMessage, ChatRequest, Engine
from llamacpp_integrations.errors import ContextOverflowError, InvalidRequestError
from llamacpp_integrations.langchain import LlamaCppEmbeddings, LlamaCppReranker
from llamacpp_integrations.llama_index import LlamaCppEmbedding, LlamaCppRerank
from tests.builders.tiny_encoder import build_tiny_encoder

TEXTS = ["the river is blue", "a cat and a dog", "copper glass", "", "what is the tide"]
DOCS = ["the river runs to the sea", "bread of copper", "a blue sky", "owl", "fish in water"]
N_EMBD = 32


@pytest.fixture(scope="module")
def files(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("encoders")
    return {
        "bert": build_tiny_encoder(root / "tiny-bert.gguf", name="tiny-bert"),
        "nomic": build_tiny_encoder(
            root / "tiny-nomic.gguf", arch="nomic-bert", name="tiny-nomic-embed"
        ),
        "reranker": build_tiny_encoder(
            root / "tiny-reranker.gguf", reranker=True, name="tiny-reranker"
        ),
    }


@pytest.fixture(scope="module")
def bert(files: dict[str, Path]) -> Iterator[Engine]:
    with Engine(model=str(files["bert"])) as engine:
        yield engine


@pytest.fixture(scope="module")
def nomic(files: dict[str, Path]) -> Iterator[Engine]:
    with Engine(model=str(files["nomic"])) as engine:
        yield engine


@pytest.fixture(scope="module")
def reranker(files: dict[str, Path]) -> Iterator[Engine]:
    with Engine(model=str(files["reranker"])) as engine:
        yield engine


def _norm(vector: list[float]) -> float:
    return math.sqrt(math.fsum(x * x for x in vector))


def _close(a: list[float], b: list[float]) -> bool:
    return all(math.isclose(x, y, rel_tol=1e-4, abs_tol=1e-5) for x, y in zip(a, b, strict=True))


# ---- encoders on the engine -------------------------------------------------------------------


@pytest.mark.parametrize("which", ["bert", "nomic"])
def test_encoder_vectors(which: str, request: pytest.FixtureRequest) -> None:
    engine: Engine = request.getfixturevalue(which)
    assert engine.embedding_only
    assert engine.info.chat_template is None  # none needed to embed
    vectors = engine.embed(TEXTS)
    assert len(vectors) == len(TEXTS)
    assert all(len(v) == N_EMBD for v in vectors)
    assert all(math.isclose(_norm(v), 1.0, rel_tol=1e-6) for v in vectors)
    assert all(isinstance(x, float) for x in vectors[0])
    assert vectors == engine.embed(TEXTS)  # deterministic, whatever else shares the decode
    one_by_one = [engine.embed([t])[0] for t in TEXTS]
    assert all(_close(a, b) for a, b in zip(vectors, one_by_one, strict=True))
    distinct = {tuple(round(x, 5) for x in v) for v in vectors}
    assert len(distinct) == len(TEXTS)
    raw = engine.embed(TEXTS[:1], normalize=False)[0]
    assert not math.isclose(_norm(raw), 1.0, rel_tol=1e-3)


def test_encoder_adds_cls_and_sep(bert: Engine) -> None:
    tokens = bert.tokenize("the river", add_special=True)
    assert tokens[0] == 2 and tokens[-1] == 3  # [CLS] ... [SEP] from the GGUF's ids
    assert 1 not in tokens  # no [UNK]


def test_encoder_refuses_generation(bert: Engine) -> None:
    request = ChatRequest(messages=[ChatMessage(role="user", content="hi")], max_tokens=4)
    with pytest.raises(InvalidRequestError, match="does not generate"):
        bert.generate(request)


def test_encoder_texts_stop_at_the_trained_context(bert: Engine) -> None:
    long_text = "the river " * 100  # about 200 tokens; the encoder knows 128 positions
    with pytest.raises(ContextOverflowError, match="text 1 has"):
        bert.embed(["short", long_text])
    vectors = bert.embed(["short", long_text], truncate=True)
    assert len(vectors) == 2 and len(vectors[1]) == N_EMBD


def test_chunk_and_average(bert: Engine) -> None:
    long_text = "the river " * 100
    with pytest.raises(ContextOverflowError):
        LlamaCppEmbeddings(engine=bert).embed_documents([long_text])
    chunked = bert.embed(["short", long_text], chunk=True)
    assert len(chunked) == 2 and math.isclose(_norm(chunked[1]), 1.0, rel_tol=1e-6)
    assert _close(chunked[0], bert.embed(["short"])[0])  # a text that fits is not cut
    assert not _close(chunked[1], bert.embed([long_text], truncate=True)[0])
    via_adapter = LlamaCppEmbeddings(engine=bert, chunk_long_texts=True).embed_documents(
        [long_text]
    )
    assert _close(via_adapter[0], chunked[1])


def test_many_callers_coalesce(bert: Engine) -> None:
    expected = bert.embed(TEXTS)
    results: list[list[list[float]]] = []

    def call() -> None:
        results.append(bert.embed(TEXTS))

    threads = [threading.Thread(target=call) for _ in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(results) == 6
    assert all(all(_close(a, b) for a, b in zip(r, expected, strict=True)) for r in results)


# ---- prefixes and progress through both frameworks ---------------------------------------------


def test_langchain_encoder_and_prefixes(nomic: Engine, bert: Engine) -> None:
    embeddings = LlamaCppEmbeddings(engine=nomic)
    # nomic-bert defines search_query: / search_document:
    query = embeddings.embed_query("blue river")
    assert _close(query, nomic.embed(["search_query: blue river"])[0])
    docs = embeddings.embed_documents(DOCS[:2], show_progress=True)
    assert _close(docs[0], nomic.embed(["search_document: " + DOCS[0]])[0])
    plain = LlamaCppEmbeddings(engine=nomic, model_prefixes=False)
    assert _close(plain.embed_query("blue river"), nomic.embed(["blue river"])[0])
    custom = LlamaCppEmbeddings(engine=nomic, query_prefix="Q: ")
    assert _close(custom.embed_query("blue river"), nomic.embed(["Q: blue river"])[0])
    # an unknown family gets no prefix at all
    unknown = LlamaCppEmbeddings(engine=bert)
    assert _close(unknown.embed_query("blue river"), bert.embed(["blue river"])[0])


def test_langchain_batches_and_async(bert: Engine) -> None:
    texts = [f"note number {i}" for i in range(23)]
    embeddings = LlamaCppEmbeddings(engine=bert, batch_size=5, show_progress=True)
    vectors = embeddings.embed_documents(texts)
    assert len(vectors) == 23
    assert all(_close(a, b) for a, b in zip(vectors, bert.embed(texts), strict=True))
    again = asyncio.run(embeddings.aembed_documents(texts))
    assert all(_close(a, b) for a, b in zip(again, vectors, strict=True))


def test_llama_index_encoder_and_prefixes(nomic: Engine) -> None:
    embed_model = LlamaCppEmbedding(engine=nomic, embed_batch_size=2)
    vectors = embed_model.get_text_embedding_batch(DOCS, show_progress=True)
    assert len(vectors) == len(DOCS)
    assert _close(vectors[1], nomic.embed(["search_document: " + DOCS[1]])[0])
    query = embed_model.get_query_embedding("blue river")
    assert _close(query, nomic.embed(["search_query: blue river"])[0])
    aquery = asyncio.run(embed_model.aget_query_embedding("blue river"))
    assert _close(aquery, query)


# ---- reranking ---------------------------------------------------------------------------------


def test_rerank_scores(reranker: Engine) -> None:
    scores = reranker.rerank("what is the river", DOCS)
    assert len(scores) == len(DOCS) and all(isinstance(s, float) for s in scores)
    assert scores == reranker.rerank("what is the river", DOCS)
    one_by_one = [reranker.rerank("what is the river", [d])[0] for d in DOCS]
    assert _close(scores, one_by_one)
    assert len({round(s, 6) for s in scores}) == len(DOCS)
    assert scores == asyncio.run(reranker.arerank("what is the river", DOCS))


def test_rerank_errors(reranker: Engine, bert: Engine) -> None:
    with pytest.raises(InvalidRequestError, match="cannot rerank"):
        bert.rerank("q", ["d"])
    with pytest.raises(InvalidRequestError, match="empty"):
        reranker.rerank("q", [])
    long_doc = "water " * 200
    with pytest.raises(ContextOverflowError, match="document 1"):
        reranker.rerank("q", ["short", long_doc])
    assert len(reranker.rerank("q", ["short", long_doc], truncate=True)) == 2


def test_langchain_reranker(reranker: Engine) -> None:
    scores = reranker.rerank("blue river", DOCS)
    compressor = LlamaCppReranker(engine=reranker, top_n=3)
    docs = [Document(page_content=d, metadata={"i": i}) for i, d in enumerate(DOCS)]
    kept = compressor.compress_documents(docs, "blue river")
    assert [d.metadata["i"] for d in kept] == sorted(
        range(len(DOCS)), key=lambda i: scores[i], reverse=True
    )[:3]
    got = [d.metadata["relevance_score"] for d in kept]
    assert got == sorted(got, reverse=True)
    again = asyncio.run(compressor.acompress_documents(docs, "blue river"))
    assert [d.page_content for d in again] == [d.page_content for d in kept]
    assert LlamaCppReranker(engine=reranker, top_n=None).compress_documents(docs, "x")
    assert compressor.compress_documents([], "x") == []


def test_llama_index_reranker(reranker: Engine) -> None:
    scores = reranker.rerank("blue river", DOCS)
    post = LlamaCppRerank(engine=reranker, top_n=2)
    nodes = [
        NodeWithScore(node=TextNode(text=d, id_=str(i)), score=0.0) for i, d in enumerate(DOCS)
    ]
    kept = post.postprocess_nodes(nodes, query_str="blue river")
    best = sorted(range(len(DOCS)), key=lambda i: scores[i], reverse=True)[:2]
    assert [n.node.node_id for n in kept] == [str(i) for i in best]
    assert [n.score for n in kept] == [scores[i] for i in best]
    again = asyncio.run(post.apostprocess_nodes(nodes, QueryBundle("blue river")))
    assert [n.node.node_id for n in again] == [n.node.node_id for n in kept]


# ---- the normal RAG setup: a chat model and an embedding model in one process ------------------


def test_chat_and_embedding_model_side_by_side(engine: Engine, bert: Engine) -> None:
    """Two engines over two GGUFs, each with its own weights and worker; used together."""
    answers: list[str] = []

    def chat() -> None:
        request = ChatRequest(messages=[ChatMessage(role="user", content="Say hi.")], max_tokens=8)
        answers.append(engine.generate(request).text)

    thread = threading.Thread(target=chat)
    thread.start()
    vectors = bert.embed(DOCS)
    thread.join()
    assert len(vectors) == len(DOCS) and len(answers) == 1
    assert engine.info.n_embd != bert.info.n_embd
    assert not engine.embedding_only
