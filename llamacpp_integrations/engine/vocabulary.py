"""A model's tokenizer without an engine: its vocabulary read from the GGUF file alone.

Frameworks count tokens synchronously and often (LlamaIndex's splitters and prompt packing,
LangChain's ``get_num_tokens`` and ``trim_messages`` call them on the event loop), before an
engine is loaded or with none at all. Loading the weights for that takes seconds; the
vocabulary alone loads in milliseconds, holds no tensor memory, and tokenizes exactly as the
engine over the same file does, from any thread. A chat is counted as the engine counts it too:
rendered with the file's template (or the request's) and the same BOS and EOS text, then
tokenized with special tokens.

One vocabulary per file is kept while anything uses it. Importing this module loads no native
code: ``engine/native/vocabulary.py`` is imported on the first load.
"""

from __future__ import annotations

import threading
import weakref
from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

from ..errors import ImageInputNotSupportedError
from ..models import read_gguf_info, resolve_model_path
from ..prompts.chat_rendering import ChatTemplates
from .types import ChatRequest

if TYPE_CHECKING:
    from .native.vocabulary import VocabularyModel

__all__ = ["Tokenizer", "Vocabulary", "open_vocabulary"]


class Tokenizer(Protocol):
    """Anything that tokenizes with a model's tokenizer: an engine, or its vocabulary alone."""

    def tokenize(
        self, text: str, *, add_special: bool = False, parse_special: bool = False
    ) -> list[int]:
        """Token ids of ``text`` (``add_special``: with BOS/EOS as the model adds them;
        ``parse_special``: special-token text read as those tokens)."""
        ...


class Vocabulary:
    """One GGUF file's tokenizer and chat template, without its weights (thread-safe).

    Made by ``open_vocabulary``; counts what an engine over the same file counts, for text.
    """

    def __init__(self, native: VocabularyModel, label: str) -> None:
        self._native = native
        self._label = label

    @property
    def path(self) -> Path:
        """The GGUF file read."""
        return self._native.path

    def tokenize(
        self, text: str, *, add_special: bool = False, parse_special: bool = False
    ) -> list[int]:
        """Token ids of ``text``, as the engine over the same file tokenizes it."""
        return self._native.tokenize(text, add_special=add_special, parse_special=parse_special)

    @cached_property
    def _templates(self) -> ChatTemplates:
        # Compiled on the first count (LlamaIndex only tokenizes): the engine's own
        # Preprocessor builds its templates from the same four things.
        native = self._native
        return ChatTemplates(
            native.chat_template,
            bos_token=native.bos_text,
            eos_token=native.eos_text,
            adds_bos=native.adds_bos,
            owner=f"model {self._label!r}",
        )

    def count_prompt_tokens(self, request: ChatRequest) -> int:
        """The prompt tokens of a chat without images, as ``InferenceEngine.count_prompt_tokens``
        counts them: rendered with its template, tokenized with BOS and special tokens.

        Raises:
            ImageInputNotSupportedError: the chat has images (what an image costs is the
                projector's to say, and it loads with the engine).
            ChatTemplateError: no template, or the template failed.
        """
        if request.has_images():
            raise ImageInputNotSupportedError(
                "counting an image's tokens needs the model's projector, loaded with the engine",
                request_id=request.request_id,
            )
        text, _ = self._templates.render(request)
        return len(self.tokenize(text, add_special=True, parse_special=True))


_LOCK = threading.Lock()  # held through a load: two first users of one file load it once
_VOCABULARIES: weakref.WeakValueDictionary[Path, Vocabulary] = weakref.WeakValueDictionary()


def open_vocabulary(spec: str | None) -> Vocabulary:
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
            header = read_gguf_info(path)  # refuses a bad file before llama.cpp can abort on it
            from .native.vocabulary import VocabularyModel

            label = header.name or path.name  # the engine's name for the model in errors
            vocabulary = _VOCABULARIES[path] = Vocabulary(VocabularyModel(path), label)
        return vocabulary
