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
cache) is fetched the same way, never by the loop's thread.
"""

from __future__ import annotations

import asyncio
import logging
import threading
from collections.abc import Callable
from concurrent.futures import Future
from functools import partial
from typing import Generic, TypeVar

from ..client import EngineBinding, ModelWindow
from ..engine.vocabulary import Tokenizer, open_vocabulary
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

_T = TypeVar("_T")


def _on_event_loop() -> bool:
    """Whether this thread is running an asyncio event loop."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return False
    return True


class _OffTheLoop(Generic[_T]):
    """Something slow to make (a vocabulary to read, a file to fetch), made once and never on
    an event loop's thread: where no loop runs, ``start`` makes it at once; on a loop's thread,
    on a thread of its own. A failure is raised to whoever waits for it, and the next ``start``
    tries again (a download that failed once may work later)."""

    def __init__(self, make: Callable[[], _T], what: str) -> None:
        self._make = make
        self._what = what
        self._lock = threading.Lock()
        self._future: Future[_T] | None = None

    def start(self) -> Future[_T]:
        """The making, started if it was not (or failed)."""
        with self._lock:
            future = self._future
            if future is not None and not (future.done() and future.exception() is not None):
                return future
            future = self._future = Future()
        if _on_event_loop():
            name = f"llamacpp-{self._what}"
            threading.Thread(target=self._run, args=(future,), name=name, daemon=True).start()
        else:
            self._run(future)
        return future

    def _run(self, future: Future[_T]) -> None:
        try:
            future.set_result(self._make())
        except Exception as exc:  # handed to the waiters, never lost with the thread
            future.set_exception(exc)
        except BaseException as exc:  # Ctrl-C in a download: the waiters fail, and it goes on
            future.set_exception(exc)
            raise

    def result(self) -> _T:
        """The thing, waiting for it if it is still being made."""
        future = self.start()
        if not future.done() and _on_event_loop():
            # A synchronous caller needs the answer now: nothing to do but wait. Only a
            # tokenizer (or metadata) first asked for on the loop, or an hf:// file still
            # downloading, gets here.
            log.warning(
                "the event loop waits for %s; obtain llm.tokenizer and read llm.metadata once "
                "before the loop starts to make it ready beforehand",
                self._what,
            )
        return future.result()


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
        self._vocabulary = _OffTheLoop(
            partial(open_vocabulary, binding.model), f"the vocabulary of {binding.model}"
        )
        if binding.loaded() is None:
            self._vocabulary.start()

    def __call__(self, text: str) -> list[int]:
        """Token ids of ``text`` with the model's own tokenizer."""
        engine = self._binding.loaded()
        tokenizer: Tokenizer = self._vocabulary.result() if engine is None else engine
        return tokenizer.tokenize(text)

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
        self._fetched = _OffTheLoop(
            partial(load_model_info, binding.model), f"the download of {binding.model}"
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
