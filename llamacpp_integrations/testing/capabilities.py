"""The optional capabilities of a replaying (or recording) engine, as mixin classes.

``isinstance(engine, RerankingEngine)`` (and the other capability protocols) looks for
methods, so an engine offers a capability only by having its methods. A ``ReplayEngine`` is
made of the class ``capability_class`` builds: the engine class with the mixins of the
capabilities the recorded (or wrapped) engine has, and no others.

The mixins answer through the engine's ``_value`` and ``_avalue`` (``Answering``), so this
module needs nothing of ``replay.py``, which imports it: the imports run one way.
"""

from __future__ import annotations

import threading
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, Protocol, TypeVar, cast

from ..engine.interface import ChunkingEngine, InferenceEngine, RerankingEngine, TokenPieceEngine
from .fingerprint import Fingerprint

__all__ = ["CAPABILITY_MIXINS", "Answering", "Live", "capability_class"]

T = TypeVar("T")
E = TypeVar("E")
# What the real engine behind a RecordingEngine is asked when the cassette has no answer.
Live = Callable[[InferenceEngine], T]


class Answering(Protocol):
    """What a capability mixin needs of the engine it is mixed into (a ``ReplayEngine``): one
    call's answer, recorded or live, sync and async."""

    def _value(
        self,
        kind: str,
        request: Fingerprint,
        live: Live[T],
        *,
        encode: Callable[[T], Any] = ...,
        decode: Callable[[Any], T] = ...,
    ) -> T: ...

    async def _avalue(
        self,
        kind: str,
        request: Fingerprint,
        live: Live[Awaitable[T]],
        *,
        encode: Callable[[T], Any] = ...,
        decode: Callable[[Any], T] = ...,
    ) -> T: ...


class _Reranks:
    """``RerankingEngine``: scores recorded per query and documents."""

    def rerank(
        self: Answering,
        query: str,
        documents: Sequence[str],
        *,
        truncate: bool = False,
        timeout: float | None = None,
    ) -> list[float]:
        request = {"query": query, "documents": list(documents), "truncate": truncate}
        return self._value(
            "rerank",
            request,
            lambda engine: cast(RerankingEngine, engine).rerank(
                query, documents, truncate=truncate, timeout=timeout
            ),
        )

    async def arerank(
        self: Answering,
        query: str,
        documents: Sequence[str],
        *,
        truncate: bool = False,
        timeout: float | None = None,
    ) -> list[float]:
        request = {"query": query, "documents": list(documents), "truncate": truncate}
        return await self._avalue(
            "rerank",
            request,
            lambda engine: cast(RerankingEngine, engine).arerank(
                query, documents, truncate=truncate, timeout=timeout
            ),
        )


class _Chunks:
    """``ChunkingEngine``: ``embed`` takes ``chunk``, which is part of the request."""

    @property
    def chunks_long_texts(self) -> bool:
        return True

    def embed(
        self: Answering,
        texts: Sequence[str],
        *,
        normalize: bool = True,
        truncate: bool = False,
        timeout: float | None = None,
        chunk: bool = False,
    ) -> list[list[float]]:
        request = {"texts": list(texts), "normalize": normalize, "truncate": truncate}
        return self._value(
            "embed",
            {**request, "chunk": chunk},
            lambda engine: cast(ChunkingEngine, engine).embed(
                texts, normalize=normalize, truncate=truncate, timeout=timeout, chunk=chunk
            ),
        )

    async def aembed(
        self: Answering,
        texts: Sequence[str],
        *,
        normalize: bool = True,
        truncate: bool = False,
        timeout: float | None = None,
        chunk: bool = False,
    ) -> list[list[float]]:
        request = {"texts": list(texts), "normalize": normalize, "truncate": truncate}
        return await self._avalue(
            "embed",
            {**request, "chunk": chunk},
            lambda engine: cast(ChunkingEngine, engine).aembed(
                texts, normalize=normalize, truncate=truncate, timeout=timeout, chunk=chunk
            ),
        )


class _TokenPieces:
    """``TokenPieceEngine``: a token's raw bytes, written as a list of byte values."""

    def token_piece(self: Answering, token: int, *, special: bool = True) -> bytes:
        return self._value(
            "token_piece",
            {"token": token, "special": special},
            lambda engine: cast(TokenPieceEngine, engine).token_piece(token, special=special),
            encode=list,
            decode=bytes,
        )


CAPABILITY_MIXINS: dict[str, type] = {
    "chunk": _Chunks,
    "rerank": _Reranks,
    "token_piece": _TokenPieces,
}


_made: dict[tuple[type, frozenset[str]], type] = {}
_lock = threading.Lock()


def capability_class(base: type[E], capabilities: frozenset[str]) -> type[E]:
    """``base`` (a ``ReplayEngine`` class) with the methods of ``capabilities`` (``"rerank"``,
    ``"chunk"``, ``"token_piece"``), made once per combination; ``base`` itself when there are
    none."""
    mixins = tuple(
        CAPABILITY_MIXINS[name] for name in sorted(capabilities & CAPABILITY_MIXINS.keys())
    )
    if not mixins:
        return base
    with _lock:
        made = _made.get((base, capabilities))
        if made is None:
            # The mixins come first in the method order, so their methods (``embed`` with
            # ``chunk``) replace the base's.
            name = base.__name__
            namespace = {"__module__": base.__module__, "__qualname__": name}
            made = _made[base, capabilities] = type(name, (*mixins, base), namespace)
        return cast("type[E]", made)
