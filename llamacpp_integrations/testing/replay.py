"""``ReplayEngine``: the engine interface answered from a cassette, with no model.

Every call is fingerprinted (``fingerprint.py``) and looked up (``matching.py``); a recorded
answer is given back as it was: a stream chunk by chunk with the recorded chunking (and, with
``pace``, the recorded delays), a completion whole, a recorded error raised as the same class
with the same message and attributes. Replayed answers carry the new request's ``request_id``.

Chats are rendered from the recorded chat template when the render itself was not recorded
(the adapters probe a template with renders of their own), so only generation, counting,
tokens and embeddings need their calls recorded.

The engine offers the optional capabilities the recorded engine had, and no others: a replay
of a model without a reranker is not a ``RerankingEngine``. Its class is picked when it is
made (``capability_class``), so ``isinstance`` checks see what the recorded engine was.

Nothing here imports llama.cpp: a replay runs where it is not installed. ``RecordingEngine``
(``recording.py``) is this class with a real engine behind it, which answers the calls the
cassette does not and records them.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncGenerator, Awaitable, Callable, Generator, Sequence
from pathlib import Path
from typing import Any, TypeVar

from ..engine.interface import PromptRequest
from ..engine.results import Completion, ModelInfo, StreamChunk
from ..engine.types import ChatRequest, GenerationRequest
from ..errors import CassetteError, EngineClosedError
from ..prompts.chat_rendering import ChatTemplates
from .capabilities import Live, capability_class
from .cassette import Cassette, EngineRecord, Interaction
from .fingerprint import (
    Fingerprint,
    chat_prompt_fingerprint,
    generation_fingerprint,
    prompt_fingerprint,
)
from .matching import Matcher, MatchOptions
from .records import (
    chunk_from_json,
    completion_from_json,
    completion_to_json,
    error_from_json,
)

__all__ = ["ReplayEngine"]

T = TypeVar("T")


def _same(value: Any) -> Any:
    return value


class ReplayEngine:
    """An engine that answers from a cassette alone.

    Example::

        engine = ReplayEngine("tests/cassettes/test_agent.llamacpp.jsonl")
        llm = ChatLlamaCpp(engine=engine)          # or LlamaCpp(engine=engine)

    Args:
        cassette: The cassette, or the path of its file.
        match: How strictly a request must equal a recorded one (default: exactly, each
            generation answer used once).
        pace: Deliver stream chunks with the delays they were recorded with (default: at once).

    Raises:
        CassetteFormatError: The file is missing, corrupt or of an unreadable version.
        UnmatchedRequestError: (from a call) The cassette holds no answer to it; the message
            names the nearest recorded request and how it differs.
    """

    _cassette: Cassette

    def __new__(cls, cassette: Cassette | str | Path, *args: Any, **kwargs: Any) -> ReplayEngine:
        loaded = cassette if isinstance(cassette, Cassette) else Cassette.load(cassette)
        if loaded.engine is None:
            raise CassetteError(f"{loaded!r} has no recorded engine: it cannot be replayed")
        engine = object.__new__(capability_class(cls, loaded.engine.capabilities))
        engine._cassette = loaded
        return engine

    def __init__(
        self,
        cassette: Cassette | str | Path,
        *,
        match: MatchOptions | None = None,
        pace: bool = False,
    ) -> None:
        self._start(match, pace)

    def _start(self, match: MatchOptions | None, pace: bool) -> None:
        where = str(self._cassette.path) if self._cassette.path else "the cassette"
        self._matcher = Matcher(self._cassette.interactions, match, where=where)
        self._pace = pace
        self._closed = False
        self._templates: ChatTemplates | None = None

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self._cassette!r})"

    @property
    def cassette(self) -> Cassette:
        """The cassette this engine plays (and records into)."""
        return self._cassette

    @property
    def match(self) -> MatchOptions:
        """How requests are matched."""
        return self._matcher.options

    # ---- what the engine is ----------------------------------------------------------------

    @property
    def _record(self) -> EngineRecord:
        record = self._cassette.engine
        assert record is not None  # checked when made
        return record

    @property
    def info(self) -> ModelInfo:
        """The recorded engine's model info."""
        return self._record.info

    @property
    def closed(self) -> bool:
        return self._closed

    @property
    def media_marker(self) -> str | None:
        return self._record.media_marker

    def close(self) -> None:
        """Stop answering: later calls raise ``EngineClosedError``."""
        self._closed = True

    def _check_open(self, request_id: str | None = None) -> None:
        if self.closed:
            raise EngineClosedError("the engine is closed", request_id=request_id)

    # ---- one call: replayed, else unanswered -------------------------------------------------

    def _lookup(self, kind: str, request: Fingerprint) -> Interaction | None:
        return self._matcher.find(kind, request)

    def _replayed(
        self, found: Interaction, decode: Callable[[Any], T], request_id: str | None
    ) -> T:
        error = found.response.get("error")
        if error is not None:
            raise error_from_json(error, request_id)
        return decode(found.response.get("value"))

    def _value(
        self,
        kind: str,
        request: Fingerprint,
        live: Live[T],
        *,
        encode: Callable[[T], Any] = _same,
        decode: Callable[[Any], T] = _same,
        request_id: str | None = None,
        offline: Callable[[], T] | None = None,
    ) -> T:
        """A call's answer: the recorded one, else ``_unanswered``'s."""
        self._check_open(request_id)
        found = self._lookup(kind, request)
        if found is not None:
            return self._replayed(found, decode, request_id)
        return self._unanswered(kind, request, live, encode, request_id, offline)

    def _unanswered(
        self,
        kind: str,
        request: Fingerprint,
        live: Live[T],
        encode: Callable[[T], Any],
        request_id: str | None,
        offline: Callable[[], T] | None,
    ) -> T:
        """A call the cassette does not answer: what ``offline`` works out, if anything,
        else an ``UnmatchedRequestError`` (a RecordingEngine asks its engine instead)."""
        if offline is not None:
            return offline()
        raise self._matcher.unmatched(kind, request, request_id)

    async def _avalue(
        self,
        kind: str,
        request: Fingerprint,
        live: Live[Awaitable[T]],
        *,
        encode: Callable[[T], Any] = _same,
        decode: Callable[[Any], T] = _same,
        request_id: str | None = None,
    ) -> T:
        """Async ``_value``."""
        self._check_open(request_id)
        found = self._lookup(kind, request)
        if found is not None:
            return self._replayed(found, decode, request_id)
        return await self._aunanswered(kind, request, live, encode, request_id)

    async def _aunanswered(
        self,
        kind: str,
        request: Fingerprint,
        live: Live[Awaitable[T]],
        encode: Callable[[T], Any],
        request_id: str | None,
    ) -> T:
        """Async ``_unanswered``."""
        raise self._matcher.unmatched(kind, request, request_id)

    # ---- tokens and prompts -----------------------------------------------------------------

    def tokenize(
        self, text: str, *, add_special: bool = False, parse_special: bool = False
    ) -> list[int]:
        request = {"text": text, "add_special": add_special, "parse_special": parse_special}
        return self._value(
            "tokenize",
            request,
            lambda engine: engine.tokenize(
                text, add_special=add_special, parse_special=parse_special
            ),
        )

    def detokenize(self, tokens: Sequence[int], *, special: bool = False) -> str:
        request = {"tokens": list(tokens), "special": special}
        return self._value(
            "detokenize", request, lambda engine: engine.detokenize(tokens, special=special)
        )

    def render_chat(self, request: ChatRequest) -> str:
        """The recorded render of this chat, else the recorded template's own."""
        return self._value(
            "render",
            chat_prompt_fingerprint(request),
            lambda engine: engine.render_chat(request),
            request_id=request.request_id,
            offline=lambda: self._offline_templates().render_chat(request),
        )

    def _offline_templates(self) -> ChatTemplates:
        # The recorded engine's BOS and EOS texts are not in its ModelInfo: templates that
        # print them render without them here, which is why recorded renders come first.
        if self._templates is None:
            self._templates = ChatTemplates(self.info.chat_template, owner="the recorded model")
        return self._templates

    def count_prompt_tokens(self, request: PromptRequest) -> int:
        return self._value(
            "count",
            prompt_fingerprint(request),
            lambda engine: engine.count_prompt_tokens(request),
            request_id=request.request_id,
        )

    # ---- generation -------------------------------------------------------------------------

    def generate(self, request: GenerationRequest) -> Completion:
        return self._value(
            "generate",
            generation_fingerprint(request),
            lambda engine: engine.generate(request),
            encode=completion_to_json,
            decode=lambda data: completion_from_json(data, request.request_id),
            request_id=request.request_id,
        )

    async def agenerate(self, request: GenerationRequest) -> Completion:
        return await self._avalue(
            "generate",
            generation_fingerprint(request),
            lambda engine: engine.agenerate(request),
            encode=completion_to_json,
            decode=lambda data: completion_from_json(data, request.request_id),
            request_id=request.request_id,
        )

    def stream(self, request: GenerationRequest) -> Generator[StreamChunk, None, None]:
        fingerprint = generation_fingerprint(request)
        self._check_open(request.request_id)
        found = self._lookup("stream", fingerprint)
        if found is not None:
            start = time.monotonic()
            for data in found.response.get("chunks", ()):
                if self._pace:
                    time.sleep(max(0.0, start + data.get("at", 0.0) - time.monotonic()))
                yield chunk_from_json(data, request.request_id)
            self._end_of_replayed_stream(found, request.request_id)
            return
        yield from self._unanswered_stream(fingerprint, request)

    async def astream(self, request: GenerationRequest) -> AsyncGenerator[StreamChunk, None]:
        fingerprint = generation_fingerprint(request)
        self._check_open(request.request_id)
        found = self._lookup("stream", fingerprint)
        if found is not None:
            start = time.monotonic()
            for data in found.response.get("chunks", ()):
                if self._pace:
                    await asyncio.sleep(max(0.0, start + data.get("at", 0.0) - time.monotonic()))
                else:
                    await asyncio.sleep(0)  # let other tasks run between chunks, as a model does
                yield chunk_from_json(data, request.request_id)
            self._end_of_replayed_stream(found, request.request_id)
            return
        async for chunk in self._aunanswered_stream(fingerprint, request):
            yield chunk

    def _end_of_replayed_stream(self, found: Interaction, request_id: str) -> None:
        error = found.response.get("error")
        if error is not None:
            raise error_from_json(error, request_id)
        if found.response.get("closed_early"):
            count = len(found.response.get("chunks", ()))
            raise CassetteError(
                f"the recorded stream was closed by its reader after {count} chunk(s), and "
                "this one reads on: record the call again",
                request_id=request_id,
            )

    def _unanswered_stream(
        self, fingerprint: Fingerprint, request: GenerationRequest
    ) -> Generator[StreamChunk, None, None]:
        """A stream the cassette does not answer (a RecordingEngine streams it live)."""
        raise self._matcher.unmatched("stream", fingerprint, request.request_id)
        yield  # a generator, like every engine's ``stream``

    async def _aunanswered_stream(
        self, fingerprint: Fingerprint, request: GenerationRequest
    ) -> AsyncGenerator[StreamChunk, None]:
        """Async ``_unanswered_stream``."""
        raise self._matcher.unmatched("stream", fingerprint, request.request_id)
        yield  # an async generator, like every engine's ``astream``

    # ---- embeddings -------------------------------------------------------------------------

    def embed(
        self,
        texts: Sequence[str],
        *,
        normalize: bool = True,
        truncate: bool = False,
        timeout: float | None = None,
    ) -> list[list[float]]:
        request = {"texts": list(texts), "normalize": normalize, "truncate": truncate}
        return self._value(
            "embed",
            request,
            lambda engine: engine.embed(
                texts, normalize=normalize, truncate=truncate, timeout=timeout
            ),
        )

    async def aembed(
        self,
        texts: Sequence[str],
        *,
        normalize: bool = True,
        truncate: bool = False,
        timeout: float | None = None,
    ) -> list[list[float]]:
        request = {"texts": list(texts), "normalize": normalize, "truncate": truncate}
        return await self._avalue(
            "embed",
            request,
            lambda engine: engine.aembed(
                texts, normalize=normalize, truncate=truncate, timeout=timeout
            ),
        )
