"""LlamaCppEmbeddings on the real SmolLM2 135M model: vectors, errors, sharing, retrieval."""

from __future__ import annotations

import math
from collections.abc import Iterator
from pathlib import Path

import pytest
from langchain_core.documents import Document
from langchain_core.vectorstores import InMemoryVectorStore
from pydantic import ValidationError

from llamacpp_integrations.engine import Engine, engine_for, live_engines
from llamacpp_integrations.errors import (
    ContextOverflowError,
    InvalidRequestError,
    ModelLoadError,
)
from llamacpp_integrations.langchain import LlamaCppEmbeddings

MODEL = "smollm2-135m"
N_EMBD = 576

TEXTS = [
    "The Nile flows north through Egypt into the Mediterranean Sea.",
    "Mount Everest is the highest mountain above sea level.",
    "Photosynthesis turns light into chemical energy in plants.",
    "",
    "Ünïcödé and emoji 🚀 are fine too.",
]

DOCS = [
    "Bread is baked in an oven from flour, water and yeast.",
    "The violin has four strings and is played with a bow.",
    "Jupiter is the largest planet in the solar system.",
    "A goalkeeper may handle the ball inside the penalty area.",
    "Python lists keep their items in insertion order.",
    "Glaciers carve deep U-shaped valleys as they move.",
]

# Small engine for the over-long text tests: a 64-token embedding budget, one short sequence.
SHORT = {"embedding_n_ctx": 64, "n_seq_max": 1, "n_ctx_per_seq": 256}
LONG_TEXT = "many words " * 100


def _cosine(a: list[float], b: list[float]) -> float:
    dot = math.fsum(x * y for x, y in zip(a, b, strict=True))
    return dot / math.sqrt(math.fsum(x * x for x in a) * math.fsum(y * y for y in b))


def _norm(vector: list[float]) -> float:
    return math.sqrt(math.fsum(x * x for x in vector))


def _engine_of(embeddings: LlamaCppEmbeddings) -> Engine:
    return embeddings._get_engine()


@pytest.fixture(scope="module")
def embeddings() -> Iterator[LlamaCppEmbeddings]:
    """One instance for the module; it keeps the registry's default smollm engine alive."""
    instance = LlamaCppEmbeddings(model=MODEL)
    yield instance
    del instance


@pytest.fixture(scope="module")
def short_embeddings() -> Iterator[LlamaCppEmbeddings]:
    instance = LlamaCppEmbeddings(model=MODEL, **SHORT)
    yield instance
    del instance


# ---- vectors ----------------------------------------------------------------------------------


def test_one_unit_vector_of_plain_floats_per_text(embeddings: LlamaCppEmbeddings) -> None:
    vectors = embeddings.embed_documents(TEXTS)
    assert len(vectors) == len(TEXTS)
    for vector in vectors:
        assert isinstance(vector, list)
        assert len(vector) == N_EMBD
        assert all(type(x) is float for x in vector)
        assert math.isclose(_norm(vector), 1.0, rel_tol=1e-5)
    query = embeddings.embed_query(TEXTS[0])
    assert len(query) == N_EMBD
    assert all(type(x) is float for x in query)


def test_normalize_false_keeps_the_raw_length(embeddings: LlamaCppEmbeddings) -> None:
    raw_embeddings = LlamaCppEmbeddings(model=MODEL, normalize=False)
    assert _engine_of(raw_embeddings) is _engine_of(embeddings)  # normalize is per call
    raw = raw_embeddings.embed_query(TEXTS[0])
    assert not math.isclose(_norm(raw), 1.0, rel_tol=1e-3)
    assert _cosine(raw, embeddings.embed_query(TEXTS[0])) > 0.9999


def test_batched_documents_equal_one_by_one_queries(embeddings: LlamaCppEmbeddings) -> None:
    batched = embeddings.embed_documents(TEXTS)
    for text, vector in zip(TEXTS, batched, strict=True):
        alone = embeddings.embed_query(text)
        assert _cosine(alone, vector) > 0.999
        assert max(abs(a - b) for a, b in zip(alone, vector, strict=True)) < 1e-2


