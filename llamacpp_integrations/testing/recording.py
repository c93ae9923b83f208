"""``RecordingEngine``: any engine, with every call written to a cassette.

It is a ``ReplayEngine`` with a real engine behind it. In record mode ``all`` (the default)
every call goes to the real engine and is recorded, the cassette starting empty. In
``new_episodes`` the calls the cassette answers are replayed, and only the others go to the
real engine and are appended. ``once`` is ``all`` for a cassette that does not exist yet, and
a plain replay otherwise (the pytest plugin makes a ``ReplayEngine`` then).

Calls the replay answers alike by itself are not written: a chat render its recorded template
gives (the adapters probe templates with a dozen renders), or a call already on file with the
same request. What a call returned is recorded as it was delivered: a stream's chunks as they
came (text, reasoning, token ids, log-probabilities, finish reason, usage, timings, each with
its delay from the request), or the typed error it raised, partial text and all. A stream its
reader leaves early is recorded up to there.

The wrapper has the optional capabilities (rerank, chunked embeddings, token pieces) of the
engine it wraps, and no others. Closing it stops the recording; the wrapped engine stays open
(whoever made it closes it).
"""

from __future__ import annotations

import time
from collections.abc import AsyncGenerator, Awaitable, Callable, Generator
from pathlib import Path
from typing import Any, Literal, TypeVar

from ..engine.interface import ChunkingEngine, InferenceEngine, RerankingEngine, TokenPieceEngine
from ..engine.results import ModelInfo, StreamChunk
from ..engine.types import GenerationRequest
from ..errors import InvalidRequestError
from .capabilities import Live, capability_class
from .cassette import Cassette, EngineRecord, Interaction
from .fingerprint import Fingerprint
from .matching import GENERATION_KINDS, MatchOptions
from .records import chunk_to_json, error_to_json
from .replay import ReplayEngine

__all__ = ["RecordMode", "RecordingEngine", "capabilities_of"]

RecordMode = Literal["none", "once", "new_episodes", "all"]
T = TypeVar("T")
RECORD_MODES: tuple[RecordMode, ...] = ("none", "once", "new_episodes", "all")


def capabilities_of(engine: InferenceEngine) -> frozenset[str]:
    """The optional capabilities ``engine`` has, by the names cassettes give them."""
    found = set()
    if isinstance(engine, RerankingEngine):
        found.add("rerank")
    if isinstance(engine, ChunkingEngine) and engine.chunks_long_texts:
        found.add("chunk")
    if isinstance(engine, TokenPieceEngine):
        found.add("token_piece")
    return frozenset(found)


