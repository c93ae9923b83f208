"""Token counts for a framework's synchronous calls, never loading weights on the event loop.

LangChain (``get_num_tokens``, ``get_token_ids``, ``get_num_tokens_from_messages``, which
``trim_messages`` calls) and LlamaIndex (``Settings.tokenizer``, ``metadata``) ask for token
counts synchronously, inside async code too, so an answer must not load the weights (seconds),
wait for the engine's worker or download. ``TokenCounter`` answers with the loaded engine (its
vocabulary is read-only, safe from any thread) and, before that, with the model's vocabulary
alone (``engine.vocabulary``), which counts the same.

Reading that vocabulary (and downloading an ``hf://`` file first) is slow work done once,
``OffTheLoop``: at once where no event loop runs, on a thread of its own when started on a
loop's thread. A loop that needs the answer before the thread finishes has to wait (a
synchronous call cannot return without it); it says so in a warning that tells how to have it
ready beforehand.
"""

from __future__ import annotations

import asyncio
import logging
import threading
from collections.abc import Callable
from concurrent.futures import Future
from functools import partial
from typing import Generic, TypeVar

from ..engine import ChatRequest, InferenceEngine
from ..engine.vocabulary import Tokenizer, Vocabulary, open_vocabulary
from .binding import EngineBinding

__all__ = ["OffTheLoop", "TokenCounter", "on_event_loop"]

_T = TypeVar("_T")


def on_event_loop() -> bool:
    """Whether this thread is running an asyncio event loop."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return False
    return True


class OffTheLoop(Generic[_T]):
    """Something slow to make (a vocabulary to read, a file to fetch), made once and never on
    an event loop's thread: where no loop runs, ``start`` makes it at once; on a loop's thread,
    on a thread of its own. A failure is raised to whoever waits for it, and the next ``start``
    tries again (a download that failed once may work later).

    Args:
        make: Makes the thing (blocking).
        what: What is made, for the thread's name and the warning ("the vocabulary of x").
        log: Where a loop's wait is reported.
        advice: How to have it made before the loop needs it, for that warning.
    """

    def __init__(
        self, make: Callable[[], _T], what: str, *, log: logging.Logger, advice: str
    ) -> None:
        self._make = make
        self._what = what
        self._log = log
        self._advice = advice
        self._lock = threading.Lock()
        self._future: Future[_T] | None = None

    def start(self) -> Future[_T]:
        """The making, started if it was not (or failed)."""
        with self._lock:
            future = self._future
            if future is not None and not (future.done() and future.exception() is not None):
                return future
            future = self._future = Future()
        if on_event_loop():
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
        if not future.done() and on_event_loop():
            # A synchronous caller needs the answer now: nothing to do but wait. Only a first
            # count asked for on the loop, or an hf:// file still downloading, gets here.
            self._log.warning("the event loop waits for %s; %s", self._what, self._advice)
        return future.result()


class TokenCounter:
    """One binding's token counts: with its engine once loaded, before that with the model's
    vocabulary alone, read by ``OffTheLoop`` (``start`` begins it, ``tokenize`` and
    ``count_chat`` wait for it if they must).

    Args:
        binding: The adapter's binding; its ``model`` names the vocabulary's file.
        log: Where a loop's wait for the vocabulary is reported.
        advice: How to have the vocabulary ready before the loop counts, for that warning.
    """

    def __init__(self, binding: EngineBinding, *, log: logging.Logger, advice: str) -> None:
        self._binding = binding
        self._vocabulary = OffTheLoop(
            partial(open_vocabulary, binding.model),
            f"the vocabulary of {binding.model}",
            log=log,
            advice=advice,
        )

    def start(self) -> None:
        """Begin reading the vocabulary, unless an engine is loaded (which counts itself)."""
        if self._binding.loaded() is None:
            self._vocabulary.start()

    def _counter(self) -> InferenceEngine | Vocabulary:
        engine = self._binding.loaded()
        return self._vocabulary.result() if engine is None else engine

    def tokenizer(self) -> Tokenizer:
        """What counts now: the loaded engine, else the vocabulary (waited for if unread)."""
        return self._counter()

    def tokenize(self, text: str) -> list[int]:
        """Token ids of ``text`` as content: no BOS, special-token text read as plain text."""
        return self._counter().tokenize(text)

    def count_chat(self, request: ChatRequest) -> int:
        """The prompt tokens of a chat, as the engine counts them (``count_prompt_tokens``).

        Raises:
            ImageInputNotSupportedError: the chat has images and no engine is loaded (the
                projector that counts them loads with it).
        """
        return self._counter().count_prompt_tokens(request)
