"""The LlamaIndex LLM's tokenizer and window without a model: ``metadata`` from the GGUF header
(nothing loaded) or from the engine, ``llm.tokenizer`` as ``Settings.tokenizer``, and
LlamaIndex's prompt helper packing text into the window in the model's tokens.

LlamaIndex calls both synchronously on the event loop, so neither may load weights or download
there: before an engine is loaded the tokenizer is the model's vocabulary alone, read (and an
``hf://`` file fetched) at once outside a loop and on another thread on one. A scripted
vocabulary and a scripted engine record the thread of every load."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterator
from dataclasses import dataclass, field, replace
from pathlib import Path
from unittest import mock

import llama_index.core
import pytest
from llama_index.core import Document, MockEmbedding, Settings, VectorStoreIndex
from llama_index.core.indices.prompt_helper import PromptHelper
from llama_index.core.prompts import PromptTemplate
from llama_index.core.utils import get_tokenizer

from llamacpp_integrations.errors import ModelLoadError
from llamacpp_integrations.llama_index import LlamaCpp, ModelTokenizer
from llamacpp_integrations.llama_index import window as window_module
from llamacpp_integrations.llama_index.window import FRAMING_RESERVE
from llamacpp_integrations.models import GGUFInfo, cached_model_info, read_gguf_info
from llamacpp_integrations.testing import SCRIPTED_INFO, ScriptedEngine
from tests.builders.loads import Loads, OpensGate, scripted_loads
from tests.unit.test_models import valid_gguf  # a tiny GGUF: "Tiny Test", trained on 4096


@pytest.fixture
def gguf(tmp_path: Path) -> Path:
    path = tmp_path / "tiny.gguf"
    path.write_bytes(valid_gguf())
    return path


def char_engine(n_ctx_per_seq: int = 300) -> ScriptedEngine:
    """Enough of an engine for sizing: one token per character, and its info."""
    info = replace(SCRIPTED_INFO, path="/models/char.gguf", n_ctx_train=8192, n_vocab=256)
    return ScriptedEngine(info=replace(info, n_ctx_per_seq=n_ctx_per_seq, chat_template=None))


@dataclass
class CharVocabulary:
    """A model's vocabulary as ``engine.vocabulary`` gives one: one token per character."""

    tokenized: list[str] = field(default_factory=list)

    def tokenize(
        self, text: str, *, add_special: bool = False, parse_special: bool = False
    ) -> list[int]:
        assert not add_special and not parse_special
        self.tokenized.append(text)
        return [ord(c) % 256 for c in text]


@dataclass
class WindowLoads(Loads):
    """The vocabulary reads and weight loads (``gate`` holds reads while clear), what they
    give, and how many reads are still to fail."""

    vocabulary: CharVocabulary = field(default_factory=CharVocabulary)
    engine: ScriptedEngine = field(default_factory=ScriptedEngine)
    failures: int = 0


@pytest.fixture
def loads(monkeypatch: pytest.MonkeyPatch) -> WindowLoads:
    """Vocabulary reads and weight loads replaced by recorders (no native code)."""
    loads = WindowLoads()

    def vocabulary(spec: str | None) -> CharVocabulary:
        if loads.failures:
            loads.failures -= 1
            raise ModelLoadError(str(spec), "could not read its vocabulary")
        return loads.vocabulary

    scripted_loads(loads, monkeypatch, vocabulary=vocabulary, engine=loads.engine)
    return loads


@pytest.fixture
def global_tokenizer() -> Iterator[None]:
    """LlamaIndex's global tokenizer is restored after the test."""
    saved = llama_index.core.global_tokenizer
    try:
        yield
    finally:
        llama_index.core.global_tokenizer = saved


# -- metadata ------------------------------------------------------------------------------------


def test_metadata_before_loading_comes_from_the_header(gguf: Path) -> None:
    llm = LlamaCpp(model=str(gguf), max_tokens=64)
    metadata = llm.metadata
    # The header's training context (its KV size is unknown, so nothing to fit to memory),
    # less what the chat template's framing takes
    assert metadata.context_window == 4096 - FRAMING_RESERVE
    assert metadata.num_output == 64
    assert metadata.model_name == "tiny"  # the file's name, not the header's "Tiny Test"
    assert metadata.is_chat_model and metadata.is_function_calling_model
    assert llm.binding.loaded() is None


@pytest.mark.parametrize(
    ("settings", "window"),
    [
        ({"n_ctx_per_seq": 512}, 512),
        ({"engine_kwargs": {"n_ctx_per_seq": 768}}, 768),
        ({"n_ctx_per_seq": 0}, 4096),  # 0: the training context (4096 in the header)
    ],
)
def test_metadata_window_is_the_sequence_context_the_settings_give(
    gguf: Path, settings: dict[str, object], window: int
) -> None:
    llm = LlamaCpp(model=str(gguf), **settings)  # type: ignore[arg-type]
    assert llm.metadata.context_window == window - FRAMING_RESERVE
    assert llm.binding.loaded() is None


