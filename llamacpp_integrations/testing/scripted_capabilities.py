"""The optional capabilities of a ``ScriptedEngine``, as subclasses.

``isinstance(engine, RerankingEngine)`` (and the other capability protocols) looks for
methods, so a plain ``ScriptedEngine`` has none of them, as a model without a reranker has no
``rerank``; a test that needs one picks the subclass that has it.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from .scripted import ScriptedEngine

__all__ = ["ScriptedChunkingEngine", "ScriptedRerankingEngine", "ScriptedTokenPieceEngine"]


def _shared_words(query: str, document: str) -> float:
    words = set(document.lower().split())
    return float(sum(1 for word in query.lower().split() if word in words))


@dataclass(eq=False)
class ScriptedRerankingEngine(ScriptedEngine):
    """A ``ScriptedEngine`` that reranks too (a ``RerankingEngine``).

    Example::

        engine = ScriptedRerankingEngine(score=lambda query, document: float(len(document)))
        reranker = LlamaCppReranker(engine=engine, top_n=2)

    Attributes:
        score: A document's score for a query (default: how many of the query's words it has).
        reranks: Every ``(query, documents)`` reranked, in order.
    """

    score: Callable[[str, str], float] = _shared_words
    reranks: list[tuple[str, list[str]]] = field(default_factory=list)

    def rerank(
        self,
        query: str,
        documents: Sequence[str],
        *,
        truncate: bool = False,
        timeout: float | None = None,
    ) -> list[float]:
        self._check_open()
        self.reranks.append((query, list(documents)))
        return [self.score(query, document) for document in documents]

    async def arerank(
        self,
        query: str,
        documents: Sequence[str],
        *,
        truncate: bool = False,
        timeout: float | None = None,
    ) -> list[float]:
        return self.rerank(query, documents, truncate=truncate, timeout=timeout)


def _character_bytes(token: int) -> bytes:
    return chr(token).encode()


@dataclass(eq=False)
class ScriptedTokenPieceEngine(ScriptedEngine):
    """A ``ScriptedEngine`` that gives each token's bytes (a ``TokenPieceEngine``), as a
    model's tokenizer does where a token is part of a character.

    Attributes:
        piece: A token's bytes (default: its character in UTF-8, tokens being characters).
    """

    piece: Callable[[int], bytes] = _character_bytes

    def token_piece(self, token: int, *, special: bool = True) -> bytes:
        self._check_open()
        return self.piece(token)


@dataclass(eq=False)
class ScriptedChunkingEngine(ScriptedEngine):
    """A ``ScriptedEngine`` whose ``embed`` takes ``chunk`` (a ``ChunkingEngine``), as the local
    ``Engine``'s does. A vector is the same either way (a scripted model has no window for a
    text to overflow); ``embedded`` keeps ``chunk`` with the other keywords."""

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
        keywords = {"normalize": normalize, "truncate": truncate, "timeout": timeout}
        return self._embed(texts, {**keywords, "chunk": chunk})

    async def aembed(
        self,
        texts: Sequence[str],
        *,
        normalize: bool = True,
        truncate: bool = False,
        timeout: float | None = None,
        chunk: bool = False,
    ) -> list[list[float]]:
        return self.embed(
            texts, normalize=normalize, truncate=truncate, timeout=timeout, chunk=chunk
        )
