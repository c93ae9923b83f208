"""``FleetEngine``: one engine over several llama-servers, routed by prompt-prefix affinity.

Each server is a ``RemoteEngine``; ``routing.Router`` decides which one takes a request and
keeps every server's load and health. Generation routes by the request's affinity key
(``affinity.affinity_key``: a chat's system messages and tools, a raw prompt's first
characters), so requests sharing a prompt prefix land where it is cached.

Retries (decided in ``failover``; the fleet only sends, awaits and iterates): a request that
fails before its first chunk reached the caller, with an error the server marks ``retryable``
(connection refused, 5xx, 503 while loading), goes to another healthy server, each server tried
at most once. Once a chunk was delivered the error reaches the caller as it is (the text
already shown cannot be taken back); the server is ejected either way.

Health: a ``health_probes.HealthProber`` probes ``/health`` (``RemoteEngine.health``) of healthy
servers every ``probe_interval`` seconds and of ejected ones once their ``cooldown`` is over,
readmitting those that answer; due servers are probed at once, so one that hangs delays no
other. It stops on ``close()`` (or when the fleet is garbage-collected). When no server is
healthy, a request first probes the ejected servers whose cooldown is over, then fails with
``ServerUnavailableError``.

Calls that are not generation (tokens, templates, model info, embeddings) go to the first
healthy server, trying the next on a server failure.
"""

from __future__ import annotations

import contextlib
import weakref
from collections.abc import AsyncGenerator, Awaitable, Callable, Generator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol, TypeVar, runtime_checkable

from pydantic import SecretStr

from ..engine.interface import InferenceEngine, PromptRequest
from ..engine.results import Completion, ModelInfo, StreamChunk
from ..engine.types import ChatRequest, GenerationRequest
from ..errors import EngineClosedError, InvalidRequestError
from .affinity import affinity_key
from .collect import acollect, collect
from .failover import AnyServer, RoutedRequest
from .health_probes import HealthProber, aprobe, probe
from .routing import Router, ServerState

__all__ = ["FleetEngine", "FleetStats", "MemberEngine"]

T = TypeVar("T")


@runtime_checkable
class MemberEngine(InferenceEngine, Protocol):
    """What a fleet member is: an engine that can say whether its server is up."""

    def health(self) -> bool:
        """True when the server answers ``/health`` with OK."""
        ...

    async def ahealth(self) -> bool:
        """Async ``health``."""
        ...


@dataclass(frozen=True)
class FleetStats:
    """A fleet's servers as the router sees them, and how it routes.

    Attributes:
        servers: Every server's health, load and counts, in the order given.
        affinity: Whether requests are routed by affinity key (else least-loaded).
        load_factor: How far above the average load one server may go for its keys.
    """

    servers: tuple[ServerState, ...]
    affinity: bool
    load_factor: float

    @property
    def cache_hit_rate(self) -> float | None:
        """Cached prompt tokens over prompt tokens, over every server."""
        prompt = sum(s.prompt_tokens for s in self.servers)
        cached = sum(s.cached_prompt_tokens for s in self.servers)
        return cached / prompt if prompt else None


