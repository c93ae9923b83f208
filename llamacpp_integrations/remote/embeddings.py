"""Embeddings from a llama-server started with ``--embeddings``: texts tokenized and held to
what the server takes, then sent one text a request, one request at a time.

One at a time because, with the tested server build, texts the server embeds side by side get
vectors that are not theirs (cosine about 0.7 to the vector the text gets alone): several
texts in one request, and equally single-text requests that arrive together in different
slots. So every ``/embeddings`` request of one ``RemoteEmbeddings`` goes through a single
sender thread, whatever the number of callers (threads or tasks) in the process; callers take
turns text by text. Tokenizing runs no model and goes several requests at a time.
"""

from __future__ import annotations

import asyncio
import logging
import threading
from collections.abc import Mapping, Sequence
from concurrent.futures import CancelledError, Future, ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

from ..engine.types import new_request_id
from ..errors import EngineClosedError, InvalidRequestError
from ..prompts.token_budget import fit_tokens
from .builds import check_build
from .fan_out import amap_bounded, map_bounded
from .transport import Transport

__all__ = ["EMBEDDING_BATCH", "TOKENIZE_CONCURRENCY", "RemoteEmbeddings"]

log = logging.getLogger("llamacpp_integrations.remote")

# llama-server embeds a text in one physical batch (-ub, 512 unless set): a longer input fails
# there with a 500, so texts are held to this as well as to the slot's context.
EMBEDDING_BATCH = 512
# /tokenize requests in flight at once for one call.
TOKENIZE_CONCURRENCY = 8


class RemoteEmbeddings:
    """The embedding half of ``RemoteEngine``, on its own server (``url``)."""

    def __init__(
        self, transport: Transport, url: str, *, allow_untested_build: bool = False
    ) -> None:
        del allow_untested_build  # deprecated: every build is used
        self._transport = transport
        self._url = url
        self._server: _EmbeddingServer | None = None
        self._sender: ThreadPoolExecutor | None = None
        self._sender_lock = threading.Lock()
        self._closed = False

    def close(self) -> None:
        """Stop the sender; texts not sent yet fail with ``EngineClosedError``."""
        with self._sender_lock:
            self._closed = True
            if self._sender is not None:
                self._sender.shutdown(wait=False, cancel_futures=True)

    def _setup(self) -> _EmbeddingServer:
        """What the server takes: read from ``/props`` once."""
        if self._server is None:
            props = self._transport.get_json("/props")
            self._transport.build = str(props.get("build_info") or "")  # for its errors
            check_build(props.get("build_info"), self._url)
            n_ctx = int((props.get("default_generation_settings") or {}).get("n_ctx") or 0)
            bos = self._transport.tokenize(
                str(props.get("bos_token") or ""), add_special=False, parse_special=True
            )
            slots = int(props.get("total_slots") or 1)
            if slots > 1:
                log.warning(
                    "the embeddings server at %s has %d slots: texts it embeds side by side get "
                    "wrong vectors, so this engine sends one at a time, but other clients of "
                    "the server can still overlap with it; start the server with -np 1",
                    self._url,
                    slots,
                )
            self._server = _EmbeddingServer(
                limit=min(n_ctx or EMBEDDING_BATCH, EMBEDDING_BATCH), bos=bos[0] if bos else 0
            )
        return self._server

    async def _asetup(self) -> _EmbeddingServer:
        if self._server is not None:
            return self._server
        return await asyncio.to_thread(self._setup)

    def token_lists(self, texts: Sequence[str], truncate: bool, request_id: str) -> list[list[int]]:
        """Each text's tokens, within the server's limit (or ``ContextOverflowError``)."""
        _check_texts(texts, request_id)
        tokens = _TextTokens(self._transport, self._setup(), texts, truncate, request_id)
        return map_bounded(tokens.of, range(len(texts)), TOKENIZE_CONCURRENCY)

    async def atoken_lists(
        self, texts: Sequence[str], truncate: bool, request_id: str
    ) -> list[list[int]]:
        """Async ``token_lists``."""
        _check_texts(texts, request_id)
        tokens = _TextTokens(self._transport, await self._asetup(), texts, truncate, request_id)
        return await amap_bounded(tokens.aof, range(len(texts)), TOKENIZE_CONCURRENCY)

    def _send(
        self, tokens: list[int], normalize: bool, timeout: float | None, request_id: str
    ) -> Future[list[float]]:
        """Queue one text's request on the sender thread."""

        def post() -> list[float]:
            body = request_body(tokens, normalize)
            answer = self._transport.post_json(
                "/embeddings", body, timeout=timeout, request_id=request_id
            )
            return vector_of(answer)

        with self._sender_lock:
            if self._closed:
                raise _closed(request_id)
            if self._sender is None:
                self._sender = ThreadPoolExecutor(
                    max_workers=1, thread_name_prefix="llamacpp-remote-embeddings"
                )
            return self._sender.submit(post)

    def embed(
        self, texts: Sequence[str], *, normalize: bool, truncate: bool, timeout: float | None
    ) -> list[list[float]]:
        """One vector per text; the texts go to the sender one after another."""
        request_id = new_request_id()
        token_lists = self.token_lists(texts, truncate, request_id)
        return [
            _vector(self._send(tokens, normalize, timeout, request_id), request_id)
            for tokens in token_lists
        ]

    async def aembed(
        self, texts: Sequence[str], *, normalize: bool, truncate: bool, timeout: float | None
    ) -> list[list[float]]:
        """Async ``embed``."""
        request_id = new_request_id()
        token_lists = await self.atoken_lists(texts, truncate, request_id)
        return [
            await _avector(self._send(tokens, normalize, timeout, request_id), request_id)
            for tokens in token_lists
        ]


