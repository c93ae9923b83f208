"""The embedding side of the worker: how many tokens the next embedding decode may hold, when
it may run while chats wait, and the embedding context it runs on.

Pure policy and bookkeeping: the context comes from a factory the engine core passes, made on
the first embedding decode, so an engine that only chats never allocates one.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Sequence
from functools import partial
from typing import Protocol

import numpy as np
import numpy.typing as npt

from ...errors import LlamaCppIntegrationError
from .job import EmbedJob
from .queue import EmbeddingQueue

Vectors = list[npt.NDArray[np.float32]]

__all__ = [
    "EMBED_TOKENS_ON_CPU",
    "EMBED_TOKENS_WHILE_CHATTING",
    "Embedder",
    "EmbeddingWork",
    "TimeShare",
    "Vectors",
    "embed_budget",
]

# Tokens of one embedding decode while chats run: about a fifth of a second on a small model
# and 2 CPU cores, a few generation steps' worth.
EMBED_TOKENS_WHILE_CHATTING = 64
# Tokens of one embedding decode on the CPU otherwise. On SmolLM2 with 2 threads, 256-token
# decodes indexed mixed-length texts as fast as 512-token ones (286 against 281 tokens/s over
# four interleaved rounds), and a chat that arrives mid-corpus waits half as long for them.
EMBED_TOKENS_ON_CPU = 256


def embed_budget(*, n_ctx: int, n_batch: int, on_cpu: bool, chatting: bool) -> int:
    """Tokens the next embedding decode may hold.

    Packed to at most one micro-batch of tokens (``n_batch``), not the whole context: every
    token attends over all the cells of its decode, so on SmolLM2 512- and 1024-token decodes
    index a corpus 9-13% faster than 2048-token ones. On the CPU, smaller still (no slower, and
    a chat arriving mid-corpus waits less). While chats run, smaller again, so a stream never
    waits long between its tokens. A longer text still goes, alone.
    """
    budget = min(n_ctx, n_batch)
    if on_cpu:
        budget = min(budget, EMBED_TOKENS_ON_CPU)
    if chatting:
        budget = min(budget, EMBED_TOKENS_WHILE_CHATTING)
    return budget


class Embedder(Protocol):
    """What an embedding decode runs on (``EmbeddingContext`` in the engine)."""

    @property
    def n_seq_max(self) -> int: ...

    def embed(self, token_lists: Sequence[Sequence[int]]) -> Vectors: ...

    def close(self) -> None: ...


def _embed(embedder: Embedder, token_lists: list[Sequence[int]]) -> Vectors:
    return embedder.embed(token_lists)


class EmbeddingWork:
    """The embedding jobs of one engine and the decodes that serve them, on the worker thread.

    ``run`` runs one decode of ``token_lists`` on the embedder (the engine core's runs it
    under the stall watch: ``worker/decode_threads.py``)."""

    def __init__(
        self,
        make_embedder: Callable[[], Embedder],
        *,
        n_ctx: int,
        n_batch: int,
        on_cpu: bool,
        run: Callable[[Embedder, list[Sequence[int]]], Vectors] = _embed,
    ) -> None:
        self.queue = EmbeddingQueue()
        self._make_embedder = make_embedder
        self._run = run
        self._embedder: Embedder | None = None
        self._n_ctx = n_ctx
        self._n_batch = n_batch
        self._on_cpu = on_cpu
        self._share = TimeShare()

    def __bool__(self) -> bool:
        return bool(self.queue)

    @property
    def embedder(self) -> Embedder | None:
        """The embedding context, once the first batch made it."""
        return self._embedder

    def add(self, jobs: Iterable[EmbedJob]) -> None:
        self.queue.add(jobs)

    def chat_stepped(self, seconds: float) -> None:
        """Count a generation step's time toward the chats' share."""
        self._share.chat(seconds)

    def step(self, *, chatting: bool) -> None:
        """Run one embedding decode if there are texts and the time share allows it."""
        if self.queue:
            budget = embed_budget(
                n_ctx=self._n_ctx, n_batch=self._n_batch, on_cpu=self._on_cpu, chatting=chatting
            )
            if self._share.embedding_may_run(chatting, self.queue.next_decode_tokens(budget)):
                embedder = self._embedder or self._open()
                start = time.perf_counter()
                tokens = self.queue.step(
                    partial(self._run, embedder), max_tokens=budget, max_texts=embedder.n_seq_max
                )
                self._share.embedded(time.perf_counter() - start, tokens)
        if not (chatting and self.queue):
            self._share.reset()  # credit only counts while both kinds of work wait

    def cancel(self, request_id: str, error: LlamaCppIntegrationError) -> bool:
        return self.queue.cancel(request_id, error)

    def expire(self, now: float) -> None:
        self.queue.expire(now)

    def close(self, make_error: Callable[[], LlamaCppIntegrationError]) -> None:
        """Fail every job still waiting and free the context."""
        self.queue.fail_all(make_error)
        if self._embedder is not None:
            self._embedder.close()
            self._embedder = None

    def _open(self) -> Embedder:
        self._embedder = self._make_embedder()
        return self._embedder


class TimeShare:
    """Gives embedding decodes at most a share of the worker's time while chats wait too.

    An embedding decode takes far longer than one generation step, so alternating one of each
    would leave chats a small fraction of the time. Instead an embedding decode runs only if,
    counting what it is expected to take, embedding stays within ``embedding_share`` of the time
    spent since both started waiting (a third by default): streams keep about two thirds of
    their speed, and the corpus goes on in the remaining third. Counting the decode before it
    runs (from the seconds per token the last one took) matters for long texts: otherwise a
    chat's first step would be followed at once by a decode of a whole long text, a stall of a
    second or more that a short answer never makes up for.
    """

    def __init__(self, embedding_share: float = 1 / 3) -> None:
        if not 0.0 < embedding_share < 1.0:
            raise ValueError("embedding_share must be between 0 and 1")
        # Embedding may run while embed_s <= ratio * chat_s, i.e. share = ratio / (1 + ratio).
        self._ratio = embedding_share / (1.0 - embedding_share)
        self._chat_s = 0.0
        self._embed_s = 0.0
        self._seconds_per_token = 0.0  # of the last embedding decode; kept across resets

    def chat(self, seconds: float) -> None:
        self._chat_s += seconds

    def embedded(self, seconds: float, tokens: int = 0) -> None:
        self._embed_s += seconds
        if tokens > 0:
            self._seconds_per_token = seconds / tokens

    def embedding_may_run(self, chatting: bool, tokens: int = 0) -> bool:
        """Whether an embedding decode of ``tokens`` tokens may run now."""
        expected = tokens * self._seconds_per_token
        return not chatting or self._embed_s + expected <= self._ratio * self._chat_s

    def reset(self) -> None:
        self._chat_s = self._embed_s = 0.0
