"""RAG whose retrieved text is bigger than the engine's sequence, on the real model.

With ``Settings.tokenizer = llm.tokenizer`` LlamaIndex measures the retrieved text in the
model's tokens and packs it into ``metadata.context_window`` (the engine's ``n_ctx_per_seq``,
1024 here so it is cheap): the query is answered from prompts that each fit. Two wrong setups
show the test means something: LlamaIndex's default tokenizer (tiktoken) undercounts this
digit-heavy text, and a window claimed bigger than the engine's packs too much; both end in
``ContextOverflowError`` from the engine.

(1024, not less: LlamaIndex's default ``compact`` mode keeps 500 tokens free beyond
``num_output`` when it packs, so below about 650 tokens it has no room for any context and
raises ``ValueError``. Those 500 tokens also hide tiktoken's undercount there; the modes that pack
to the last token, ``simple_summarize`` and ``tree_summarize``, overflow with it.)
"""

from __future__ import annotations

import random
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import llama_index.core
import pytest
from llama_index.core import Document, Settings, VectorStoreIndex, get_response_synthesizer
from llama_index.core.base.llms.types import LLMMetadata
from llama_index.core.indices.prompt_helper import PromptHelper
from llama_index.core.instrumentation import get_dispatcher
from llama_index.core.instrumentation.event_handlers import BaseEventHandler
from llama_index.core.instrumentation.events import BaseEvent
from llama_index.core.instrumentation.events.llm import LLMChatEndEvent
from llama_index.core.query_engine import RetrieverQueryEngine
from llama_index.core.response_synthesizers import ResponseMode
from pydantic import Field

from llamacpp_integrations.errors import ContextOverflowError
from llamacpp_integrations.llama_index import LlamaCpp, LlamaCppEmbedding
from llamacpp_integrations.llama_index.window import FRAMING_RESERVE

N_CTX = 1024
MAX_TOKENS = 32
TOP_K = 8
QUESTION = "Which account paid the most?"


def _ledger(number: int, rng: random.Random) -> Document:
    # Long digit runs: tiktoken packs three digits in a token, SmolLM2 spends one per digit,
    # so the two tokenizers disagree by far on how long this text is.
    entries = [
        f"Entry {entry}: account {rng.randrange(10**9):09d} paid {rng.randrange(10**6)} "
        f"on {rng.randrange(2010, 2030)}-{rng.randrange(1, 13):02d}-{rng.randrange(1, 29):02d}."
        for entry in range(10)
    ]
    return Document(text=f"Ledger {number}. " + " ".join(entries), id_=f"ledger-{number}")


class PromptSizes(BaseEventHandler):
    """The prompt size of every chat the LLM answers, as the engine counted it."""

    sizes: list[int] = Field(default_factory=list)

    def handle(self, event: BaseEvent, **kwargs: Any) -> None:
        if isinstance(event, LLMChatEndEvent) and event.response is not None:
            self.sizes.append(event.response.additional_kwargs["prompt_tokens"])


@pytest.fixture(scope="module")
def models(smollm_path: Path) -> tuple[LlamaCpp, LlamaCppEmbedding]:
    """An LLM and an embedder on one engine of 1024-token sequences."""
    llm = LlamaCpp(
        model=str(smollm_path), temperature=0.0, max_tokens=MAX_TOKENS, n_ctx_per_seq=N_CTX
    )
    return llm, LlamaCppEmbedding(model=str(smollm_path), n_ctx_per_seq=N_CTX)


@pytest.fixture(scope="module")
def index(models: tuple[LlamaCpp, LlamaCppEmbedding]) -> VectorStoreIndex:
    rng = random.Random(14)
    documents = [_ledger(number, rng) for number in range(TOP_K)]
    # Each ledger is one node whichever tokenizer splits it (well under 1024 tokens).
    return VectorStoreIndex.from_documents(documents, embed_model=models[1])


