"""Embeddings from a llama-server started with ``--embeddings``: texts tokenized and held to
what the server takes, then one ``/embeddings`` request per text."""

from __future__ import annotations

import asyncio
from collections.abc import Mapping, Sequence
from typing import Any

from ..engine.token_budget import fit_tokens
from ..engine.types import new_request_id
from ..errors import InvalidRequestError
from .builds import check_build
from .transport import Transport

__all__ = ["EMBEDDING_BATCH", "RemoteEmbeddings"]

# llama-server embeds a text in one physical batch (-ub, 512 unless set): a longer input fails
# there with a 500, so texts are held to this as well as to the slot's context.
EMBEDDING_BATCH = 512


class RemoteEmbeddings:
    """The embedding half of ``RemoteEngine``, on its own server (``url``)."""

    def __init__(self, transport: Transport, url: str, *, allow_untested_build: bool) -> None:
        self._transport = transport
        self._url = url
        self._allow_untested_build = allow_untested_build
        self._limit: int | None = None
        self._bos: int | None = None

    def _setup(self) -> tuple[int, int]:
        """The server's per-text token limit and BOS id (read once)."""
        if self._limit is None or self._bos is None:
            props = self._transport.get_json("/props")
            check_build(
                props.get("build_info"), self._url, allow_untested=self._allow_untested_build
            )
            n_ctx = int((props.get("default_generation_settings") or {}).get("n_ctx") or 0)
            bos = self._transport.tokenize(
                str(props.get("bos_token") or ""), add_special=False, parse_special=True
            )
            self._bos = bos[0] if bos else 0
            self._limit = min(n_ctx or EMBEDDING_BATCH, EMBEDDING_BATCH)
        return self._limit, self._bos

    def token_lists(self, texts: Sequence[str], truncate: bool, request_id: str) -> list[list[int]]:
        """Each text's tokens, within the server's limit (or ``ContextOverflowError``)."""
        if isinstance(texts, str) or not all(isinstance(t, str) for t in texts):
            raise InvalidRequestError("texts must be a list of strings", request_id=request_id)
        if not texts:
            raise InvalidRequestError("texts is empty: nothing to embed", request_id=request_id)
        limit, bos = self._setup()
        token_lists = []
        for index, text in enumerate(texts):
            tokens = self._transport.tokenize(text, add_special=True, parse_special=False)
            token_lists.append(
                fit_tokens(
                    tokens or [bos], limit, truncate=truncate, subject=f"text {index} has",
                    taker="the embeddings server takes",
                    hint="pass truncate=True, or raise its -c and -ub", request_id=request_id,
                )
            )  # fmt: skip
        return token_lists

    def embed(
        self, texts: Sequence[str], *, normalize: bool, truncate: bool, timeout: float | None
    ) -> list[list[float]]:
        request_id = new_request_id()
        return [
            vector_of(
                self._transport.post_json(
                    "/embeddings",
                    request_body(tokens, normalize),
                    timeout=timeout,
                    request_id=request_id,
                )
            )
            for tokens in self.token_lists(texts, truncate, request_id)
        ]

    async def aembed(
        self, texts: Sequence[str], *, normalize: bool, truncate: bool, timeout: float | None
    ) -> list[list[float]]:
        request_id = new_request_id()
        token_lists = await asyncio.to_thread(self.token_lists, texts, truncate, request_id)
        vectors: list[list[float]] = []
        for tokens in token_lists:
            row = await self._transport.apost_json(
                "/embeddings",
                request_body(tokens, normalize),
                timeout=timeout,
                request_id=request_id,
            )
            vectors.append(vector_of(row))
        return vectors


def request_body(tokens: list[int], normalize: bool) -> dict[str, Any]:
    """One text a request: with the tested server build the vectors of a several-text request
    did not all match their texts (a text's vector differed from the one it gets alone)."""
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
