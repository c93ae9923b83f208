"""What LlamaIndex sizes prompts with: the model's own tokenizer and its per-sequence window.

LlamaIndex counts tokens with one global tokenizer (``Settings.tokenizer``, tiktoken unless
set) and packs retrieved text to ``LLMMetadata.context_window``. Counted with another model's
tokenizer, text can be more tokens than LlamaIndex thinks (digits, code, other languages), and
a packed prompt then overflows the engine's sequence. ``ModelTokenizer`` counts with the
model's tokenizer; ``WindowReader`` reads the window without loading the model when it can
(the estimate itself is ``client.estimated_window``, which LangChain's profile uses too).

LlamaIndex calls both synchronously, on the event loop too (``aquery`` packs prompts and reads
``metadata`` between its awaits), so neither may load weights, wait for the engine's worker or
download there. A loaded engine tokenizes on the calling thread (its vocabulary is read-only,
safe from any thread); before that the tokenizer is the model's vocabulary alone
(``engine.vocabulary``), made ready when the tokenizer is obtained: at once outside an event
loop, on a thread of its own on one. What has to be fetched first (an ``hf://`` file not in the
cache) is fetched the same way, never by the loop's thread (``client.counting``, which
LangChain's counts share). LlamaIndex's calls cannot answer without these: a loop that asks
before the thread is done (a tokenizer obtained on the loop and called at once, ``metadata``
while the file downloads) waits, and a warning says how to have both ready before it starts.
"""

from __future__ import annotations

import logging
from functools import partial

from ..client import EngineBinding, ModelWindow
from ..client.counting import OffTheLoop, TokenCounter
from ..models import GGUFInfo, cached_model_info, load_model_info

__all__ = ["FRAMING_RESERVE", "ModelTokenizer", "WindowReader", "context_window"]

log = logging.getLogger("llamacpp_integrations.llama_index")

FRAMING_RESERVE = 32
"""Tokens of a sequence left out of ``metadata.context_window`` for the chat template's framing.

LlamaIndex counts a chat prompt as its texts, role names and 3 tokens a message; the template
adds more (BOS, start and end markers, the generation prompt, some a default system text or
dates). Measured on SmolLM2's ChatML template, prompts that LlamaIndex packed to the last token
came out 8 tokens longer than it counted and overflowed by 3; templates with dates in their
system header add about 20 more.
"""

_ADVICE = (
    "obtain llm.tokenizer and read llm.metadata once before the loop starts to make it ready "
    "beforehand"
)


class ModelTokenizer:
    """The model's tokenizer as LlamaIndex takes one: a callable from text to token ids.

    Set it as ``Settings.tokenizer`` (or pass it as the ``tokenizer`` of a ``PromptHelper``,
    ``SentenceSplitter``, ``TokenTextSplitter``...). Texts are tokenized as content, without
    the BOS token or the chat template's framing, and special-token text is read as plain text.

    Calls never load weights or wait for the engine's worker: a loaded engine tokenizes on the
    calling thread; before that, the model's vocabulary alone does (read from the GGUF in
    milliseconds, without the weights). Making the tokenizer makes that vocabulary ready (an
    ``hf://`` file is fetched first): at once outside an event loop, on a thread when made on
    one.
    """

    def __init__(self, binding: EngineBinding) -> None:
        self._binding = binding
        self._counter = TokenCounter(binding, log=log, advice=_ADVICE)
        self._counter.start()

    def __call__(self, text: str) -> list[int]:
        """Token ids of ``text`` with the model's own tokenizer."""
        return self._counter.tokenize(text)

    def __repr__(self) -> str:
        return f"ModelTokenizer(model={self._binding.model!r})"


def context_window(window: ModelWindow) -> int:
    """What LlamaIndex may fill of a window: the sequence less ``FRAMING_RESERVE``."""
    return max(window.n_ctx_per_seq - FRAMING_RESERVE, 1)


class WindowReader:
    """Reads the window of the engine one binding serves, loading nothing.

    A loaded engine reports its own. Before that, the GGUF header and the settings give the
    context the engine would choose now (``client.estimated_window``); that answer is kept, since
    LlamaIndex reads ``metadata`` often and a header read takes tens of milliseconds. A model
    not on disk yet (an ``hf://`` file not in the cache) is fetched for its header, never on
    an event loop's thread (a loop that asks meanwhile waits), and its weights stay unloaded.
    """

    def __init__(self, binding: EngineBinding) -> None:
        self._binding = binding
        self._from_header: ModelWindow | None = None
        self._fetched = OffTheLoop(
            partial(load_model_info, binding.model),
            f"the download of {binding.model}",
            log=log,
            advice=_ADVICE,
        )

    def __call__(self) -> ModelWindow:
        """The window one request of this binding's engine gets."""
        engine = self._binding.loaded()
        if engine is not None:
            return ModelWindow.of(engine.info)
        if self._from_header is None:
            self._from_header = self._binding.window(self._header())
        return self._from_header

    def _header(self) -> GGUFInfo:
        header = cached_model_info(self._binding.model)  # on disk: read here, fetching nothing
        return self._fetched.result() if header is None else header