class FleetEngine:
    """Several llama-servers serving one model, as one ``InferenceEngine``.

    Args:
        base_urls: The servers' base URLs (a single gateway URL is a fleet of one).
        embeddings_url: An ``--embeddings`` server every member sends embeddings to.
        api_key: Bearer key sent to every server.
        timeout: Seconds one HTTP request may take.
        allow_untested_build: Deprecated and ignored: every build is used.
        model: The model every request names, for members that are routers over several models.
        probe_interval: Seconds between ``/health`` probes of one server.
        cooldown: Seconds an ejected server stays out before a successful probe readmits it.
        load_factor: How far above the average in-flight load a server may go before a key it
            owns spills over to the next server on the ring (``>= 1``).
        affinity: Route by the prompt prefix (``False``: to the least-loaded server).
    """

    def __init__(
        self,
        base_urls: Sequence[str],
        *,
        embeddings_url: str | None = None,
        api_key: str | SecretStr | None = None,
        timeout: float = 600.0,
        allow_untested_build: bool = False,
        probe_interval: float = 5.0,
        cooldown: float = 10.0,
        load_factor: float = 1.25,
        affinity: bool = True,
        model: str | None = None,
    ) -> None:
        from .engine import RemoteEngine  # httpx is imported only when a fleet is built

        if isinstance(base_urls, str):
            base_urls = [base_urls]
        if not all(isinstance(url, str) for url in base_urls):
            raise InvalidRequestError("base_urls must be URLs (strings)")
        urls = [url.rstrip("/") for url in base_urls]
        if len(set(urls)) != len(urls):
            raise InvalidRequestError(f"a server is given twice in {urls}")
        members: dict[str, MemberEngine] = {}
        for url in urls:
            members[url] = RemoteEngine(
                url,
                embeddings_url=embeddings_url,
                api_key=api_key,
                timeout=timeout,
                allow_untested_build=allow_untested_build,
                model=model,
            )
        self._setup(
            members,
            probe_interval=probe_interval,
            cooldown=cooldown,
            load_factor=load_factor,
            affinity=affinity,
        )

    @classmethod
    def from_engines(
        cls,
        members: Mapping[str, MemberEngine],
        *,
        probe_interval: float = 5.0,
        cooldown: float = 10.0,
        load_factor: float = 1.25,
        affinity: bool = True,
    ) -> FleetEngine:
        """A fleet over engines you built (by URL): remote engines with other settings each,
        or stand-ins in tests."""
        fleet = cls.__new__(cls)
        fleet._setup(
            dict(members),
            probe_interval=probe_interval,
            cooldown=cooldown,
            load_factor=load_factor,
            affinity=affinity,
        )
        return fleet

    def _setup(
        self,
        members: dict[str, MemberEngine],
        *,
        probe_interval: float,
        cooldown: float,
        load_factor: float,
        affinity: bool,
    ) -> None:
        self._members = members
        self._router = Router(
            list(members),
            load_factor=load_factor,
            cooldown=cooldown,
            probe_interval=probe_interval,
            affinity=affinity,
        )
        self._closed = False
        self._info: ModelInfo | None = None
        # The prober holds the router and the members, never the fleet: a fleet nobody
        # references is collected, and its finalizer stops the prober.
        tick = max(0.05, min(1.0, probe_interval / 4, cooldown / 4 if cooldown else 1.0))
        self._prober = HealthProber(self._router, members, tick=tick)
        self._finalizer = weakref.finalize(self, _shut, self._prober, list(members.values()))
        self._prober.start()

    # ---- state -------------------------------------------------------------------------------

    @property
    def urls(self) -> tuple[str, ...]:
        """The servers' base URLs, in the order given."""
        return self._router.urls

    def member(self, url: str) -> MemberEngine:
        """The engine serving ``url``."""
        return self._members[url]

    def servers(self) -> tuple[ServerState, ...]:
        """Every server's health (healthy or ejected), in-flight requests, requests, failures
        and prompt-cache counts."""
        return self._router.states()

    def stats(self) -> FleetStats:
        """The servers' states and the routing settings."""
        return FleetStats(
            servers=self._router.states(),
            affinity=self._router.affinity,
            load_factor=self._router.load_factor,
        )

    def route(self, request: GenerationRequest) -> str | None:
        """The server a request would go to now (nothing is sent)."""
        return self._router.pick(affinity_key(request))

    def health(self) -> bool:
        """Probe every server now, at once; True when at least one is healthy."""
        self._check_open()
        self._probe(list(self._members))
        return bool(self._router.healthy())

    async def ahealth(self) -> bool:
        """Async ``health`` (the servers are probed at once)."""
        self._check_open()
        await self._aprobe(list(self._members))
        return bool(self._router.healthy())

    @property
    def info(self) -> ModelInfo:
        """The model as the first server that answers describes it (all serve one model)."""
        if self._info is None:
            self._info = self._any(lambda member: member.info)
        return self._info

    @property
    def closed(self) -> bool:
        return self._closed

    @property
    def media_marker(self) -> str | None:
        return self._any(lambda member: member.media_marker)

    def close(self) -> None:
        """Stop the probes and close every member; running requests end as theirs do."""
        self._closed = True
        self._finalizer()
        self._prober.join(timeout=5)

    def __enter__(self) -> FleetEngine:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _check_open(self) -> None:
        if self._closed:
            raise EngineClosedError("the fleet engine is closed")

    # ---- tokens and prompts (any healthy server) ------------------------------------------

    def tokenize(
        self, text: str, *, add_special: bool = False, parse_special: bool = False
    ) -> list[int]:
        return self._any(
            lambda m: m.tokenize(text, add_special=add_special, parse_special=parse_special)
        )

    def detokenize(self, tokens: Sequence[int], *, special: bool = False) -> str:
        return self._any(lambda m: m.detokenize(tokens, special=special))

    def render_chat(self, request: ChatRequest) -> str:
        return self._any(lambda m: m.render_chat(request))

    def count_prompt_tokens(self, request: PromptRequest) -> int:
        return self._any(lambda m: m.count_prompt_tokens(request))

    def embed(
        self,
        texts: Sequence[str],
        *,
        normalize: bool = True,
        truncate: bool = False,
        timeout: float | None = None,
    ) -> list[list[float]]:
        return self._any(
            lambda m: m.embed(texts, normalize=normalize, truncate=truncate, timeout=timeout)
        )

    async def aembed(
        self,
        texts: Sequence[str],
        *,
        normalize: bool = True,
        truncate: bool = False,
        timeout: float | None = None,
    ) -> list[list[float]]:
        return await self._aany(
            lambda m: m.aembed(texts, normalize=normalize, truncate=truncate, timeout=timeout)
        )

    def _any(self, call: Callable[[MemberEngine], T]) -> T:
        way = self._any_server()
        self._probe(way.revival())
        for url in way.servers():
            with way.attempt(url):
                return call(self._members[url])
        raise way.exhausted()

    async def _aany(self, call: Callable[[MemberEngine], Awaitable[T]]) -> T:
        way = self._any_server()
        await self._aprobe(way.revival())
        for url in way.servers():
            with way.attempt(url):
                return await call(self._members[url])
        raise way.exhausted()

    def _any_server(self) -> AnyServer:
        self._check_open()
        return AnyServer(self._router)

    def _probe(self, urls: list[str]) -> None:
        probe(self._router, self._members, urls)

    async def _aprobe(self, urls: list[str]) -> None:
        await aprobe(self._router, self._members, urls)

    # ---- generation (routed, retried before the first chunk) --------------------------------

    def _routed(self, request: GenerationRequest) -> RoutedRequest:
        self._check_open()
        return RoutedRequest(self._router, affinity_key(request), self._check_open)

    def generate(self, request: GenerationRequest) -> Completion:
        # Collected from the fleet's own stream, so a server breaking off an answer is told
        # apart from one refusing it (both are "not retryable" to a caller of generate).
        return collect(request, self.stream(request), url="fleet")

    async def agenerate(self, request: GenerationRequest) -> Completion:
        return await acollect(request, self.astream(request), url="fleet")

    def stream(self, request: GenerationRequest) -> Generator[StreamChunk, None, None]:
        way = self._routed(request)
        self._probe(way.revival())
        for url in way.servers():
            chunks = self._members[url].stream(request)
            with contextlib.closing(chunks), way.attempt(url) as delivery:
                for chunk in chunks:
                    yield delivery.passed(chunk)
                return
        raise way.exhausted()

    async def astream(self, request: GenerationRequest) -> AsyncGenerator[StreamChunk, None]:
        way = self._routed(request)
        await self._aprobe(way.revival())
        for url in way.servers():
            chunks = self._members[url].astream(request)
            async with contextlib.aclosing(chunks):
                with way.attempt(url) as delivery:
                    async for chunk in chunks:
                        yield delivery.passed(chunk)
                    return
        raise way.exhausted()


def _shut(prober: HealthProber, members: list[Any]) -> None:
    prober.stop()
    for member in members:
        member.close()