def _closed(request_id: str) -> EngineClosedError:
    return EngineClosedError("the engine is closed", request_id=request_id)


def _vector(sent: Future[list[float]], request_id: str) -> list[float]:
    """The vector of a text queued on the sender, once it was sent."""
    try:
        return sent.result()
    except CancelledError:  # only ``close`` cancels a queued text of a sync caller
        raise _closed(request_id) from None


async def _avector(sent: Future[list[float]], request_id: str) -> list[float]:
    """Async ``_vector``: cancelling the task drops a text not sent yet; one being sent
    completes."""
    try:
        return await asyncio.wrap_future(sent)
    except asyncio.CancelledError:
        task = asyncio.current_task()
        if task is not None and task.cancelling():
            raise  # the caller's own cancellation
        raise _closed(request_id) from None


@dataclass(frozen=True)
class _TextTokens:
    """One call's texts as the token lists the server takes: tokenized by its ``/tokenize``,
    then held to its limit (``truncate``: cut, else ``ContextOverflowError``)."""

    transport: Transport
    server: _EmbeddingServer
    texts: Sequence[str]
    truncate: bool
    request_id: str

    def of(self, index: int) -> list[int]:
        """Text ``index``'s tokens."""
        text = self.texts[index]
        tokens = self.transport.tokenize(text, add_special=True, parse_special=False)
        return self._fit(index, tokens)

    async def aof(self, index: int) -> list[int]:
        """Async ``of``."""
        text = self.texts[index]
        tokens = await self.transport.atokenize(text, add_special=True, parse_special=False)
        return self._fit(index, tokens)

    def _fit(self, index: int, tokens: list[int]) -> list[int]:
        server = self.server
        return fit_tokens(
            tokens or [server.bos], server.limit, truncate=self.truncate,
            subject=f"text {index} has", taker="the embeddings server takes",
            hint="pass truncate=True, or raise its -c and -ub", request_id=self.request_id,
        )  # fmt: skip


@dataclass(frozen=True)
class _EmbeddingServer:
    limit: int  # tokens a text may have
    bos: int  # what an empty text is sent as


def _check_texts(texts: Sequence[str], request_id: str) -> None:
    if isinstance(texts, str) or not all(isinstance(t, str) for t in texts):
        raise InvalidRequestError("texts must be a list of strings", request_id=request_id)
    if not texts:
        raise InvalidRequestError("texts is empty: nothing to embed", request_id=request_id)


def request_body(tokens: list[int], normalize: bool) -> dict[str, Any]:
    """The ``/embeddings`` request of one text (see the module's note on why one)."""
    return {"content": tokens, "embd_normalize": 2 if normalize else -1}


def vector_of(rows: object) -> list[float]:
    """The one vector of an ``/embeddings`` answer."""
    if not isinstance(rows, list) or len(rows) != 1 or not isinstance(rows[0], Mapping):
        raise InvalidRequestError("the embeddings server did not answer with one vector")
    vector = rows[0]["embedding"]
    # A pooled embedding comes as a list holding one vector.
    if vector and isinstance(vector[0], list):
        vector = vector[0]
    return [float(x) for x in vector]