@pytest.fixture
def settings(models: tuple[LlamaCpp, LlamaCppEmbedding]) -> Iterator[None]:
    """Settings.llm / embed_model are ours and the global tokenizer is restored afterwards."""
    saved = Settings._llm, Settings._embed_model, llama_index.core.global_tokenizer
    Settings.llm, Settings.embed_model = models
    try:
        yield
    finally:
        Settings._llm, Settings._embed_model, llama_index.core.global_tokenizer = saved


@pytest.fixture
def prompt_sizes() -> Iterator[list[int]]:
    dispatcher = get_dispatcher()
    handler = PromptSizes()
    dispatcher.add_event_handler(handler)
    try:
        yield handler.sizes
    finally:
        dispatcher.event_handlers.remove(handler)


def _retrieved_tokens(llm: LlamaCpp, index: VectorStoreIndex) -> int:
    nodes = index.as_retriever(similarity_top_k=TOP_K).retrieve(QUESTION)
    assert len(nodes) == TOP_K
    return sum(len(llm.tokenizer(node.node.get_content())) for node in nodes)


def test_metadata_is_the_engine_window_before_and_after_loading(
    models: tuple[LlamaCpp, LlamaCppEmbedding], smollm_path: Path
) -> None:
    fresh = LlamaCpp(model=str(smollm_path), n_ctx_per_seq=N_CTX, max_tokens=MAX_TOKENS)
    before = fresh.metadata  # from the GGUF header
    assert fresh.binding.loaded() is None
    llm, _ = models
    assert llm.engine.info.n_ctx_per_seq == N_CTX
    after = llm.metadata
    # The same window once an engine reports it; only the placement is new (none before).
    assert before == after.model_copy(update={"placement": None})
    assert before.context_window == N_CTX - FRAMING_RESERVE
    assert before.num_output == MAX_TOKENS
    assert before.placement is None and before.image_inputs is False
    # Where the loaded engine put the model: doctor's facts, from the engine's own placement.
    placement = llm.engine.info.placement
    assert placement is not None and after.placement is not None
    assert after.placement["runs"] == "local" and after.placement["backend"] == "CPU"
    assert after.placement["layers_offloaded"] == placement.layers_offloaded == 0
    assert after.placement["n_layer"] == placement.n_layer == 30  # SmolLM2-135M
    assert after.placement["kv_location"] == "host"
    assert after.placement["kv_bytes"] == placement.kv_bytes and placement.kv_bytes
    assert after.placement["flash_attention"] is placement.flash_attention


def test_tokenizer_is_the_engines(models: tuple[LlamaCpp, LlamaCppEmbedding]) -> None:
    llm, _ = models
    text = "Account 123456789 paid 4242."
    assert llm.tokenizer(text) == llm.engine.tokenize(text)
    assert llm.engine.detokenize(llm.tokenizer(text)) == text


@pytest.mark.parametrize("mode", ["compact", "simple_summarize", "tree_summarize"])
def test_retrieved_text_is_packed_into_the_window(
    models: tuple[LlamaCpp, LlamaCppEmbedding],
    index: VectorStoreIndex,
    settings: None,
    prompt_sizes: list[int],
    mode: str,
) -> None:
    llm, _ = models
    Settings.tokenizer = llm.tokenizer
    assert _retrieved_tokens(llm, index) > 2 * N_CTX  # far more than one prompt holds
    query_engine = index.as_query_engine(llm=llm, similarity_top_k=TOP_K, response_mode=mode)
    response = query_engine.query(QUESTION)
    assert str(response).strip()
    assert len(response.source_nodes) == TOP_K
    assert prompt_sizes and all(size + MAX_TOKENS <= N_CTX for size in prompt_sizes), prompt_sizes
    if mode == "compact":
        assert len(prompt_sizes) >= 3  # packed into several prompts, refined in turn


