"""A GGUF file's vocabulary without its weights: llama.cpp's ``vocab_only`` load.

Reading the vocabulary alone takes tens of milliseconds (a few hundred for a 256k-token
vocabulary) and no tensor memory, where loading the weights takes seconds. Tokenizing is
read-only on it: llama.cpp keeps a tokenizer's tables shared and its working state per call, so
``llama_tokenize`` is safe from any number of threads at once (as ``LoadedModel.tokenize``
relies on beside the worker's decodes).
"""

from __future__ import annotations

import ctypes
import weakref
from pathlib import Path

import llama_cpp

from ...errors import ModelLoadError
from .weights import init_backend, tokenize

__all__ = ["VocabularyModel"]


def _special_text(vocab: object, token: int) -> str:
    """A token's vocabulary entry as templates print it (``LoadedModel.token_text``): read
    once per file, so a buffer a call is enough."""
    if token < 0:  # LLAMA_TOKEN_NULL: no such token (llama.cpp would abort on it)
        return ""
    size = 256
    while True:
        buf = ctypes.create_string_buffer(size)
        n = llama_cpp.llama_token_to_piece(vocab, token, buf, size, 0, True)
        if n >= 0:
            return buf.raw[:n].decode("utf-8", errors="replace")
        size = -n  # too small: llama.cpp says how long the piece is


class VocabularyModel:
    """The tokenizer of one GGUF file, loaded without its weights, usable from any thread.

    It also holds what rendering a chat for that tokenizer needs, read as ``LoadedModel`` reads
    it: the file's chat template, the text of its BOS and EOS tokens, and whether tokenizing
    adds BOS. Its memory is freed when the object is collected (nothing else holds the native
    model).
    """

    def __init__(self, path: Path) -> None:
        """Load the vocabulary of ``path``, a file whose header was validated already.

        Raises:
            ModelLoadError: llama.cpp could not read the vocabulary.
        """
        init_backend()
        params = llama_cpp.llama_model_default_params()
        params.vocab_only = True
        model = llama_cpp.llama_model_load_from_file(str(path).encode("utf-8"), params)
        if not model:
            raise ModelLoadError(str(path), "llama.cpp could not read its vocabulary")
        self.path = path
        self._finalizer = weakref.finalize(self, llama_cpp.llama_model_free, model)
        vocab = self._vocab = llama_cpp.llama_model_get_vocab(model)
        self.adds_bos: bool = bool(llama_cpp.llama_vocab_get_add_bos(vocab))
        self.bos_text = _special_text(vocab, llama_cpp.llama_vocab_bos(vocab))
        self.eos_text = _special_text(vocab, llama_cpp.llama_vocab_eos(vocab))
        template = llama_cpp.llama_model_chat_template(model, None)
        self.chat_template: str | None = template.decode("utf-8") if template else None

    def tokenize(
        self, text: str, *, add_special: bool = False, parse_special: bool = False
    ) -> list[int]:
        """Token ids of ``text``, as the engine over the same file tokenizes it."""
        return tokenize(self._vocab, text, add_special=add_special, parse_special=parse_special)
