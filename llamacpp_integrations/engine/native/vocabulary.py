"""A GGUF file's vocabulary without its weights: llama.cpp's ``vocab_only`` load.

Reading the vocabulary alone takes tens of milliseconds (a few hundred for a 256k-token
vocabulary) and no tensor memory, where loading the weights takes seconds. Tokenizing is
read-only on it: llama.cpp keeps a tokenizer's tables shared and its working state per call, so
``llama_tokenize`` is safe from any number of threads at once (as ``LoadedModel.tokenize``
relies on beside the worker's decodes).
"""

from __future__ import annotations

import weakref
from pathlib import Path

import llama_cpp

from ...errors import ModelLoadError
from .runner import _init_backend, tokenize

__all__ = ["VocabularyModel"]


class VocabularyModel:
    """The tokenizer of one GGUF file, loaded without its weights, usable from any thread.

    Its memory is freed when the object is collected (nothing else holds the native model).
    """

    def __init__(self, path: Path) -> None:
        """Load the vocabulary of ``path``, a file whose header was validated already.

        Raises:
            ModelLoadError: llama.cpp could not read the vocabulary.
        """
        _init_backend()
        params = llama_cpp.llama_model_default_params()
        params.vocab_only = True
        model = llama_cpp.llama_model_load_from_file(str(path).encode("utf-8"), params)
        if not model:
            raise ModelLoadError(str(path), "llama.cpp could not read its vocabulary")
        self.path = path
        self._vocab = llama_cpp.llama_model_get_vocab(model)
        self._finalizer = weakref.finalize(self, llama_cpp.llama_model_free, model)

    def tokenize(
        self, text: str, *, add_special: bool = False, parse_special: bool = False
    ) -> list[int]:
        """Token ids of ``text``, as the engine over the same file tokenizes it."""
        return tokenize(self._vocab, text, add_special=add_special, parse_special=parse_special)
