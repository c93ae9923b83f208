"""The optional capabilities of a replaying (or recording) engine, as mixin classes.

``isinstance(engine, RerankingEngine)`` (and the other capability protocols) looks for
methods, so an engine offers a capability only by having its methods. A ``ReplayEngine`` is
made of the class ``capability_class`` builds: the engine class with the mixins of the
capabilities the recorded (or wrapped) engine has, and no others.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from typing import cast

from ..engine.interface import ChunkingEngine, RerankingEngine, TokenPieceEngine
from .replay import ReplayEngine

__all__ = ["CAPABILITY_MIXINS", "capability_class"]


class _Reranks(ReplayEngine):
    """``RerankingEngine``: scores recorded per query and documents."""

    def rerank(
        self,
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
        self,
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


class _Chunks(ReplayEngine):
    """``ChunkingEngine``: ``embed`` takes ``chunk``, which is part of the request."""

    @property
    def chunks_long_texts(self) -> bool:
        return True

    def embed(
        self,
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
        self,
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


class _TokenPieces(ReplayEngine):
    """``TokenPieceEngine``: a token's raw bytes, written as a list of byte values."""

    def token_piece(self, token: int, *, special: bool = True) -> bytes:
        return self._value(
            "token_piece",
            {"token": token, "special": special},
            lambda engine: cast(TokenPieceEngine, engine).token_piece(token, special=special),
            encode=list,
            decode=bytes,
        )


CAPABILITY_MIXINS: dict[str, type[ReplayEngine]] = {
    "chunk": _Chunks,
    "rerank": _Reranks,
    "token_piece": _TokenPieces,
}


_made: dict[tuple[type[ReplayEngine], frozenset[str]], type[ReplayEngine]] = {}
_lock = threading.Lock()


def capability_class(base: type[ReplayEngine], capabilities: frozenset[str]) -> type[ReplayEngine]:
    """``base`` with the methods of ``capabilities`` (``"rerank"``, ``"chunk"``,
    ``"token_piece"``), made once per combination; ``base`` itself when there are none."""
    mixins = tuple(
        CAPABILITY_MIXINS[name] for name in sorted(capabilities & CAPABILITY_MIXINS.keys())
    )
    if not mixins:
        return base
    with _lock:
        made = _made.get((base, capabilities))
        if made is None:
            # The mixins subclass ReplayEngine; ``base`` (maybe RecordingEngine) comes after
            # them but before ReplayEngine in the method order, so its overrides win.
            name = base.__name__
            namespace = {"__module__": base.__module__, "__qualname__": name}
            made = _made[base, capabilities] = type(name, (*mixins, base), namespace)
        return made
