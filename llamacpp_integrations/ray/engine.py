"""``RayEngine``: the engine interface over a Ray Serve deployment of ``EngineService``.

Adapters take it as they take a local engine (``ChatLlamaCpp(engine=RayEngine(handle))``):
everything that decides what the model writes (chat templates, grammars for tools and
structured output, reasoning) runs on the replica exactly as in a local engine, because the
replica *is* a local engine; only the neutral requests and results cross the handle. Serve's
router picks the replica for each call.

Calls map onto the handle so: blocking methods wait on ``.remote(...).result()``, ``a``-methods
await the response, streams iterate ``handle.options(stream=True)``; long work (generation,
embeddings, reranking) always runs in the replica's ``a``-methods, which keep its event loop
free so concurrent requests batch together. Leaving a stream early, closing it or cancelling
the awaiting task cancels the response, and Serve cancels the request on the replica, which
frees its sequence. Errors come back as ours (``failures.typed_error``): the replica's own
typed errors as they were raised, a dead or unavailable replica as ``ServerUnavailableError``.

Serve refuses blocking calls from a thread that runs an event loop; a blocking method called
there (an adapter's synchronous bookkeeping inside an async call) waits on a helper thread.
``info``, ``media_marker`` and ``chunks_long_texts`` are asked once and kept.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
from collections.abc import AsyncGenerator, Callable, Generator, Mapping, Sequence
from typing import Any, NoReturn, TypeVar, cast

from ..engine.interface import PromptRequest
from ..engine.lora import LoraInfo
from ..engine.results import Completion, EngineStats, ModelInfo, StreamChunk
from ..engine.types import ChatRequest, GenerationRequest
from ..errors import EngineClosedError, InvalidRequestError, ServerUnavailableError
from ..optional import requires
from .failures import deployment_url, typed_error

with requires("ray"):
    from ray import serve
    from ray.serve.handle import DeploymentHandle, DeploymentResponseGenerator

__all__ = ["RayEngine"]

T = TypeVar("T")

# Blocking handle calls made from a thread that runs an event loop wait here instead.
_WAITERS = concurrent.futures.ThreadPoolExecutor(max_workers=8, thread_name_prefix="ray-engine")
_END = object()


_EVERY_REPLICA = (
    "a Ray deployment's replicas each serve an engine of their own: give its LoRA adapters "
    "in the deployment's engine settings (lora_adapters) instead"
)


def _blocking(call: Callable[[], T]) -> T:
    """``call()``, which blocks: here, or on a helper thread when this one runs a loop."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return call()
    return _WAITERS.submit(call).result()


def _cancel(response: Any) -> None:
    """Cancel a handle call: Serve cancels the request's task on the replica (best effort: a
    call that already ended is left as it was)."""
    # A call that never reached a replica raises its failure here again, which the caller is
    # already being told.
    with contextlib.suppress(Exception):
        response.cancel()


def _lookup(app: str, deployment: str | None) -> DeploymentHandle[Any]:
    url = deployment_url(app, deployment or "(ingress)")
    try:
        if deployment is None:
            return serve.get_app_handle(app)
        return serve.get_deployment_handle(deployment, app_name=app)
    except Exception as error:
        raise ServerUnavailableError(f"no such deployment: {error}", url=url) from error


