"""``RemoteEngine``: the engine interface on one llama.cpp ``llama-server``.

Everything that decides what the model writes stays on this side, so the adapters behave as they
do on the local engine: chats are rendered here with the model's template (read from ``/props``)
by the engine's own ``ChatTemplate``; grammars, lazy-grammar triggers, stop strings and sampling
settings go to the server's native ``/completion`` as fields; images are vetted by the adapters'
image policy and sent as pixels (the server never fetches a URL). The server streams tokens,
their text and log-probabilities; ``chunks.ChunkReader`` turns them into ``StreamChunk`` s.

What the server can do is read once from what it reports about itself
(``capabilities.ServerCapabilities``), whatever its build: a request needing a feature the
server lacks raises ``ServerFeatureError`` naming the feature and the build. Behind a router
(one llama-server over several models), ``model`` names the model every request goes to.

Closing a stream (leaving the loop, cancelling the task) closes the HTTP response, and the
server aborts the request's slot. A failure before the first chunk is a retryable
``ServerUnavailableError`` (a fleet may send the request elsewhere); after it, not.
"""

from __future__ import annotations

import asyncio
import threading
import warnings
from collections.abc import AsyncGenerator, Generator, Mapping, Sequence
from typing import Any

import httpx
from pydantic import SecretStr

from ..engine.interface import PromptRequest
from ..engine.lora import LoraInfo
from ..engine.results import Completion, EngineStats, ModelInfo, StreamChunk
from ..engine.types import ChatRequest, CompletionRequest, GenerationRequest
from ..errors import (
    ContextOverflowError,
    EngineClosedError,
    InvalidRequestError,
    LlamaCppIntegrationError,
    ServerFeatureError,
)
from .builds import TESTED_BUILDS, check_build
from .capabilities import RouterModel, ServerCapabilities, detect, is_router, router_models
from .collect import acollect, collect
from .completion_stream import CompletionStream
from .embeddings import RemoteEmbeddings
from .lora import RemoteLoras, refused
from .payload import completion_body
from .prompts import RemotePrompts
from .server_info import ServerDescription, describe_server, parse_metrics, stats_from
from .transport import Transport

__all__ = ["RemoteEngine"]

HEALTH_TIMEOUT = 5.0


