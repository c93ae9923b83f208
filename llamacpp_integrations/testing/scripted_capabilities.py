"""The optional capabilities of a ``ScriptedEngine``, as subclasses.

``isinstance(engine, RerankingEngine)`` (and the other capability protocols) looks for
methods, so a plain ``ScriptedEngine`` has none of them, as a model without a reranker has no
``rerank``; a test that needs one picks the subclass that has it. ``ScriptedServer`` stands for
one llama-server, with the health a fleet member reports.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace

from ..engine.config_values import LoraAdapter
from ..engine.interface import PromptRequest
from ..engine.lora import LoraInfo, LoraTable
from ..engine.types import ChatRequest, GenerationRequest
from ..errors import ServerUnavailableError
from .scripted import SCRIPTED_INFO, Answer, ScriptedEngine

__all__ = [
    "ScriptedChunkingEngine",
    "ScriptedLoraEngine",
    "ScriptedRerankingEngine",
    "ScriptedServer",
    "ScriptedTokenPieceEngine",
]


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
class ScriptedLoraEngine(ScriptedEngine):
    """A ``ScriptedEngine`` with LoRA adapters that requests choose (a ``LoraEngine``): a
    request naming one it has not loaded fails with ``UnknownAdapterError`` before any chunk,
    as the local engine's does. ``requests`` keeps each request's ``lora`` as it was asked.

    Attributes:
        adapters: The names of its adapters (their ids are their positions), all at scale 0
            for requests that name none.
    """

    adapters: Sequence[str] = ("sql",)

    def __post_init__(self) -> None:
        super().__post_init__()
        self._loras = LoraTable(LoraAdapter(f"{name}.gguf", 0.0, name) for name in self.adapters)

    def _next_answer(self, request: GenerationRequest) -> Answer:
        self._loras.key(request.lora, request.request_id)
        return super()._next_answer(request)

    @property
    def lora_adapters(self) -> list[LoraInfo]:
        return self._loras.list()

    def load_lora(
        self, name: str, path: str, *, scale: float = 0.0, timeout: float | None = 60
    ) -> LoraInfo:
        self._check_open()
        return self._loras.add(LoraAdapter(path, scale, name))

    def set_lora_scales(self, scales: Mapping[str | int, float]) -> None:
        self._loras.set_scales(scales)


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


@dataclass(eq=False)
class ScriptedServer(ScriptedEngine):
    """A ``ScriptedEngine`` standing for one llama-server: a fleet member
    (``remote.fleet.MemberEngine``: it answers ``health`` and ``ahealth``) that a test takes
    down, brings back or cuts off part-way.

    Example::

        servers = {url: ScriptedServer(url=url) for url in ("http://a:1", "http://b:2")}
        fleet = FleetEngine.from_engines(servers, probe_interval=3600)
        servers["http://a:1"].down = True  # refused: the fleet retries on b and ejects a

    Attributes:
        url: The server's base URL; its ``info.path`` too, as a remote engine reports (unless
            ``info`` is given).
        down: The server does not answer: probes say so, and every call (tokenizing and
            rendering too; ``info`` excepted, known from an earlier answer) is refused with a
            retryable ``ServerUnavailableError`` before its first chunk.
        die_after: Cut every answer off before this chunk with a non-retryable
            ``ServerUnavailableError`` ("connection reset"); ``None``: answers run to the end.
        on_probe: Called by every ``health`` probe before it answers (a test can hold a probe
            there, or count them).
        probes: How many ``health`` probes it answered.
        async_probes: How many ``ahealth`` probes it answered.
    """

    url: str = "http://127.0.0.1:8080"
    down: bool = False
    die_after: int | None = None
    on_probe: Callable[[], object] | None = None
    probes: int = 0
    async_probes: int = 0

    def __post_init__(self) -> None:
        if self.info is SCRIPTED_INFO:
            self.info = replace(SCRIPTED_INFO, path=self.url)
        super().__post_init__()

    def health(self) -> bool:
        """Whether the server is up (``not down``), after ``on_probe``."""
        with self._lock:
            self.probes += 1
        if self.on_probe is not None:
            self.on_probe()  # outside the lock: a held probe must not hold the server
        return not self.down

    async def ahealth(self) -> bool:
        """``health`` for async callers (``on_probe`` is not called)."""
        with self._lock:
            self.async_probes += 1
        return not self.down

    def _check_open(self, request_id: str | None = None) -> None:
        super()._check_open(request_id)
        if self.down:
            raise ServerUnavailableError(
                "connection refused", url=self.url, retryable=True, request_id=request_id
            )

    def _next_answer(self, request: GenerationRequest) -> Answer:
        answer = super()._next_answer(request)
        if self.die_after is None:
            return answer
        reset = ServerUnavailableError("connection reset", url=self.url, retryable=False)
        return replace(answer, fail_at=self.die_after, error=reset)

    def tokenize(
        self, text: str, *, add_special: bool = False, parse_special: bool = False
    ) -> list[int]:
        self._check_open()
        return super().tokenize(text, add_special=add_special, parse_special=parse_special)

    def detokenize(self, tokens: Sequence[int], *, special: bool = False) -> str:
        self._check_open()
        return super().detokenize(tokens, special=special)

    def render_chat(self, request: ChatRequest) -> str:
        self._check_open(request.request_id)
        return super().render_chat(request)

    def count_prompt_tokens(self, request: PromptRequest) -> int:
        self._check_open(request.request_id)
        return super().count_prompt_tokens(request)