class RayEngine:
    """A model served by a Ray Serve deployment of ``EngineService``, behind the engine
    interface (``InferenceEngine``, ``RerankingEngine``, ``ChunkingEngine``,
    ``TokenPieceEngine``: what the replicas' engine offers).

    Example::

        app = serve.deployment(EngineService, num_replicas=2).bind(model="/models/m.gguf")
        handle = serve.run(app, name="llm", route_prefix=None)
        llm = ChatLlamaCpp(engine=RayEngine(handle))      # or RayEngine("llm")

    ``target`` is a ``DeploymentHandle``, or the name of an application whose ingress is the
    ``EngineService`` deployment; ``deployment`` names it inside the application instead (an
    application whose ingress is something else, such as the HTTP server). Needs a Ray
    connection (``ray.init``) in this process. ``close`` only stops this object: the
    deployment serves on.
    """

    def __init__(
        self, target: DeploymentHandle[Any] | str, *, deployment: str | None = None
    ) -> None:
        if isinstance(target, str):
            target = _lookup(target, deployment)
        self._handle = target
        self.url = deployment_url(target.app_name, target.deployment_name)
        self._methods: dict[str, DeploymentHandle[Any]] = {}
        self._streams = target.options(method_name="stream", stream=True)
        self._info: ModelInfo | None = None
        self._marker: tuple[str | None] | None = None
        self._chunks: bool | None = None
        self._closed = False

    def __repr__(self) -> str:
        return f"RayEngine({self.url!r})"

    # ---- calls -------------------------------------------------------------------------------

    def _method(self, name: str) -> DeploymentHandle[Any]:
        handle = self._methods.get(name)
        if handle is None:
            handle = self._methods[name] = self._handle.options(method_name=name)
        return handle

    def _stream_call(self, request: GenerationRequest) -> DeploymentResponseGenerator[StreamChunk]:
        self._check_open(request.request_id)
        return cast("DeploymentResponseGenerator[StreamChunk]", self._streams.remote(request))

    def _check_open(self, request_id: str | None = None) -> None:
        if self._closed:
            raise EngineClosedError("the engine is closed", request_id=request_id)

    def _raise(self, error: Exception, request_id: str | None, started: bool = False) -> NoReturn:
        typed = typed_error(error, url=self.url, request_id=request_id, started=started)
        if typed is error:
            raise error
        raise typed from error

    def _call(self, name: str, *args: Any, request_id: str | None = None, **kwargs: Any) -> Any:
        """The replica's ``name(*args, **kwargs)``, waited for."""
        self._check_open(request_id)
        response = self._method(name).remote(*args, **kwargs)
        try:
            return _blocking(response.result)
        except Exception as error:
            self._raise(error, request_id)

    async def _acall(
        self, name: str, *args: Any, request_id: str | None = None, **kwargs: Any
    ) -> Any:
        """The replica's ``name(*args, **kwargs)``, awaited; cancelled with the caller."""
        self._check_open(request_id)
        response = self._method(name).remote(*args, **kwargs)
        try:
            return await response
        except asyncio.CancelledError:
            _cancel(response)
            raise
        except Exception as error:
            self._raise(error, request_id)

    # ---- lifecycle and what the model is -----------------------------------------------------

    @property
    def closed(self) -> bool:
        """True once ``close`` ran (the deployment itself serves on)."""
        return self._closed

    def close(self) -> None:
        """Stop using the deployment: later calls raise ``EngineClosedError``."""
        self._closed = True

    def __enter__(self) -> RayEngine:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @property
    def info(self) -> ModelInfo:
        """The served model, as a replica reports it (asked once)."""
        if self._info is None:
            self._info = self._call("info")
        return self._info

    @property
    def media_marker(self) -> str | None:
        """Where an image goes in a raw completion prompt (``None``: no projector)."""
        if self._marker is None:
            self._marker = (self._call("media_marker"),)
        return self._marker[0]

    @property
    def chunks_long_texts(self) -> bool:
        """Whether the replicas' ``embed`` cuts long texts into windows (``chunk=True``)."""
        if self._chunks is None:
            self._chunks = bool(self._call("chunks_long_texts"))
        return self._chunks

    @property
    def lora_adapters(self) -> list[LoraInfo]:
        """The LoRA adapters requests may choose (``lora``), as a replica lists them: every
        replica's engine has the deployment's settings."""
        adapters: list[LoraInfo] = self._call("lora_adapters")
        return adapters

    def load_lora(
        self, name: str, path: str, *, scale: float = 0.0, timeout: float | None = 60
    ) -> LoraInfo:
        """Refused: a call reaches one replica, and each has an engine of its own."""
        raise InvalidRequestError(_EVERY_REPLICA)

    def set_lora_scales(self, scales: Mapping[str | int, float]) -> None:
        """Refused: a call reaches one replica, and each has an engine of its own."""
        raise InvalidRequestError(_EVERY_REPLICA)

    def stats(self) -> EngineStats:
        """The running and waiting requests of the replica that answers (Serve picks it)."""
        stats: EngineStats = self._call("stats")
        return stats

    # ---- tokens and prompts ------------------------------------------------------------------

    def tokenize(
        self, text: str, *, add_special: bool = False, parse_special: bool = False
    ) -> list[int]:
        """Token ids of ``text`` with the model's own tokenizer."""
        tokens: list[int] = self._call(
            "tokenize", text, add_special=add_special, parse_special=parse_special
        )
        return tokens

    def detokenize(self, tokens: Sequence[int], *, special: bool = False) -> str:
        """The text of ``tokens``."""
        text: str = self._call("detokenize", list(tokens), special=special)
        return text

    def token_piece(self, token: int, *, special: bool = True) -> bytes:
        """The bytes of one token, as the vocabulary holds them."""
        piece: bytes = self._call("token_piece", token, special=special)
        return piece

    def render_chat(self, request: ChatRequest) -> str:
        """The prompt text a chat request becomes (its chat template applied)."""
        text: str = self._call("render_chat", request, request_id=request.request_id)
        return text

    def count_prompt_tokens(self, request: PromptRequest) -> int:
        """How many tokens the prompt counts as in ``Usage.prompt_tokens``."""
        count: int = self._call("count_prompt_tokens", request, request_id=request.request_id)
        return count

    # ---- generation --------------------------------------------------------------------------

    def generate(self, request: GenerationRequest) -> Completion:
        """Run a request to the end on a replica; raises the request's typed error."""
        done: Completion = self._call("agenerate", request, request_id=request.request_id)
        return done

    async def agenerate(self, request: GenerationRequest) -> Completion:
        """Async ``generate``; cancelling the awaiting task cancels the request."""
        done: Completion = await self._acall("agenerate", request, request_id=request.request_id)
        return done

    def stream(self, request: GenerationRequest) -> Generator[StreamChunk, None, None]:
        """Chunks as the replica produces them; leaving the loop early cancels the request."""
        response = self._stream_call(request)
        started = finished = False
        try:
            while True:
                try:
                    chunk = _blocking(lambda: next(response, _END))
                except Exception as error:
                    self._raise(error, request.request_id, started)
                if chunk is _END:
                    finished = True
                    return
                started = True
                yield cast(StreamChunk, chunk)
        finally:
            if not finished:
                _cancel(response)

    async def astream(self, request: GenerationRequest) -> AsyncGenerator[StreamChunk, None]:
        """Async ``stream``; closing the generator or cancelling the task cancels the request."""
        response = self._stream_call(request)
        started = finished = False
        try:
            while True:
                try:
                    chunk = await response.__anext__()
                except StopAsyncIteration:
                    finished = True
                    return
                except asyncio.CancelledError:
                    raise
                except Exception as error:
                    self._raise(error, request.request_id, started)
                started = True
                yield chunk
        finally:
            if not finished:
                _cancel(response)

    # ---- embeddings and reranking ------------------------------------------------------------

    def embed(
        self,
        texts: Sequence[str],
        *,
        normalize: bool = True,
        truncate: bool = False,
        timeout: float | None = None,
        chunk: bool = False,
    ) -> list[list[float]]:
        """One vector per text, embedded on a replica (``chunk``: long texts averaged over
        windows, when ``chunks_long_texts``)."""
        vectors: list[list[float]] = self._call(
            "aembed", list(texts), normalize=normalize, truncate=truncate, timeout=timeout,
            chunk=chunk,
        )  # fmt: skip
        return vectors

    async def aembed(
        self,
        texts: Sequence[str],
        *,
        normalize: bool = True,
        truncate: bool = False,
        timeout: float | None = None,
        chunk: bool = False,
    ) -> list[list[float]]:
        """Async ``embed``."""
        vectors: list[list[float]] = await self._acall(
            "aembed", list(texts), normalize=normalize, truncate=truncate, timeout=timeout,
            chunk=chunk,
        )  # fmt: skip
        return vectors

    def rerank(
        self,
        query: str,
        documents: Sequence[str],
        *,
        truncate: bool = False,
        timeout: float | None = None,
    ) -> list[float]:
        """One relevance score per document, in order (a reranking model's replicas)."""
        scores: list[float] = self._call(
            "arerank", query, list(documents), truncate=truncate, timeout=timeout
        )
        return scores

    async def arerank(
        self,
        query: str,
        documents: Sequence[str],
        *,
        truncate: bool = False,
        timeout: float | None = None,
    ) -> list[float]:
        """Async ``rerank``."""
        scores: list[float] = await self._acall(
            "arerank", query, list(documents), truncate=truncate, timeout=timeout
        )
        return scores