async def test_retrieved_text_is_packed_into_the_window_async(
    models: tuple[LlamaCpp, LlamaCppEmbedding],
    index: VectorStoreIndex,
    settings: None,
    prompt_sizes: list[int],
) -> None:
    llm, _ = models
    Settings.tokenizer = llm.tokenizer
    query_engine = index.as_query_engine(llm=llm, similarity_top_k=TOP_K, streaming=True)
    response = await query_engine.aquery(QUESTION)
    text = "".join([piece async for piece in response.async_response_gen()])  # type: ignore[union-attr]
    assert text.strip()
    assert all(size + MAX_TOKENS <= N_CTX for size in prompt_sizes), prompt_sizes


@pytest.mark.parametrize("mode", ["simple_summarize", "tree_summarize"])
def test_counted_with_tiktoken_the_prompt_overflows(
    models: tuple[LlamaCpp, LlamaCppEmbedding], index: VectorStoreIndex, settings: None, mode: str
) -> None:
    llm, _ = models
    llama_index.core.global_tokenizer = None  # LlamaIndex's default: tiktoken
    query_engine = index.as_query_engine(llm=llm, similarity_top_k=TOP_K, response_mode=mode)
    with pytest.raises(ContextOverflowError):
        query_engine.query(QUESTION)


def test_a_prompt_helper_of_its_own_sizes_one_query_engine(
    models: tuple[LlamaCpp, LlamaCppEmbedding],
    index: VectorStoreIndex,
    settings: None,
    prompt_sizes: list[int],
) -> None:
    llm, _ = models
    llama_index.core.global_tokenizer = None  # tiktoken everywhere else
    helper = PromptHelper.from_llm_metadata(llm.metadata, tokenizer=llm.tokenizer)
    synthesizer = get_response_synthesizer(
        llm=llm, prompt_helper=helper, response_mode=ResponseMode.SIMPLE_SUMMARIZE
    )
    retriever = index.as_retriever(similarity_top_k=TOP_K)
    response = RetrieverQueryEngine(retriever, response_synthesizer=synthesizer).query(QUESTION)
    assert str(response).strip()
    assert prompt_sizes and all(size + MAX_TOKENS <= N_CTX for size in prompt_sizes), prompt_sizes


class ClaimsABiggerWindow(LlamaCpp):
    """A deliberately wrong setup: metadata claiming four times the engine's window."""

    @property
    def metadata(self) -> LLMMetadata:
        return super().metadata.model_copy(update={"context_window": 4 * N_CTX})


@pytest.fixture
def claiming(smollm_path: Path) -> ClaimsABiggerWindow:
    # The same model and settings as ``models``: the same engine.
    return ClaimsABiggerWindow(
        model=str(smollm_path), temperature=0.0, max_tokens=MAX_TOKENS, n_ctx_per_seq=N_CTX
    )


@pytest.mark.parametrize("mode", ["simple_summarize", "tree_summarize"])
def test_a_window_claimed_bigger_than_the_engines_overflows(
    claiming: ClaimsABiggerWindow, index: VectorStoreIndex, settings: None, mode: str
) -> None:
    Settings.tokenizer = claiming.tokenizer
    query_engine = index.as_query_engine(llm=claiming, similarity_top_k=TOP_K, response_mode=mode)
    with pytest.raises(ContextOverflowError):
        query_engine.query(QUESTION)


def test_compact_mode_swallows_the_overflow(
    claiming: ClaimsABiggerWindow,
    index: VectorStoreIndex,
    settings: None,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """LlamaIndex's refine loop catches ValueError (ContextOverflowError is one) and logs it:
    with a wrong window, a ``compact`` query answers "Empty Response" instead of raising."""
    Settings.tokenizer = claiming.tokenizer
    query_engine = index.as_query_engine(llm=claiming, similarity_top_k=TOP_K)
    assert str(query_engine.query(QUESTION)) == "Empty Response"
    assert "one sequence holds 1024" in caplog.text