async def test_async_equals_sync(embeddings: LlamaCppEmbeddings) -> None:
    sync_docs = embeddings.embed_documents(TEXTS)
    async_docs = await embeddings.aembed_documents(TEXTS)
    assert len(async_docs) == len(sync_docs)
    for a, b in zip(async_docs, sync_docs, strict=True):
        assert all(type(x) is float for x in a)
        assert _cosine(a, b) > 0.999
    async_query = await embeddings.aembed_query(TEXTS[1])
    assert _cosine(async_query, embeddings.embed_query(TEXTS[1])) > 0.999


async def test_async_first_use_loads_the_engine() -> None:
    # A fresh instance whose first call is async: the lazy load must work from the event loop.
    fresh = LlamaCppEmbeddings(model=MODEL, embedding_n_seq_max=4)
    vector = await fresh.aembed_query("hello")
    assert len(vector) == N_EMBD
    assert _engine_of(fresh).config.embedding_n_seq_max == 4


# ---- errors -----------------------------------------------------------------------------------


async def test_empty_list_is_an_invalid_request(embeddings: LlamaCppEmbeddings) -> None:
    with pytest.raises(InvalidRequestError, match="empty list"):
        embeddings.embed_documents([])
    with pytest.raises(InvalidRequestError, match="empty list"):
        await embeddings.aembed_documents([])


def test_empty_list_is_refused_before_any_model_is_loaded() -> None:
    # The model does not exist: reaching the loader would raise ModelLoadError instead.
    unloadable = LlamaCppEmbeddings(model="/nonexistent/model.gguf")
    with pytest.raises(InvalidRequestError, match="empty list"):
        unloadable.embed_documents([])


async def test_a_missing_model_fails_on_first_use_not_at_construction() -> None:
    missing = LlamaCppEmbeddings(model="/nonexistent/model.gguf")
    with pytest.raises(ModelLoadError, match="file not found"):
        missing.embed_query("hello")
    with pytest.raises(ModelLoadError, match="file not found"):
        await missing.aembed_query("hello")


async def test_over_long_text_raises_unless_truncating(
    short_embeddings: LlamaCppEmbeddings,
) -> None:
    with pytest.raises(ContextOverflowError, match="truncate=True") as info:
        short_embeddings.embed_documents(["short", LONG_TEXT])
    assert info.value.n_ctx == 64
    assert info.value.n_prompt_tokens > 64
    with pytest.raises(ContextOverflowError):
        short_embeddings.embed_query(LONG_TEXT)
    with pytest.raises(ContextOverflowError):
        await short_embeddings.aembed_query(LONG_TEXT)

    truncating = LlamaCppEmbeddings(model=MODEL, truncate=True, **SHORT)
    assert _engine_of(truncating) is _engine_of(short_embeddings)  # truncate is per call
    vectors = truncating.embed_documents(["short", LONG_TEXT])
    assert [len(v) for v in vectors] == [N_EMBD, N_EMBD]
    assert len(await truncating.aembed_query(LONG_TEXT)) == N_EMBD


async def test_the_engine_keeps_serving_after_errors(
    short_embeddings: LlamaCppEmbeddings,
) -> None:
    expected = short_embeddings.embed_query("still here")
    for _ in range(3):
        with pytest.raises(ContextOverflowError):
            short_embeddings.embed_documents([LONG_TEXT])
        with pytest.raises(InvalidRequestError):
            await short_embeddings.aembed_documents([])
        assert _cosine(short_embeddings.embed_query("still here"), expected) > 0.999
        assert _cosine(await short_embeddings.aembed_query("still here"), expected) > 0.999
    assert not _engine_of(short_embeddings).closed


def test_invalid_settings_are_refused_at_construction() -> None:
    with pytest.raises(ValidationError, match="embedding_n_ctx"):
        LlamaCppEmbeddings(model=MODEL, embedding_n_ctx=4)
    with pytest.raises(ValidationError, match="timeout"):
        LlamaCppEmbeddings(model=MODEL, timeout=0)
    with pytest.raises(ValidationError, match="embedding_pooling"):
        LlamaCppEmbeddings(model=MODEL, embedding_pooling="max")  # type: ignore[arg-type]
    with pytest.raises(ValidationError, match="unknown_setting"):
        LlamaCppEmbeddings(model=MODEL, unknown_setting=1)  # type: ignore[call-arg]


# ---- one copy of the weights --------------------------------------------------------------------


