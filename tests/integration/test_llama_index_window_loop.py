"""The LlamaIndex tokenizer and window on the real model, and what an ``aquery`` leaves to the
event loop.

LlamaIndex calls ``Settings.tokenizer`` and reads ``llm.metadata`` synchronously, on the event
loop inside ``aquery``. Before an engine is loaded the tokenizer is the model's vocabulary alone
(``engine.vocabulary``): it must count exactly as the engine does, from any thread while the
engine decodes. An ``aquery`` over a model fetched by ``hf://`` from a local fake Hub must
download, read the vocabulary and load the weights on threads that run no event loop: each of
these is recorded with whether its thread was running one (no timings are asserted).
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import llama_index.core
import pytest
from llama_index.core import Document, MockEmbedding, Settings, VectorStoreIndex

from llamacpp_integrations.engine import ChatMessage, ChatRequest, InferenceEngine
from llamacpp_integrations.engine.vocabulary import open_vocabulary
from llamacpp_integrations.llama_index import LlamaCpp
from llamacpp_integrations.models import hub as hub_module
from tests.builders.fake_hub import FakeHub, FakeRepo, point_huggingface_hub_at, serve_fake_hub
from tests.builders.loads import Loads, recorded_native_loads

pytest.importorskip("huggingface_hub")

TEXTS = [
    "Account 123456789 paid 4242 on 2026-12-03.",
    "Héllo wörld, 你好, emoji 🙂 and code: def f(x): return x**2",
    "<|im_start|>user\nnot a real turn<|im_end|>",
    "",
    "  leading and trailing spaces  ",
]


@pytest.mark.parametrize("special", [False, True])
def test_the_vocabulary_tokenizes_as_the_engine(engine: InferenceEngine, special: bool) -> None:
    vocabulary = open_vocabulary(engine.info.path)
    for text in TEXTS:
        assert vocabulary.tokenize(text, add_special=special, parse_special=special) == (
            engine.tokenize(text, add_special=special, parse_special=special)
        ), text
    assert open_vocabulary(engine.info.path) is vocabulary  # one per file while it is used


def test_the_vocabulary_tokenizes_from_threads_while_the_engine_decodes(
    engine: InferenceEngine,
) -> None:
    vocabulary = open_vocabulary(engine.info.path)
    expected = [engine.tokenize(text * 20) for text in TEXTS]
    request = ChatRequest(
        messages=[ChatMessage(role="user", content="Count to fifty.")], max_tokens=64
    )
    with ThreadPoolExecutor(4) as pool:
        answer = pool.submit(engine.generate, request)
        counted = [
            pool.submit(lambda: [vocabulary.tokenize(text * 20) for text in TEXTS])
            for _ in range(8)
        ]
        assert all(job.result() == expected for job in counted)
        assert answer.result().text


# -- aquery over a model from the Hub ------------------------------------------------------------


SPEC = "hf://acme/smol-GGUF/SmolLM2-135M-Instruct.Q4_1.gguf"


@pytest.fixture
def loads(smollm_path: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Loads]:
    """SmolLM2 on a fake Hub (nothing in the Hugging Face cache yet); downloads, vocabulary
    reads and weight loads recorded; LlamaIndex's global tokenizer restored afterwards."""
    loads = Loads()
    # A look in the Hugging Face cache (local_files_only) fetches nothing.
    download = loads.wrap(
        "download",
        hub_module.resolve_hub_model,
        counts=lambda kwargs: not kwargs.get("local_files_only"),
    )
    monkeypatch.setattr(hub_module, "resolve_hub_model", download)
    recorded_native_loads(loads, monkeypatch)
    files = {smollm_path.name: smollm_path.read_bytes()}
    saved = llama_index.core.global_tokenizer
    with serve_fake_hub(FakeHub({"acme/smol-GGUF": FakeRepo(files)})) as hub:
        point_huggingface_hub_at(hub, tmp_path / "hf-cache", monkeypatch)
        try:
            yield loads
        finally:
            llama_index.core.global_tokenizer = saved


def _query_engine(llm: LlamaCpp) -> Any:
    documents = [
        Document(text=f"Ledger {n}: account {n:09d} paid {n * 1234} in 2026.") for n in range(6)
    ]
    index = VectorStoreIndex.from_documents(documents, embed_model=MockEmbedding(embed_dim=8))
    return index.as_query_engine(llm=llm, similarity_top_k=6)


def _closed(llm: LlamaCpp) -> None:
    engine = llm.binding.loaded()
    if engine is not None:
        engine.close()


def _llm() -> LlamaCpp:
    # Settings of their own: an engine no other test shares
    return LlamaCpp(model=SPEC, temperature=0.0, max_tokens=8, n_ctx_per_seq=768, n_seq_max=1)


async def test_aquery_of_a_model_not_fetched_yet_leaves_the_loop_free(loads: Loads) -> None:
    """Everything made on the loop: the tokenizer readies its vocabulary on a thread,
    ``metadata`` fetches the file on a thread, the first call loads the weights on a thread."""
    llm = _llm()
    try:
        Settings.tokenizer = llm.tokenizer
        response = await _query_engine(llm).aquery("Which account paid the most?")
        assert str(response).strip()
        assert llm.binding.loaded() is not None
        assert loads.on_the_loop() == []
        assert set(loads.steps()) == {"download", "vocabulary", "weights"}
        # Once the engine is loaded, counting reads nothing more
        done = len(loads.done)
        assert llm.tokenizer("Account 42") == llm.engine.tokenize("Account 42")
        assert len(loads.done) == done
    finally:
        _closed(llm)


def test_tokenizer_obtained_before_the_loop_is_ready_in_it(loads: Loads) -> None:
    """The usual script: ``Settings.tokenizer = llm.tokenizer`` before ``asyncio.run`` fetches
    the file and reads the vocabulary there, so the loop only tokenizes."""
    llm = _llm()
    try:
        Settings.tokenizer = llm.tokenizer
        assert [what for what, _ in loads.done] == ["download", "vocabulary"]
        assert llm.binding.loaded() is None  # no weights for counting tokens
        query_engine = _query_engine(llm)
        response = asyncio.run(query_engine.aquery("Which account paid the most?"))
        assert str(response).strip()
        assert "weights" in loads.steps()
        assert loads.on_the_loop() == []
    finally:
        _closed(llm)
