"""The LlamaIndex LLM's tokenizer and window without a model: ``metadata`` from the GGUF header
(nothing loaded) or from the engine, ``llm.tokenizer`` as ``Settings.tokenizer``, and
LlamaIndex's prompt helper packing text into the window in the model's tokens."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import llama_index.core
import pytest
from llama_index.core import Settings
from llama_index.core.indices.prompt_helper import PromptHelper
from llama_index.core.prompts import PromptTemplate
from llama_index.core.utils import get_tokenizer

from llamacpp_integrations.engine import ModelInfo
from llamacpp_integrations.errors import ModelLoadError
from llamacpp_integrations.llama_index import LlamaCpp, ModelTokenizer
from llamacpp_integrations.llama_index import window as window_module
from llamacpp_integrations.llama_index.window import FRAMING_RESERVE
from tests.unit.test_models import valid_gguf  # a tiny GGUF: "Tiny Test", trained on 4096


@pytest.fixture
def gguf(tmp_path: Path) -> Path:
    path = tmp_path / "tiny.gguf"
    path.write_bytes(valid_gguf())
    return path


@dataclass
class CharEngine:
    """Enough of an engine for sizing: one token per character, and its info."""

    n_ctx_per_seq: int = 300
    tokenized: list[str] = field(default_factory=list)
    closed: bool = False

    @property
    def info(self) -> ModelInfo:
        return ModelInfo(
            path="/models/char.gguf",
            name=None,
            architecture="llama",
            description="",
            n_ctx_train=8192,
            n_ctx_per_seq=self.n_ctx_per_seq,
            n_embd=8,
            n_vocab=256,
            n_params=0,
            size_bytes=0,
            chat_template=None,
        )

    def tokenize(
        self, text: str, *, add_special: bool = False, parse_special: bool = False
    ) -> list[int]:
        assert not add_special and not parse_special  # content only: no BOS, no framing
        self.tokenized.append(text)
        return [ord(c) % 256 for c in text]

    def detokenize(self, tokens: Sequence[int], *, special: bool = False) -> str:
        return "".join(chr(t) for t in tokens)


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
    real = window_module.load_model_info

    def counting(spec: str | None, *, download: bool = True) -> object:
        reads.append(spec)
        assert download is False  # reading metadata never downloads
        return real(spec, download=download)

    monkeypatch.setattr(window_module, "load_model_info", counting)
    llm = LlamaCpp(model=str(gguf))
    assert llm.metadata == llm.metadata
    assert reads == [str(gguf)]


def test_metadata_of_a_loaded_engine_is_its_own() -> None:
    engine = CharEngine(n_ctx_per_seq=300)
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
    engine = CharEngine()
    tokenizer = LlamaCpp(engine=engine).tokenizer  # type: ignore[arg-type]
    assert tokenizer("héllo 123") == [ord(c) % 256 for c in "héllo 123"]
    assert engine.tokenized == ["héllo 123"]


def test_settings_tokenizer_takes_it_as_it_is(global_tokenizer: None) -> None:
    tokenizer = LlamaCpp(engine=CharEngine()).tokenizer  # type: ignore[arg-type]
    Settings.tokenizer = tokenizer
    assert Settings.tokenizer is tokenizer
    assert get_tokenizer() is tokenizer  # what LlamaIndex's counters and splitters use


def test_prompt_helper_packs_into_the_window_in_model_tokens(global_tokenizer: None) -> None:
    engine = CharEngine(n_ctx_per_seq=300)
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