def test_instances_with_the_same_model_share_one_engine(
    embeddings: LlamaCppEmbeddings, smollm_path: Path
) -> None:
    engine = _engine_of(embeddings)
    count = len(live_engines())
    second = LlamaCppEmbeddings(model=MODEL)
    by_path = LlamaCppEmbeddings(model=str(smollm_path))
    # A setting given explicitly but equal to the engine's default names the same configuration.
    explicit_default = LlamaCppEmbeddings(model=MODEL, n_seq_max=engine.config.n_seq_max)
    for other in (second, by_path, explicit_default):
        assert len(other.embed_query("shared")) == N_EMBD
        assert _engine_of(other) is engine
    assert len(live_engines()) == count
    # What a chat model built with engine_for(None, model, {}) serves from.
    assert engine_for(None, MODEL, {}) is engine


def test_model_from_the_environment_shares_the_engine(
    embeddings: LlamaCppEmbeddings, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("LLAMACPP_MODEL", MODEL)
    from_env = LlamaCppEmbeddings()
    assert from_env.model is None
    assert _engine_of(from_env) is _engine_of(embeddings)


def test_different_engine_settings_get_a_different_engine(
    embeddings: LlamaCppEmbeddings, short_embeddings: LlamaCppEmbeddings
) -> None:
    assert _engine_of(short_embeddings) is not _engine_of(embeddings)
    assert _engine_of(short_embeddings).config.embedding_n_ctx == 64


def test_a_given_engine_is_used_as_is(engine: Engine) -> None:
    count = len(live_engines())
    given = LlamaCppEmbeddings(engine=engine)
    assert _engine_of(given) is engine
    for mine, direct in zip(given.embed_documents(TEXTS[:2]), engine.embed(TEXTS[:2]), strict=True):
        assert _cosine(mine, direct) > 0.9999
    assert len(live_engines()) == count
    assert "engine" not in given.model_dump()


def test_a_closed_registry_engine_is_replaced() -> None:
    owned = LlamaCppEmbeddings(model=MODEL, **SHORT, embedding_n_seq_max=2)
    first = _engine_of(owned)
    first.close()
    assert len(owned.embed_query("again")) == N_EMBD
    assert _engine_of(owned) is not first
    assert not _engine_of(owned).closed


# ---- retrieval --------------------------------------------------------------------------------


def _store(embeddings: LlamaCppEmbeddings) -> InMemoryVectorStore:
    store = InMemoryVectorStore(embedding=embeddings)
    store.add_documents([Document(page_content=text) for text in DOCS])
    return store


def test_retriever_returns_k_documents(embeddings: LlamaCppEmbeddings) -> None:
    retriever = _store(embeddings).as_retriever(search_kwargs={"k": 2})
    found = retriever.invoke("Which planet is the biggest?")
    assert len(found) == 2
    assert all(isinstance(doc, Document) for doc in found)
    # The exact text of a document has cosine 1.0 with it, so it must come first.
    assert retriever.invoke(DOCS[4])[0].page_content == DOCS[4]


async def test_async_retriever_returns_k_documents(embeddings: LlamaCppEmbeddings) -> None:
    store = InMemoryVectorStore(embedding=embeddings)
    await store.aadd_documents([Document(page_content=text) for text in DOCS])
    retriever = store.as_retriever(search_kwargs={"k": 2})
    found = await retriever.ainvoke("How do you make bread?")
    assert len(found) == 2
    assert all(isinstance(doc, Document) for doc in found)
    assert (await retriever.ainvoke(DOCS[1]))[0].page_content == DOCS[1]


def test_a_chat_model_over_the_same_model_shares_the_engine(
    embeddings: LlamaCppEmbeddings,
) -> None:
    from llamacpp_integrations.langchain import ChatLlamaCpp

    engine = _engine_of(embeddings)
    count = len(live_engines())
    chat = ChatLlamaCpp(model=MODEL)
    assert chat._get_engine() is engine
    assert len(live_engines()) == count
    # Equal explicit settings on both sides name the same engine too.
    chat_short = ChatLlamaCpp(
        model=MODEL, n_seq_max=SHORT["n_seq_max"], n_ctx_per_seq=SHORT["n_ctx_per_seq"]
    )
    embed_short = LlamaCppEmbeddings(
        model=MODEL, n_seq_max=SHORT["n_seq_max"], n_ctx_per_seq=SHORT["n_ctx_per_seq"]
    )
    assert chat_short._get_engine() is _engine_of(embed_short)