class RemoteEngine:
    """A model served by llama.cpp's ``llama-server``, behind the engine interface.

    Example::

        engine = RemoteEngine("http://10.0.0.5:8080", embeddings_url="http://10.0.0.5:8081")
        llm = ChatLlamaCpp(engine=engine)          # or ChatLlamaCpp(base_url=...)

    Construction sends nothing: the server is asked for its properties on first use
    (``capabilities``); a build not in ``remote.TESTED_BUILDS`` is used all the same, with one
    log line (``allow_untested_build`` is accepted and ignored). ``model`` names the model of a
    router (a llama-server started without ``-m`` over ``--models-dir``/``--models-preset``);
    every request carries it; on a single-model server it is sent and ignored.
    ``base_url`` may carry a path (a reverse proxy's prefix). ``embeddings_url`` names a
    server started with ``--embeddings`` (``--pooling mean`` matches the local engine); without
    it embeddings go to ``base_url``. ``api_key`` is sent as a bearer token (a server that wants
    another raises ``ServerAuthenticationError``). ``timeout`` bounds every HTTP exchange (a
    request's own ``timeout`` bounds it further).

    On Python 3.11 ``isinstance(engine, InferenceEngine)`` reads ``info``, so an adapter given
    ``engine=RemoteEngine(...)`` asks the server for its properties when it validates the
    engine (the server must be up then); an adapter's ``base_url=`` waits for the first call.
    """

    def __init__(
        self,
        base_url: str,
        *,
        embeddings_url: str | None = None,
        api_key: str | SecretStr | None = None,
        timeout: float = 600.0,
        allow_untested_build: bool = False,
        model: str | None = None,
    ) -> None:
        if not isinstance(base_url, str) or not base_url.startswith(("http://", "https://")):
            raise InvalidRequestError(f"base_url must be an http(s) URL, not {base_url!r}")
        if timeout <= 0:
            raise InvalidRequestError("timeout must be > 0 seconds")
        key = SecretStr(api_key) if isinstance(api_key, str) else api_key
        self.base_url = base_url.rstrip("/")
        self.embeddings_url = (embeddings_url or base_url).rstrip("/")
        if allow_untested_build:
            warnings.warn(
                "allow_untested_build is no longer needed: every llama-server build is used, "
                "each feature decided from what the server reports",
                DeprecationWarning,
                stacklevel=2,
            )
        self.allow_untested_build = allow_untested_build  # deprecated: ignored
        self.model = model
        self._gen = Transport(self.base_url, api_key=key, timeout=timeout, model=model)
        self._emb = (
            self._gen
            if self.embeddings_url == self.base_url
            else Transport(self.embeddings_url, api_key=key, timeout=timeout)
        )
        self._lock = threading.Lock()
        self._desc: ServerDescription | None = None
        self._prompts = RemotePrompts(self.base_url, self._gen)
        self._embeddings = RemoteEmbeddings(self._emb, self.embeddings_url)
        self._loras = RemoteLoras(self._gen)
        self._closed = False

    def __repr__(self) -> str:
        model = f", model={self.model!r}" if self.model else ""
        return f"RemoteEngine({self.base_url!r}{model})"

    # ---- lifecycle ---------------------------------------------------------------------------

    @property
    def closed(self) -> bool:
        """True once ``close`` ran."""
        return self._closed

    def close(self) -> None:
        """Close the connection pools; later calls raise ``EngineClosedError``. Requests being
        streamed end with the error their closed connection gives."""
        self._closed = True
        self._embeddings.close()
        self._gen.close()
        if self._emb is not self._gen:
            self._emb.close()

    def __enter__(self) -> RemoteEngine:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _check_open(self, request_id: str | None = None) -> None:
        if self._closed:
            raise EngineClosedError("the engine is closed", request_id=request_id)

    def health(self) -> bool:
        """Whether ``/health`` says the server is ready (False while it loads, or when it
        cannot be reached)."""
        try:
            response = self._gen.get("/health", timeout=HEALTH_TIMEOUT, routed=False)
        except LlamaCppIntegrationError:
            return False
        return _healthy(response)

    async def ahealth(self) -> bool:
        """Async ``health``."""
        try:
            response = await self._gen.aget("/health", timeout=HEALTH_TIMEOUT, routed=False)
        except LlamaCppIntegrationError:
            return False
        return _healthy(response)

    # ---- what the server is ------------------------------------------------------------------

    def _server(self) -> ServerDescription:
        desc = self._desc
        if desc is not None:
            return desc
        self._check_open()
        with self._lock:
            if self._desc is None:
                desc = self._discover()
                self._prompts.learn(desc)
                self._desc = desc
            return self._desc

    def _discover(self) -> ServerDescription:
        own = self._gen.get_json("/props", routed=False)
        if is_router(own):
            models = router_models(self._gen.get_json("/models", routed=False))
            _check_routed(self.base_url, self.model, models, str(own.get("build_info") or ""))
            props = self._gen.get_json("/props")  # the routed model's (loads it if it must)
            listing: object = {}  # a router's /v1/models lists its models, not their sizes
            caps = detect(
                props, tested_builds=TESTED_BUILDS, router_props=own, models=models,
                model=self.model,
            )  # fmt: skip
        else:
            props, listing = own, self._gen.get_json("/v1/models")
            caps = detect(props, tested_builds=TESTED_BUILDS, model=self.model)
        check_build(caps.build, self.base_url, detected=caps.summary())
        self._gen.build = self._emb.build = caps.build
        return describe_server(self.base_url, props, listing, caps)

    async def _aserver(self) -> ServerDescription:
        return self._desc if self._desc is not None else await asyncio.to_thread(self._server)

    @property
    def capabilities(self) -> ServerCapabilities:
        """What the server (or the routed model) offers, as it reported it on first use."""
        return self._server().capabilities

    def models(self) -> list[RouterModel]:
        """A router's models and their status, as it lists them now (``/models``); a
        single-model server's one model (its ``status`` empty)."""
        self._check_open()
        listing = router_models(self._gen.get_json("/models", routed=False))
        return list(listing)

    def load_model(self, model: str | None = None) -> None:
        """Ask a router to load ``model`` (default: this engine's); it loads in the background,
        and a request to it waits for the load."""
        self._router_call("/models/load", model)

    def unload_model(self, model: str | None = None) -> None:
        """Ask a router to unload ``model`` (default: this engine's), freeing its memory."""
        self._router_call("/models/unload", model)

    def _router_call(self, path: str, model: str | None) -> None:
        self._check_open()
        name = model or self.model
        if not name:
            raise InvalidRequestError(f"{path} needs a model name (this engine has none)")
        own = self._gen.get_json("/props", routed=False)  # a router's, whatever this engine names
        if not is_router(own):
            raise ServerFeatureError(
                "it serves one model (started with -m); load and unload need a router",
                feature="router mode",
                url=self.base_url,
                build=str(own.get("build_info") or ""),
            )
        self._gen.post_json(path, {"model": name})

    # ---- LoRA adapters (``LoraEngine``) ------------------------------------------------------

    @property
    def lora_adapters(self) -> list[LoraInfo]:
        """The server's adapters (``GET /lora-adapters``), named by their files."""
        self._check_open()
        return self._loras.list()

    def load_lora(
        self, name: str, path: str, *, scale: float = 0.0, timeout: float | None = 60
    ) -> LoraInfo:
        """Refused: llama-server loads its adapters when it starts (``--lora``)."""
        raise refused("loading an adapter while serving", self.base_url, self._gen.build)

    def set_lora_scales(self, scales: Mapping[str | int, float]) -> None:
        """Refused here: set them at the server's own ``POST /lora-adapters``."""
        raise refused("setting default scales from a client", self.base_url, self._gen.build)

    @property
    def info(self) -> ModelInfo:
        """The served model, from ``/props`` and ``/v1/models`` (``path`` is the URL)."""
        return self._server().info

    @property
    def build_info(self) -> str:
        """The server's build, as ``/props`` names it."""
        return self._server().build_info

    @property
    def media_marker(self) -> str | None:
        """The server's media marker (``None``: it has no image projector)."""
        return self._server().media_marker

    def stats(self) -> EngineStats:
        """Busy slots (``/slots``), and waiting requests and decode steps (``/metrics``, when
        the server runs with ``--metrics``)."""
        self._check_open()
        caps = self._server().capabilities
        slots = self._gen.get("/slots") if caps.slots_endpoint else None
        metrics = self._gen.get("/metrics") if caps.metrics_endpoint else None
        return stats_from(
            slots.json() if slots is not None and slots.status_code == 200 else [],
            parse_metrics(metrics.text)
            if metrics is not None and metrics.status_code == 200
            else {},
        )

    # ---- tokens and templates ----------------------------------------------------------------

    def tokenize(
        self, text: str, *, add_special: bool = False, parse_special: bool = False
    ) -> list[int]:
        """Token ids of ``text`` (the server's ``/tokenize``)."""
        self._server()
        return self._gen.tokenize(text, add_special=add_special, parse_special=parse_special)

    def detokenize(self, tokens: Sequence[int], *, special: bool = False) -> str:
        """The text of ``tokens`` (the server's ``/detokenize``, which always renders control
        tokens: ``special`` cannot hide them)."""
        self._server()
        return str(self._gen.post_json("/detokenize", {"tokens": list(tokens)})["content"])

    def render_chat(self, request: ChatRequest) -> str:
        """The prompt text a chat request becomes (images as the server's media marker)."""
        return self._prompts.render(request, self._server())[0]

    def count_prompt_tokens(self, request: PromptRequest) -> int:
        """The prompt's text tokens. Images are not counted (the server does not say how many
        embeddings an image becomes before the request runs)."""
        prompt, _ = self._prompts.prompt(request, self._server())
        if isinstance(prompt, list):
            return len(prompt)
        return len(self._gen.tokenize(prompt, add_special=True, parse_special=True))

    # ---- generation --------------------------------------------------------------------------

    def _body(self, request: GenerationRequest) -> dict[str, Any]:
        self._check_open(request.request_id)
        if not isinstance(request, ChatRequest | CompletionRequest):
            raise InvalidRequestError(f"unsupported request type {type(request).__name__}")
        desc = self._server()
        request.validate_common(desc.info.n_vocab)
        if request.reasoning is not None and request.reasoning.budget is not None:
            # The local engine writes the end of the reasoning itself once the budget is spent;
            # over /completion nothing can be inserted into the server's output.
            raise InvalidRequestError(
                "a reasoning budget is not supported on a remote engine (leave reasoning_budget "
                "unset)",
                request_id=request.request_id,
            )
        n_ctx = desc.info.n_ctx_per_seq
        if request.max_tokens is not None and n_ctx and request.max_tokens >= n_ctx:
            raise ContextOverflowError(
                f"{request.max_tokens} tokens were asked for, but one sequence holds {n_ctx}",
                n_prompt_tokens=0,
                n_ctx=n_ctx,
                request_id=request.request_id,
            )
        if request.logprobs is not None and not desc.capabilities.token_probs:
            raise ServerFeatureError(
                "its /completion does not report token probabilities (n_probs)",
                feature="logprobs",
                url=self.base_url,
                build=desc.capabilities.build,
                request_id=request.request_id,
            )
        prompt, images = self._prompts.prompt(request, desc)
        if not prompt:
            raise InvalidRequestError("the prompt is empty", request_id=request.request_id)
        return completion_body(request, prompt, images) | self._loras.field(
            request.lora, request.request_id
        )

    def _completion(self, request: GenerationRequest) -> CompletionStream:
        return CompletionStream(request, self._body(request), self._gen)

    def stream(self, request: GenerationRequest) -> Generator[StreamChunk, None, None]:
        """Chunks as the server streams them; leaving the loop early closes the stream, and
        the server aborts the request."""
        call = self._completion(request)
        with call.open() as response:
            # Lines, not an SSE decoder (httpx-sse): llama-server ends a failed stream with an
            # ``error: {...}`` line, a field the SSE spec, and so a decoder that follows it,
            # ignores; ``transport.parse_event`` reads it, so the failure is not a cut stream.
            for line in response.iter_lines():
                yield from call.chunks(line)
                if call.finished:
                    return
        raise call.cut_short()

    async def astream(self, request: GenerationRequest) -> AsyncGenerator[StreamChunk, None]:
        """Async ``stream``; closing the generator or cancelling the task aborts the request."""
        await self._aserver()
        call = await asyncio.to_thread(self._completion, request)
        async with call.aopen() as response:
            async for line in response.aiter_lines():
                for chunk in call.chunks(line):
                    yield chunk
                if call.finished:
                    return
        raise call.cut_short()

    def generate(self, request: GenerationRequest) -> Completion:
        """Run a request to the end; raises the request's typed error if it fails."""
        return collect(request, self.stream(request), url=self.base_url)

    async def agenerate(self, request: GenerationRequest) -> Completion:
        """Async ``generate``; cancelling the awaiting task aborts the request."""
        return await acollect(request, self.astream(request), url=self.base_url)

    # ---- embeddings --------------------------------------------------------------------------

    def embed(
        self,
        texts: Sequence[str],
        *,
        normalize: bool = True,
        truncate: bool = False,
        timeout: float | None = None,
    ) -> list[list[float]]:
        """One vector per text from the embeddings server (``normalize``: unit length).

        Texts longer than the server takes raise ``ContextOverflowError`` naming the text,
        unless ``truncate``.
        """
        self._check_open()
        return self._embeddings.embed(
            texts, normalize=normalize, truncate=truncate, timeout=timeout
        )

    async def aembed(
        self,
        texts: Sequence[str],
        *,
        normalize: bool = True,
        truncate: bool = False,
        timeout: float | None = None,
    ) -> list[list[float]]:
        """Async ``embed`` (tokenizing runs on a thread)."""
        self._check_open()
        return await self._embeddings.aembed(
            texts, normalize=normalize, truncate=truncate, timeout=timeout
        )


def _check_routed(url: str, model: str | None, models: Sequence[RouterModel], build: str) -> None:
    """A router needs a model it serves (by id or alias)."""
    names = sorted(m.id for m in models)
    if model is None:
        raise InvalidRequestError(
            f"{url} (llama-server build {build}) is a router over several models ({names}): "
            "name one with model="
        )
    if not any(model == m.id or model in m.aliases for m in models):
        raise InvalidRequestError(f"{url} serves no model {model!r} (it serves {names})")


def _healthy(response: httpx.Response) -> bool:
    if response.status_code != 200:
        return False
    try:
        return bool(response.json().get("status") == "ok")
    except (ValueError, AttributeError):
        return False