class RecordingEngine(ReplayEngine):
    """``engine``, recording every call into ``cassette``.

    Example::

        with Engine(EngineConfig(model="smollm2-135m")) as real:
            engine = RecordingEngine(real, "tests/cassettes/test_agent.llamacpp.jsonl")
            run_my_agent(ChatLlamaCpp(engine=engine))   # every call is on file now

    Args:
        engine: The engine that answers (local, remote, or any ``InferenceEngine``).
        cassette: The cassette, or the path of its file (written as calls end).
        mode: ``"all"`` records every call into an emptied cassette; ``"new_episodes"``
            replays what the cassette answers and records the rest; ``"once"`` records into
            a cassette that does not exist yet and refuses one that does (replay it instead).
        match: How a request is matched to a recorded one (``new_episodes``).
    """

    def __new__(
        cls, engine: InferenceEngine, cassette: Cassette | str | Path, *args: Any, **kwargs: Any
    ) -> RecordingEngine:
        made = object.__new__(capability_class(cls, capabilities_of(engine)))
        assert isinstance(made, RecordingEngine)
        return made

    def __init__(
        self,
        engine: InferenceEngine,
        cassette: Cassette | str | Path,
        *,
        mode: RecordMode = "all",
        match: MatchOptions | None = None,
    ) -> None:
        if mode not in ("once", "new_episodes", "all"):
            raise InvalidRequestError(
                f"a RecordingEngine records in mode 'once', 'new_episodes' or 'all', not "
                f"{mode!r} (replay with a ReplayEngine)"
            )
        self._cassette = _cassette_for(cassette, mode)
        self._engine = engine
        self.mode: RecordMode = mode
        self._start(match, pace=False)

    @property
    def wrapped(self) -> InferenceEngine:
        """The engine that answers what is recorded."""
        engine: InferenceEngine = self._engine
        return engine

    @property
    def info(self) -> ModelInfo:
        return self.wrapped.info

    @property
    def closed(self) -> bool:
        return self._closed or self.wrapped.closed

    @property
    def media_marker(self) -> str | None:
        return self.wrapped.media_marker

    def _lookup(self, kind: str, request: Fingerprint) -> Interaction | None:
        if self.mode != "new_episodes":
            return None  # every call is recorded afresh
        return super()._lookup(kind, request)

    def _keep(self, kind: str, request: Fingerprint, response: dict[str, Any]) -> None:
        if self._cassette.engine is None:
            engine = self.wrapped
            self._cassette.engine = EngineRecord(
                info=engine.info,
                media_marker=engine.media_marker,
                capabilities=capabilities_of(engine),
                engine_type=type(engine).__name__,
            )
        if kind not in GENERATION_KINDS and self._matcher.find(kind, request) is not None:
            return  # the same answer to the same question is on file already
        interaction = Interaction(kind, request, response)
        self._cassette.add(interaction)
        self._matcher.add_played(interaction)

    def _unanswered(
        self,
        kind: str,
        request: Fingerprint,
        live: Live[T],
        encode: Callable[[T], Any],
        request_id: str | None,
        offline: Callable[[], T] | None,
    ) -> T:
        try:
            value = live(self.wrapped)
        except Exception as exc:
            self._keep(kind, request, {"error": error_to_json(exc)})
            raise
        if offline is not None and _same_offline(offline, value):
            return value  # the replay works it out alike (a chat rendered by its template)
        self._keep(kind, request, {"value": encode(value)})
        return value

    async def _aunanswered(
        self,
        kind: str,
        request: Fingerprint,
        live: Live[Awaitable[T]],
        encode: Callable[[T], Any],
        request_id: str | None,
    ) -> T:
        try:
            value = await live(self.wrapped)
        except Exception as exc:
            self._keep(kind, request, {"error": error_to_json(exc)})
            raise
        self._keep(kind, request, {"value": encode(value)})
        return value

    def _unanswered_stream(
        self, fingerprint: Fingerprint, request: GenerationRequest
    ) -> Generator[StreamChunk, None, None]:
        chunks: list[dict[str, Any]] = []
        ending: dict[str, Any] = {}
        start = time.monotonic()
        source = self.wrapped.stream(request)
        try:
            for chunk in source:
                chunks.append(chunk_to_json(chunk, time.monotonic() - start))
                yield chunk
        except GeneratorExit:
            ending = _closed_early(chunks)
            raise
        except Exception as exc:
            ending = {"error": error_to_json(exc)}
            raise
        finally:
            source.close()
            self._keep("stream", fingerprint, {"chunks": chunks, **ending})

    async def _aunanswered_stream(
        self, fingerprint: Fingerprint, request: GenerationRequest
    ) -> AsyncGenerator[StreamChunk, None]:
        chunks: list[dict[str, Any]] = []
        ending: dict[str, Any] = {}
        start = time.monotonic()
        source = self.wrapped.astream(request)
        try:
            async for chunk in source:
                chunks.append(chunk_to_json(chunk, time.monotonic() - start))
                yield chunk
        except GeneratorExit:
            ending = _closed_early(chunks)
            raise
        except Exception as exc:
            ending = {"error": error_to_json(exc)}
            raise
        finally:
            await source.aclose()
            self._keep("stream", fingerprint, {"chunks": chunks, **ending})


def _cassette_for(cassette: Cassette | str | Path, mode: RecordMode) -> Cassette:
    if isinstance(cassette, Cassette):
        if mode == "all":
            return Cassette(cassette.path, overwrite=True)
        return cassette
    path = Path(cassette)
    if mode == "once" and path.exists():
        raise InvalidRequestError(
            f"{path} is recorded already (mode 'once' records a cassette only once): replay it "
            "with a ReplayEngine, or record it again with mode 'all'"
        )
    if mode == "new_episodes" and path.exists():
        return Cassette.load(path)
    return Cassette(path, overwrite=True)


def _closed_early(chunks: list[dict[str, Any]]) -> dict[str, Any]:
    # A reader that stops after the last chunk has read the whole answer.
    finished = bool(chunks) and "finish_reason" in chunks[-1]
    return {} if finished else {"closed_early": True}


def _same_offline(offline: Callable[[], Any], value: Any) -> bool:
    try:
        return bool(offline() == value)
    except Exception:
        return False  # the replay could not work it out: the live answer is recorded
