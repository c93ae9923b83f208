"""The engine's public face: submit work, read results, close.

``Engine`` validates and tokenizes on the caller's thread, hands a ``PreparedRequest`` to the worker
through the bounded inbox, and gives the caller a ``RequestHandle`` to read events from. The worker
thread (``EngineCore``) is the only one that touches llama.cpp contexts.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import threading
import time
import weakref
from collections.abc import AsyncIterator, Callable, Iterator, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, TypeVar

from ..errors import (
    ChatTemplateError,
    ContextOverflowError,
    EngineClosedError,
    ImageInputNotSupportedError,
    InvalidRequestError,
    ModelLoadError,
)
from ..models import GGUFInfo, read_gguf_info
from .channel import EventChannel, RequestHandle
from .chat_template import ChatTemplate, messages_to_dicts, strip_leading_bos
from .config import EngineConfig
from .core import EngineCore
from .embedder import POOLING_TYPES
from .inbox import Inbox
from .media import as_image_input, flatten_parts, has_images
from .requests import EmbedJob, PreparedRequest
from .runner import LoadedModel
from .sampler import SamplerChain
from .types import (
    ChatRequest,
    Completion,
    CompletionRequest,
    GenerationRequest,
    ImageInput,
    StreamChunk,
    new_request_id,
)
from .vision import MediaPrompt, VisionProjector

__all__ = ["Engine", "EngineStats", "ModelInfo"]

T = TypeVar("T")
_MEAN_POOLING = POOLING_TYPES["mean"]


@dataclass(frozen=True)
class ModelInfo:
    """What the loaded model is, from its GGUF header and from llama.cpp."""

    path: str
    name: str | None
    architecture: str
    description: str
    n_ctx_train: int
    n_ctx_per_seq: int
    n_embd: int
    n_vocab: int
    n_params: int
    size_bytes: int
    chat_template: str | None
    mmproj: str | None = None
    image_max_side: int | None = None

    @property
    def supports_images(self) -> bool:
        """Whether requests may carry images (a projector is loaded)."""
        return self.mmproj is not None

    @property
    def has_chat_template(self) -> bool:
        return self.chat_template is not None


@dataclass(frozen=True)
class SlotStats:
    seq_id: int
    busy: bool
    cached_tokens: int
    kv_cells: int


@dataclass(frozen=True)
class EngineStats:
    """A snapshot taken on the worker thread between steps."""

    running: int
    waiting: int
    steps: int
    slots: tuple[SlotStats, ...]


def _start_worker(
    config: EngineConfig, gguf: GGUFInfo, inbox: Inbox, n_ctx_per_seq: int
) -> tuple[LoadedModel, VisionProjector | None, threading.Thread]:
    """Load the weights (and projector) on a new worker thread; wait until it serves."""
    started: concurrent.futures.Future[tuple[LoadedModel, VisionProjector | None]]
    started = concurrent.futures.Future()

    def main() -> None:
        model: LoadedModel | None = None
        vision: VisionProjector | None = None
        try:
            model = LoadedModel(
                gguf.path,
                n_gpu_layers=config.n_gpu_layers,
                use_mmap=config.use_mmap,
                weight_repacking=config.weight_repacking,
            )
            if config.mmproj is not None:
                vision = VisionProjector(
                    Path(config.mmproj),
                    model,
                    n_threads=config.threads,
                    use_gpu=config.n_gpu_layers != 0,
                )
            pooling = POOLING_TYPES.get(config.embedding_pooling)
            if pooling is None:  # "model": the GGUF's own pooling, else mean
                pooling = gguf.pooling_type if gguf.pooling_type not in (None, 0) else _MEAN_POOLING
            core = EngineCore(
                model,
                config,
                inbox,
                n_ctx_per_seq=n_ctx_per_seq,
                embedding_pooling=pooling,
                vision=vision,
            )
        except BaseException as error:
            inbox.close()
            if vision is not None:
                vision.close()
            if model is not None:
                model.close()
            started.set_exception(error)
            return
        started.set_result((model, vision))
        try:
            core.run()
        finally:
            if vision is not None:
                vision.close()
            model.close()

    thread = threading.Thread(target=main, name=f"llamacpp-engine:{gguf.path.name}", daemon=True)
    thread.start()
    model, vision = started.result()
    return model, vision, thread


def _projector_image_side(path: str) -> int | None:
    """Refuse a file that is no projector before libmtmd sees it; return its tile side."""
    info = read_gguf_info(path)
    if info.architecture != "clip":
        raise ModelLoadError(
            path, f"not a multimodal projector (its architecture is {info.architecture!r})"
        )
    side = info.metadata.get("clip.vision.image_size")
    return side if isinstance(side, int) and not isinstance(side, bool) and side > 0 else None


def _stop_worker(inbox: Inbox, thread: threading.Thread) -> None:
    inbox.close()
    if thread is not threading.current_thread():
        thread.join()


class Engine:
    """A loaded GGUF model served by one worker thread with continuous batching.

    Example::

        with Engine(EngineConfig(model="smollm2-135m")) as engine:
            request = ChatRequest(messages=[ChatMessage(role="user", content="Hi")], max_tokens=32)
            for chunk in engine.stream(request):
                print(chunk.text, end="")

    Everything here is safe to call from any thread and from asyncio (the ``a``-methods never
    block the event loop). Use ``shared_engine`` (the registry) to share one engine, and so one
    copy of the weights, between adapters.
    """

    def __init__(self, config: EngineConfig | None = None, /, **overrides: Any) -> None:
        config = replace(config or EngineConfig(), **overrides).resolved()
        assert config.model is not None
        path = Path(config.model)
        gguf = read_gguf_info(path)  # refuses bad files before llama.cpp can abort on them
        tile = None if config.mmproj is None else _projector_image_side(config.mmproj)
        self.config = config
        n_ctx_train = gguf.context_length or 4096
        self.n_ctx_per_seq = config.n_ctx_per_seq or min(n_ctx_train, 4096)
        self._inbox = Inbox(config.max_queued)
        self._model, self._vision, self._thread = _start_worker(
            self.config, gguf, self._inbox, self.n_ctx_per_seq
        )
        self._finalizer = weakref.finalize(self, _stop_worker, self._inbox, self._thread)
        template_source = config.chat_template or self._model.chat_template
        self._bos_text = self._model.token_text(self._model.bos_token_id)
        eos_text = self._model.token_text(self._model.eos_token_id)
        self._template = (
            ChatTemplate(template_source, bos_token=self._bos_text, eos_token=eos_text)
            if template_source
            else None
        )
        self._eos_text = eos_text
        self._templates: dict[str, ChatTemplate] = {}
        self.info = ModelInfo(
            path=str(path),
            name=gguf.name,
            architecture=gguf.architecture,
            description=self._model.description,
            n_ctx_train=self._model.n_ctx_train,
            n_ctx_per_seq=self.n_ctx_per_seq,
            n_embd=self._model.n_embd,
            n_vocab=self._model.n_vocab,
            n_params=self._model.n_params,
            size_bytes=self._model.size_bytes,
            chat_template=template_source,
            mmproj=config.mmproj,
            # Projectors tile or downscale big images themselves; past a few tiles per side
            # more pixels only cost preprocessing time.
            image_max_side=None if tile is None else max(4 * tile, 1024),
        )

    # ---- lifecycle ------------------------------------------------------------------------

    @property
    def closed(self) -> bool:
        return self._inbox.closed or not self._thread.is_alive()

    def close(self) -> None:
        """Stop the worker, fail what is still running with ``EngineClosedError``, free memory."""
        self._finalizer()

    def __enter__(self) -> Engine:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _alive(self) -> bool:
        return self._thread.is_alive()

    # ---- tokens and templates -------------------------------------------------------------

    def tokenize(
        self, text: str, *, add_special: bool = False, parse_special: bool = False
    ) -> list[int]:
        """Token ids of ``text`` with the model's own tokenizer."""
        return self._model.tokenize(text, add_special=add_special, parse_special=parse_special)

    def detokenize(self, tokens: Sequence[int], *, special: bool = False) -> str:
        return self._model.detokenize(tokens, special=special)

    @property
    def media_marker(self) -> str | None:
        """Where an image goes in a ``CompletionRequest`` prompt (``None`` without projector)."""
        return None if self._vision is None else self._vision.marker

    def render_chat(self, request: ChatRequest) -> str:
        """The prompt text a chat request becomes (its template applied).

        Images appear as ``media_marker``, where libmtmd will put the model's image tokens.
        """
        return self._render_chat(request)[0]

    def _render_chat(self, request: ChatRequest) -> tuple[str, list[ImageInput]]:
        template = self._template_for(request)
        messages = messages_to_dicts(request.messages)
        if not messages:
            raise InvalidRequestError(
                "a chat needs at least one message", request_id=request.request_id
            )
        marker = self._require_vision(request).marker if has_images(request) else None
        messages, images = flatten_parts(messages, marker)
        text = template.render(
            messages,
            add_generation_prompt=request.add_generation_prompt,
            tools=list(request.tools) if request.tools is not None else None,
            **dict(request.template_kwargs),
        )
        text = strip_leading_bos(text, self._bos_text) if self._model.adds_bos else text
        return text, images

    def _require_vision(self, request: GenerationRequest) -> VisionProjector:
        if self._vision is None:
            raise ImageInputNotSupportedError(
                f"model {self.info.name or self.info.path!r} was loaded without an image "
                "projector: pass mmproj= (the model's mmproj GGUF) to accept images",
                request_id=request.request_id,
            )
        return self._vision

    def _template_for(self, request: ChatRequest) -> ChatTemplate:
        if request.chat_template is not None:
            template = self._templates.get(request.chat_template)
            if template is None:
                template = ChatTemplate(
                    request.chat_template, bos_token=self._bos_text, eos_token=self._eos_text
                )
                self._templates[request.chat_template] = template
            return template
        if self._template is None:
            raise ChatTemplateError(
                f"model {self.info.name or self.info.path!r} has no chat template: pass "
                "chat_template= (engine or request) or use a CompletionRequest for raw text",
                request_id=request.request_id,
            )
        return self._template

    def prompt_tokens(self, request: ChatRequest | CompletionRequest) -> list[int]:
        """The prompt a request is evaluated as, in tokens.

        Each position an image takes holds a negative number naming the image.
        """
        tokens, media = self._tokenize_prompt(request)
        if media is not None:
            media.close()
        return tokens

    def count_prompt_tokens(self, request: ChatRequest | CompletionRequest) -> int:
        """How many tokens the prompt counts as in ``Usage.prompt_tokens``: its text tokens plus
        its images' embeddings (which M-RoPE models place on fewer positions)."""
        tokens, media = self._tokenize_prompt(request)
        if media is None:
            return len(tokens)
        media.close()
        return media.n_tokens

    def _tokenize_prompt(
        self, request: ChatRequest | CompletionRequest
    ) -> tuple[list[int], MediaPrompt | None]:
        if has_images(request):
            return self._tokenize_media(request)
        if isinstance(request, ChatRequest):
            text, _ = self._render_chat(request)
            return self._model.tokenize(text, add_special=True, parse_special=True), None
        if isinstance(request.prompt, str):
            return self._model.tokenize(
                request.prompt, add_special=request.add_bos, parse_special=True
            ), None
        tokens = list(request.prompt)
        bad = [t for t in tokens if not isinstance(t, int) or not 0 <= t < self._model.n_vocab]
        if bad:
            raise InvalidRequestError(
                f"prompt token ids outside the vocabulary: {bad[:5]}", request_id=request.request_id
            )
        return tokens, None

    def _tokenize_media(
        self, request: ChatRequest | CompletionRequest
    ) -> tuple[list[int], MediaPrompt]:
        vision = self._require_vision(request)
        if isinstance(request, ChatRequest):
            text, images = self._render_chat(request)
            add_special = True
        elif isinstance(request.prompt, str):
            text, add_special = request.prompt, request.add_bos
            images = [as_image_input(image, "images[]") for image in request.images]
        else:
            raise InvalidRequestError(
                "images need a text prompt that places them with media_marker, not token ids",
                request_id=request.request_id,
            )
        media = vision.tokenize(
            text, images, add_special=add_special, request_id=request.request_id
        )
        if media.positions and media.positions[-1] < 0:
            media.close()
            raise InvalidRequestError(
                "the prompt ends with an image: text must follow it (the model reads the "
                "answer's first token off the last text token)",
                request_id=request.request_id,
            )
        return list(media.positions), media

    # ---- generation -----------------------------------------------------------------------

    def _prepare(self, request: GenerationRequest, channel: EventChannel) -> PreparedRequest:
        if self.closed:
            raise EngineClosedError("the engine is closed", request_id=request.request_id)
        if not isinstance(request, ChatRequest | CompletionRequest):
            raise InvalidRequestError(f"unsupported request type {type(request).__name__}")
        request.validate_common(self._model.n_vocab)
        tokens, media = self._tokenize_prompt(request)
        if not tokens:
            raise InvalidRequestError("the prompt is empty", request_id=request.request_id)
        # KV cells, not positions: M-RoPE images take fewer positions than embeddings.
        n_prompt = len(tokens) if media is None else media.n_tokens
        n_ctx = self.n_ctx_per_seq
        if n_prompt >= n_ctx or (request.max_tokens and n_prompt + request.max_tokens > n_ctx):
            if media is not None:
                media.close()
            raise ContextOverflowError(
                f"the prompt has {n_prompt} tokens and {request.max_tokens or 1} more were asked "
                f"for, but one sequence holds {n_ctx} (raise n_ctx_per_seq or shorten the prompt)",
                n_prompt_tokens=n_prompt,
                n_ctx=n_ctx,
                request_id=request.request_id,
            )
        now = time.monotonic()
        return PreparedRequest(
            request_id=request.request_id,
            prompt_tokens=tuple(tokens),
            media=media,
            sampling=request.sampling,
            max_new_tokens=request.max_tokens or n_ctx - n_prompt,
            stop=tuple(request.stop),
            grammar=request.grammar,
            ignore_eos=request.ignore_eos,
            special=request.special,
            logprobs=request.logprobs,
            submitted_at=now,
            deadline=None if request.timeout is None else now + request.timeout,
            channel=channel,
            sampler=SamplerChain(
                self._model,
                request.sampling,
                grammar=request.grammar,
                grammar_triggers=request.grammar_triggers,
                request_id=request.request_id,
            ),
        )

    def _handle(self, prepared: PreparedRequest, channel: EventChannel) -> RequestHandle:
        return RequestHandle(
            prepared.request_id,
            channel,
            self._inbox.cancel,
            self._alive,
            logprobs=prepared.logprobs is not None,
        )

    def submit(
        self, request: GenerationRequest, *, queue_timeout: float | None = 0.0
    ) -> RequestHandle:
        """Queue a request; iterate the handle (in a thread) for its chunks.

        When ``max_queued`` requests already wait, wait up to ``queue_timeout`` seconds (``None``:
        as long as it takes) for room, then raise ``EngineOverloadedError``.
        """
        channel = EventChannel()
        prepared = self._prepare(request, channel)
        self._inbox.put(prepared, wait=queue_timeout)
        return self._handle(prepared, channel)

    async def asubmit(
        self, request: GenerationRequest, *, queue_timeout: float | None = 0.0
    ) -> RequestHandle:
        """Like ``submit`` for asyncio; the handle is read with ``async for``."""
        channel = EventChannel(asyncio.get_running_loop())
        if has_images(request):  # preprocessing pixels takes a while: not on the loop
            prepared = await asyncio.to_thread(self._prepare, request, channel)
        else:
            prepared = self._prepare(request, channel)
        await self._aput(prepared, queue_timeout)
        return self._handle(prepared, channel)

    async def _aput(self, work: PreparedRequest | EmbedJob, queue_timeout: float | None) -> None:
        # Waiting for room must not block the loop: poll instead of blocking in put().
        deadline = None if queue_timeout is None else time.monotonic() + queue_timeout
        while not self._inbox.try_put(work):
            if deadline is not None and time.monotonic() >= deadline:
                self._inbox.put(work, wait=0)  # raises EngineOverloadedError
            await asyncio.sleep(0.01)

    def generate(self, request: GenerationRequest) -> Completion:
        """Run a request to the end. Raises the request's typed error if it fails."""
        return self.submit(request).result()

    def stream(self, request: GenerationRequest) -> Iterator[StreamChunk]:
        """Chunks as they are produced; leaving the loop early cancels the request."""
        yield from self.submit(request)

    async def agenerate(self, request: GenerationRequest) -> Completion:
        handle = await self.asubmit(request)
        try:
            return await handle.aresult()
        finally:
            handle.cancel()  # reached early only when the awaiting task was cancelled

    async def astream(self, request: GenerationRequest) -> AsyncIterator[StreamChunk]:
        handle = await self.asubmit(request)
        async for chunk in handle:
            yield chunk

    # ---- embeddings -----------------------------------------------------------------------

    def _embed_job(
        self,
        texts: Sequence[str],
        channel: EventChannel,
        *,
        normalize: bool,
        truncate: bool,
        timeout: float | None,
    ) -> EmbedJob:
        request_id = new_request_id()
        if self.closed:
            raise EngineClosedError("the engine is closed", request_id=request_id)
        if isinstance(texts, str) or not all(isinstance(t, str) for t in texts):
            raise InvalidRequestError("texts must be a list of strings", request_id=request_id)
        if not texts:
            raise InvalidRequestError("texts is empty: nothing to embed", request_id=request_id)
        limit = self.config.embedding_n_ctx
        token_lists: list[list[int]] = []
        for index, text in enumerate(texts):
            tokens = self._model.tokenize(text, add_special=True, parse_special=False)
            if not tokens:
                tokens = [self._model.bos_token_id]  # an empty text still gets a vector
            if len(tokens) > limit:
                if not truncate:
                    raise ContextOverflowError(
                        f"text {index} has {len(tokens)} tokens; embeddings take at most {limit} "
                        "(pass truncate=True or raise embedding_n_ctx)",
                        n_prompt_tokens=len(tokens),
                        n_ctx=limit,
                        request_id=request_id,
                    )
                tokens = tokens[:limit]
            token_lists.append(tokens)
        now = time.monotonic()
        return EmbedJob(
            request_id=request_id,
            token_lists=token_lists,
            normalize=normalize,
            submitted_at=now,
            deadline=None if timeout is None else now + timeout,
            channel=channel,
        )

    def embed(
        self,
        texts: Sequence[str],
        *,
        normalize: bool = True,
        truncate: bool = False,
        timeout: float | None = None,
    ) -> list[list[float]]:
        """One vector (plain floats) per text, batched with other callers' texts.

        Texts longer than ``embedding_n_ctx`` tokens raise ``ContextOverflowError`` unless
        ``truncate`` is on. When ``max_queued`` requests already wait, this waits for room, up
        to ``timeout`` seconds if given, then raises ``EngineOverloadedError``.
        """
        channel = EventChannel()
        job = self._embed_job(
            texts, channel, normalize=normalize, truncate=truncate, timeout=timeout
        )
        self._inbox.put(job, wait=timeout)
        return _vectors(channel.get(self._alive))

    async def aembed(
        self,
        texts: Sequence[str],
        *,
        normalize: bool = True,
        truncate: bool = False,
        timeout: float | None = None,
    ) -> list[list[float]]:
        channel = EventChannel(asyncio.get_running_loop())
        job = self._embed_job(
            texts, channel, normalize=normalize, truncate=truncate, timeout=timeout
        )
        await self._aput(job, timeout)
        try:
            return _vectors(await channel.aget(self._alive))
        except asyncio.CancelledError:
            self._inbox.cancel(job.request_id)
            raise

    # ---- introspection --------------------------------------------------------------------

    def run_on_worker(self, fn: Callable[[EngineCore], T], timeout: float | None = 60) -> T:
        """Run ``fn(core)`` on the worker thread between steps (tests and diagnostics)."""
        future: concurrent.futures.Future[T] = concurrent.futures.Future()

        def call(core: EngineCore) -> None:
            try:
                future.set_result(fn(core))
            except BaseException as error:
                future.set_exception(error)

        self._inbox.call(call)
        return future.result(timeout)

    def stats(self) -> EngineStats:
        """Running and waiting requests and every slot's cache, read on the worker."""

        def snapshot(core: EngineCore) -> EngineStats:
            slots = []
            for slot in core.scheduler.slots:
                lo, hi = core.context.pos_range(slot.seq_id)
                slots.append(
                    SlotStats(
                        slot.seq_id, slot.busy, len(slot.cached), 0 if hi < 0 else hi - lo + 1
                    )
                )
            return EngineStats(
                running=len(core.active),
                waiting=self._inbox.n_waiting,
                steps=core.steps,
                slots=tuple(slots),
            )

        return self.run_on_worker(snapshot)


def _vectors(event: object) -> list[list[float]]:
    if isinstance(event, BaseException):
        raise event
    assert isinstance(event, list)
    return event