def test_header_is_read_once(gguf: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    reads: list[str | None] = []
    real = cached_model_info

    def counting(spec: str | None) -> GGUFInfo | None:
        reads.append(spec)
        return real(spec)

    monkeypatch.setattr(window_module, "cached_model_info", counting)
    llm = LlamaCpp(model=str(gguf))
    assert llm.metadata == llm.metadata
    assert reads == [str(gguf)]


def test_metadata_of_a_loaded_engine_is_its_own() -> None:
    engine = char_engine(n_ctx_per_seq=300)
    llm = LlamaCpp(engine=engine, max_tokens=None)  # type: ignore[arg-type]
    metadata = llm.metadata
    assert metadata.context_window == 300 - FRAMING_RESERVE
    assert metadata.num_output == 256  # no max_tokens: LlamaIndex's default reserve
    assert metadata.model_name == "char"


def test_metadata_of_a_missing_model_raises_its_load_error() -> None:
    with pytest.raises(ModelLoadError, match="not found"):
        _ = LlamaCpp(model="/nonexistent/model.gguf").metadata


# -- the tokenizer -------------------------------------------------------------------------------


def test_getting_the_tokenizer_loads_nothing(gguf: Path) -> None:
    llm = LlamaCpp(model=str(gguf))
    tokenizer = llm.tokenizer
    assert isinstance(tokenizer, ModelTokenizer)
    assert str(gguf) in repr(tokenizer)
    assert llm.binding.loaded() is None


def test_tokenizer_counts_with_the_engine() -> None:
    engine = char_engine()
    tokenizer = LlamaCpp(engine=engine).tokenizer  # type: ignore[arg-type]
    with mock.patch.object(engine, "tokenize", wraps=engine.tokenize) as tokenize:
        assert tokenizer("héllo 123") == [ord(c) % 256 for c in "héllo 123"]
    flags = tokenize.call_args.kwargs
    assert not flags.get("add_special") and not flags.get("parse_special")  # content only
    assert engine.tokenized == ["héllo 123"]


def test_settings_tokenizer_takes_it_as_it_is(global_tokenizer: None) -> None:
    tokenizer = LlamaCpp(engine=char_engine()).tokenizer  # type: ignore[arg-type]
    Settings.tokenizer = tokenizer
    assert Settings.tokenizer is tokenizer
    assert get_tokenizer() is tokenizer  # what LlamaIndex's counters and splitters use


def test_prompt_helper_packs_into_the_window_in_model_tokens(global_tokenizer: None) -> None:
    engine = char_engine(n_ctx_per_seq=300)
    llm = LlamaCpp(engine=engine, max_tokens=50)  # type: ignore[arg-type]
    Settings.tokenizer = llm.tokenizer
    # What response synthesizers build when no prompt helper is set: the metadata's window,
    # and the global tokenizer.
    helper = PromptHelper.from_llm_metadata(llm.metadata)
    prompt = PromptTemplate("Context: {context_str}\nQuestion: {query_str}\nAnswer: ")
    filled = prompt.partial_format(query_str="Which?")
    chunks = ["digits 0123456789 " * 10, "more words here " * 20]
    packed = helper.repack(filled, chunks, llm=llm)
    assert len(packed) > 1  # the text did not fit one prompt, so it was split
    for text in packed:
        # One token per character: the whole prompt, the answer and the framing fit the window.
        assert len(filled.format(context_str=text)) + 50 + FRAMING_RESERVE <= 300
    assert engine.tokenized  # counted by the model's tokenizer, not tiktoken


# -- never on the event loop ---------------------------------------------------------------------


def test_tokenizer_before_loading_is_the_vocabulary_read_at_once(
    gguf: Path, loads: WindowLoads
) -> None:
    llm = LlamaCpp(model=str(gguf))
    tokenizer = llm.tokenizer
    assert loads.done == [("vocabulary", False)]  # made ready when obtained, no loop here
    assert llm.tokenizer is tokenizer  # one per LLM: the vocabulary is read once
    assert tokenizer("héllo 1") == [ord(c) % 256 for c in "héllo 1"]
    assert loads.vocabulary.tokenized == ["héllo 1"]
    assert llm.binding.loaded() is None  # no weights for counting tokens


async def test_tokenizer_made_on_the_loop_reads_the_vocabulary_on_another_thread(
    gguf: Path, loads: WindowLoads
) -> None:
    loads.gate.clear()  # the read cannot finish: obtaining the tokenizer must not wait for it
    llm = LlamaCpp(model=str(gguf))
    tokenizer = llm.tokenizer
    loads.gate.set()
    assert await asyncio.to_thread(tokenizer, "ready") == [ord(c) for c in "ready"]
    assert tokenizer("on the loop") == [ord(c) for c in "on the loop"]
    assert loads.done == [("vocabulary", False)]
    assert llm.binding.loaded() is None


async def test_tokenizer_asked_on_the_loop_before_it_is_ready_waits_and_says_so(
    gguf: Path, loads: WindowLoads
) -> None:
    loads.gate.clear()
    tokenizer = LlamaCpp(model=str(gguf)).tokenizer
    handler = OpensGate(loads.gate)
    logger = logging.getLogger("llamacpp_integrations.llama_index")
    logger.addHandler(handler)
    try:
        assert tokenizer("ab") == [97, 98]  # without the warning the read never finishes
    finally:
        logger.removeHandler(handler)
    assert loads.on_the_loop() == []  # the loop waited; it did not read the vocabulary
    assert handler.messages and "the event loop waits for the vocabulary of" in handler.messages[0]


def test_a_failed_vocabulary_read_is_tried_again(gguf: Path, loads: WindowLoads) -> None:
    loads.failures = 2
    tokenizer = LlamaCpp(model=str(gguf)).tokenizer  # the first read fails, unseen
    with pytest.raises(ModelLoadError, match="could not read its vocabulary"):
        tokenizer("a")  # the second too, and this call raises it
    assert tokenizer("a") == [97]
    assert [what for what, _ in loads.done] == ["vocabulary"] * 3


def test_tokenizer_of_a_missing_model_raises_its_load_error_when_called() -> None:
    tokenizer = LlamaCpp(model="/nonexistent/model.gguf").tokenizer  # nothing raised yet
    with pytest.raises(ModelLoadError, match="not found"):
        tokenizer("a")


async def test_a_loaded_engine_tokenizes_on_the_calling_thread(loads: WindowLoads) -> None:
    engine = char_engine()
    tokenizer = LlamaCpp(engine=engine).tokenizer  # type: ignore[arg-type]
    assert tokenizer("ab") == [97, 98]
    assert engine.tokenized == ["ab"]
    assert loads.done == []  # no vocabulary of its own beside the engine


async def test_aquery_loads_weights_and_vocabulary_off_the_loop(
    gguf: Path, loads: WindowLoads, global_tokenizer: None
) -> None:
    """A whole ``aquery``: retrieval, prompt packing (the tokenizer and ``metadata`` on the
    loop) and the answer (the first call loads the weights)."""
    llm = LlamaCpp(model=str(gguf), max_tokens=16)
    Settings.tokenizer = await asyncio.to_thread(lambda: llm.tokenizer)  # as made before a loop
    documents = [Document(text=f"Ledger {n}: account {n:09d} paid {n * 7}.") for n in range(4)]
    index = VectorStoreIndex.from_documents(documents, embed_model=MockEmbedding(embed_dim=8))
    query_engine = index.as_query_engine(llm=llm, similarity_top_k=4)
    response = await query_engine.aquery("Which account paid the most?")
    assert str(response) == "Hello there"
    assert loads.vocabulary.tokenized  # LlamaIndex counted with the model's vocabulary
    assert loads.on_the_loop() == []
    assert sorted(what for what, _ in loads.done) == ["vocabulary", "weights"]
    await query_engine.aquery("And the least?")
    assert loads.engine.tokenized  # once loaded, the engine counts
    assert len(loads.done) == 2


def test_metadata_of_a_model_not_fetched_fetches_it_without_loading(
    gguf: Path, loads: WindowLoads, monkeypatch: pytest.MonkeyPatch
) -> None:
    _not_on_disk(gguf, loads, monkeypatch)
    llm = LlamaCpp(model="hf://acme/tiny-GGUF/tiny.gguf", n_ctx_per_seq=512)
    assert llm.metadata.context_window == 512 - FRAMING_RESERVE
    assert loads.done == [("fetch", False)]
    assert llm.binding.loaded() is None  # the header was enough: no weights


async def test_metadata_on_the_loop_fetches_the_model_on_another_thread(
    gguf: Path, loads: WindowLoads, monkeypatch: pytest.MonkeyPatch
) -> None:
    _not_on_disk(gguf, loads, monkeypatch)
    loads.gate.clear()  # the fetch finishes once the warning is logged
    llm = LlamaCpp(model="hf://acme/tiny-GGUF/tiny.gguf", n_ctx_per_seq=512)
    handler = OpensGate(loads.gate)
    logger = logging.getLogger("llamacpp_integrations.llama_index")
    logger.addHandler(handler)
    try:
        assert llm.metadata.context_window == 512 - FRAMING_RESERVE
    finally:
        logger.removeHandler(handler)
    assert loads.done == [("fetch", False)]
    assert handler.messages == [
        "the event loop waits for the download of hf://acme/tiny-GGUF/tiny.gguf; obtain "
        "llm.tokenizer and read llm.metadata once before the loop starts to make it ready "
        "beforehand"
    ]
    assert llm.binding.loaded() is None


def _not_on_disk(gguf: Path, loads: WindowLoads, monkeypatch: pytest.MonkeyPatch) -> None:
    """The model's file is not in the cache: reading its header fetches it (recorded)."""

    def load_model_info(spec: str | None, *, download: bool = True) -> GGUFInfo:
        assert download
        loads.record("fetch")
        assert loads.gate.wait(timeout=60)
        return read_gguf_info(gguf)

    monkeypatch.setattr(window_module, "cached_model_info", lambda spec: None)
    monkeypatch.setattr(window_module, "load_model_info", load_model_info)
