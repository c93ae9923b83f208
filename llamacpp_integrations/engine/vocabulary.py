"""A model's tokenizer without an engine: its vocabulary read from the GGUF file alone.

Frameworks count tokens synchronously and often (LlamaIndex's splitters and prompt packing call
their tokenizer on the event loop), before an engine is loaded or with none at all. Loading
the weights for that takes seconds; the vocabulary alone loads in milliseconds, holds no tensor
memory, and tokenizes exactly as the engine over the same file does, from any thread.

One vocabulary per file is kept while anything uses it. Importing this module loads no native
code: ``engine/native/vocabulary.py`` is imported on the first load.
"""

from __future__ import annotations

import threading
import weakref
from pathlib import Path
from typing import Protocol

from ..models import read_gguf_info, resolve_model_path

__all__ = ["Tokenizer", "open_vocabulary"]


class Tokenizer(Protocol):
    """Anything that tokenizes with a model's tokenizer: an engine, or its vocabulary alone."""

    def tokenize(
        self, text: str, *, add_special: bool = False, parse_special: bool = False
    ) -> list[int]:
        """Token ids of ``text`` (``add_special``: with BOS/EOS as the model adds them;
        ``parse_special``: special-token text read as those tokens)."""
        ...


_LOCK = threading.Lock()  # held through a load: two first users of one file load it once
_VOCABULARIES: weakref.WeakValueDictionary[Path, Tokenizer] = weakref.WeakValueDictionary()


def open_vocabulary(spec: str | None) -> Tokenizer:
    """The tokenizer of the model ``spec`` names (as ``models.resolve_model_path`` reads it:
    a path, a known name, ``hf://...``, ``None`` for ``$LLAMACPP_MODEL``), without its weights.

    Blocking: an ``hf://`` file not in the Hugging Face cache is downloaded first, and the
    vocabulary is read from disk. Call it off the event loop.

    Raises:
        ModelLoadError: the file is missing, cannot be fetched, or is not a usable GGUF.
    """
    path = resolve_model_path(spec)
    with _LOCK:
        vocabulary = _VOCABULARIES.get(path)
        if vocabulary is None:
            read_gguf_info(path)  # refuses a bad file before llama.cpp can abort on it
            from .native.vocabulary import VocabularyModel

            vocabulary = _VOCABULARIES[path] = VocabularyModel(path)
        return vocabulary
