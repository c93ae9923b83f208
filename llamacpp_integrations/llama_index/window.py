"""What LlamaIndex sizes prompts with: the model's own tokenizer and its per-sequence window.

LlamaIndex counts tokens with one global tokenizer (``Settings.tokenizer``, tiktoken unless
set) and packs retrieved text to ``LLMMetadata.context_window``. Counted with another model's
tokenizer, text can be more tokens than LlamaIndex thinks (digits, code, other languages), and
a packed prompt then overflows the engine's sequence. ``ModelTokenizer`` counts with the
model's tokenizer; ``WindowReader`` reads the window without loading the model when it can
(the estimate itself is ``client.estimated_window``, which LangChain's profile uses too).
"""

from __future__ import annotations

from ..client import EngineBinding, ModelWindow
from ..errors import ModelLoadError
from ..models import load_model_info

__all__ = ["FRAMING_RESERVE", "ModelTokenizer", "WindowReader", "context_window"]

FRAMING_RESERVE = 32
"""Tokens of a sequence left out of ``metadata.context_window`` for the chat template's framing.

LlamaIndex counts a chat prompt as its texts, role names and 3 tokens a message; the template
adds more (BOS, start and end markers, the generation prompt, some a default system text or
dates). Measured on SmolLM2's ChatML template, prompts that LlamaIndex packed to the last token
came out 8 tokens longer than it counted and overflowed by 3; templates with dates in their
system header add about 20 more.
"""


class ModelTokenizer:
    """The model's tokenizer as LlamaIndex takes one: a callable from text to token ids.

    Set it as ``Settings.tokenizer`` (or pass it as the ``tokenizer`` of a ``PromptHelper``,
    ``SentenceSplitter``, ``TokenTextSplitter``...). Texts are tokenized as content, without
    the BOS token or the chat template's framing, and special-token text is read as plain text.
    The first call loads the model if nothing has yet.
    """

    def __init__(self, binding: EngineBinding) -> None:
        self._binding = binding

    def __call__(self, text: str) -> list[int]:
        """Token ids of ``text`` with the model's own tokenizer."""
        return self._binding.get().tokenize(text)

    def __repr__(self) -> str:
        return f"ModelTokenizer(model={self._binding.model!r})"


def context_window(window: ModelWindow) -> int:
    """What LlamaIndex may fill of a window: the sequence less ``FRAMING_RESERVE``."""
    return max(window.n_ctx_per_seq - FRAMING_RESERVE, 1)


class WindowReader:
    """Reads the window of the engine one binding serves, loading nothing when it can.

    A loaded engine reports its own. Before that, the GGUF header and the settings give the
    context the engine would choose now (``client.estimated_window``); that answer is kept, since
    LlamaIndex reads ``metadata`` often and a header read takes tens of milliseconds. Only a
    model not on disk yet (an ``hf://`` file not in the cache) is loaded, downloading it, as
    its header is not there to read.
    """

    def __init__(self, binding: EngineBinding) -> None:
        self._binding = binding
        self._from_header: ModelWindow | None = None

    def __call__(self) -> ModelWindow:
        """The window one request of this binding's engine gets."""
        engine = self._binding.loaded()
        if engine is not None:
            return ModelWindow.of(engine.info)
        if self._from_header is None:
            try:
                header = load_model_info(self._binding.model, download=False)
            except ModelLoadError:
                return ModelWindow.of(self._binding.get().info)
            self._from_header = self._binding.window(header)
        return self._from_header
