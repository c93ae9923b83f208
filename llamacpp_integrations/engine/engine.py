"""The local engine's public face: submit work, read results, close.

``Engine`` implements ``InferenceEngine`` in this process. Its input processing
(``preprocess.py``) turns a request into a ``PreparedRequest``, which goes through the engine's
bounded inbox to its core on the model's worker thread (``worker/host.py``); the caller reads events
from a ``RequestHandle``. For asyncio callers the input processing runs on a thread and queue
waiting on a future, so the event loop does no CPU work and never blocks.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
import weakref
from collections.abc import AsyncGenerator, Generator, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

from ..errors import EngineClosedError, InvalidRequestError, ModelLoadError
from ..models import GGUFInfo, read_gguf_info
from .channel import EventChannel, RequestHandle
from .config import EngineConfig
from .embedding.job import EmbedJob
from .interface import PromptRequest
from .lora import LoraServing, LoraTable
from .native.devices import loaded_placement
from .native.embedder import POOLING_TYPES, RANK_POOLING
from .preprocess import Preprocessor, PromptLimits
from .results import Completion, EngineStats, ModelInfo, StreamChunk
from .sizing import context_for
from .types import ChatRequest, GenerationRequest
from .worker.host import Attachment, ModelHost, open_host
from .worker.inbox import Inbox
from .worker.requests import PreparedRequest

__all__ = ["Engine"]

log = logging.getLogger("llamacpp_integrations.engine")

_MEAN_POOLING = POOLING_TYPES["mean"]


def _embedding_only(gguf: GGUFInfo) -> bool:
    """Whether the GGUF is an encoder (BERT, nomic-bert...) or declares a pooling of its own:
    a model made to embed or rank, which is never asked to generate."""
    causal = gguf.metadata.get(f"{gguf.architecture}.attention.causal")
    return causal is False or gguf.pooling_type not in (None, 0)


def _projector_image_side(path: str) -> int | None:
    """Refuse a file that is no projector before libmtmd sees it; return its tile side."""
    info = read_gguf_info(path)
    if info.architecture != "clip":
        raise ModelLoadError(
            path, f"not a multimodal projector (its architecture is {info.architecture!r})"
        )
    side = info.metadata.get("clip.vision.image_size")
    return side if isinstance(side, int) and not isinstance(side, bool) and side > 0 else None


def _close(host: ModelHost, inbox: Inbox, attachment: Attachment) -> None:
    inbox.close()
    host.detach(attachment)
    host.release()


class Engine(LoraServing):
    """A GGUF model served in this process with continuous batching.

    Example::

        with Engine(EngineConfig(model="smollm2-135m")) as engine:
            request = ChatRequest(messages=[ChatMessage(role="user", content="Hi")], max_tokens=32)
            for chunk in engine.stream(request):
                print(chunk.text, end="")

    Everything here is safe to call from any thread and from asyncio (the ``a``-methods never
    block the event loop). Engines over the same weights share one loaded copy and one worker
    thread, whatever their serving settings; ``shared_engine`` (the registry) also shares one
    engine per configuration between adapters, so their requests are batched together.
    Each request chooses among the engine's LoRA adapters (``GenerationRequest.lora``).
    """

    def __init__(self, config: EngineConfig | None = None, /, **overrides: Any) -> None:
        config = replace(config or EngineConfig(), **overrides).resolved()
        assert config.model is not None
        gguf = read_gguf_info(config.model)  # refuses bad files before llama.cpp can abort
        if config.speculative_draft_model is not None:
            read_gguf_info(config.speculative_draft_model)
        tile = None if config.mmproj is None else _projector_image_side(config.mmproj)
        self.config = config
        self._loras = LoraTable(config.lora_adapters)
        pooling = POOLING_TYPES.get(config.embedding_pooling)
        if pooling is None:  # "model": the GGUF's own pooling, else mean
            pooling = gguf.pooling_type if gguf.pooling_type not in (None, 0) else _MEAN_POOLING
        self.pooling = pooling
        self.embedding_only = _embedding_only(gguf)
        host = open_host(config.weights)
        inbox = Inbox(config.max_queued, host.cond)
        try:
            free_memory, weights_there = host.kv_memory()
            self.context_choice = context_for(
                config, gguf, free_memory=free_memory, weights_there=weights_there
            )
            self.n_ctx_per_seq = self.context_choice.n_ctx_per_seq
            log.info("%s: %s", Path(config.model).name, self.context_choice.describe())
            attachment = host.attach(
                config, inbox, kv=self.context_choice, embedding_pooling=pooling
            )
        except BaseException:
            host.release()
            raise
        self._host, self._inbox, self._board = host, inbox, attachment.board
        self._finalizer = weakref.finalize(self, _close, host, inbox, attachment)
        try:
            self._describe(gguf, tile, attachment)
        except BaseException:
            self.close()
            raise

    def _describe(self, gguf: GGUFInfo, tile: int | None, attachment: Attachment) -> None:
        """``info`` and the input processing, from the loaded model and its projector."""
        config = self.config
        assert config.model is not None
        model, vision = self._host.model, attachment.vision
        template_source = config.chat_template or model.chat_template
        self.info = ModelInfo(
            path=config.model,
            name=gguf.name,
            architecture=gguf.architecture,
            description=model.description,
            n_ctx_train=model.n_ctx_train,
            n_ctx_per_seq=self.n_ctx_per_seq,
            n_embd=model.n_embd,
            n_vocab=model.n_vocab,
            n_params=model.n_params,
            size_bytes=model.size_bytes,
            chat_template=template_source,
            mmproj=config.mmproj,
            # Projectors tile or downscale big images: more tiles only cost preprocessing.
            image_max_side=None if tile is None else max(4 * tile, 1024),
            n_gpu_layers=model.n_gpu_layers,
            context_reason=self.context_choice.reason,
            placement=loaded_placement(config, gguf, self._host.offload, self.context_choice),
            vision_encoder=vision is None or vision.supports_vision,
            audio_sample_rate=None if vision is None else vision.audio_sample_rate,
        )
        self._model = model
        self._media_marker = None if vision is None else vision.marker
        self._prep = Preprocessor(
            model,
            vision,
            template_source,
            # Never past the trained context: BERT's position table has no row beyond it.
            PromptLimits(self.n_ctx_per_seq, min(config.embedding_n_ctx, model.n_ctx_train)),
            model_label=gguf.name or Path(config.model).name,
        )

    # ---- lifecycle ------------------------------------------------------------------------

    @property
    def closed(self) -> bool:
        """True once ``close`` ran or the worker stopped; every call then fails."""
        return self._inbox.closed or not self._host.alive()

    def close(self) -> None:
        """Fail what is still running with ``EngineClosedError`` and free this engine's
        contexts; the weights are freed with the last engine using them."""
        self._finalizer()

    def __enter__(self) -> Engine:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _check_open(self, request_id: str | None = None) -> None:
        if self.closed:
            raise EngineClosedError("the engine is closed", request_id=request_id)

    # ---- tokens and templates -------------------------------------------------------------

    def tokenize(
        self, text: str, *, add_special: bool = False, parse_special: bool = False
    ) -> list[int]:
        """Token ids of ``text`` with the model's own tokenizer."""
        return self._model.tokenize(text, add_special=add_special, parse_special=parse_special)

    def detokenize(self, tokens: Sequence[int], *, special: bool = False) -> str:
        """The text of ``tokens`` (control tokens shown only with ``special``)."""
        return self._model.detokenize(tokens, special=special)

    def token_piece(self, token: int, *, special: bool = True) -> bytes:
        """The bytes of one token, as the vocabulary holds them (maybe part of a character).

        Raises:
            InvalidRequestError: ``token`` is not in the vocabulary.
        """
        if not 0 <= token < self.info.n_vocab:
            raise InvalidRequestError(f"token {token} is not in the vocabulary")
        return self._model.token_to_piece(token, special=special)

    @property
    def media_marker(self) -> str | None:
        """Where an image goes in a ``CompletionRequest`` prompt (``None`` without projector)."""
        return self._media_marker

    def render_chat(self, request: ChatRequest) -> str:
        """The prompt text a chat request becomes (its template applied).

        Images appear as ``media_marker``, where libmtmd will put the model's image tokens.
        """
        return self._prep.render(request)[0]

    def prompt_tokens(self, request: PromptRequest) -> list[int]:
        """The prompt a request is evaluated as, in tokens.

        Each position an image takes holds a negative number naming the image.
        """
        tokens, media = self._prep.tokenize_prompt(request)
        if media is not None:
            media.close()
        return tokens

    def count_prompt_tokens(self, request: PromptRequest) -> int:
        """How many tokens the prompt counts as in ``Usage.prompt_tokens``: its text tokens plus
        its images' embeddings (which M-RoPE models place on fewer positions)."""
        return self._prep.count_prompt_tokens(request)

    # ---- generation -----------------------------------------------------------------------

    def _prepare(self, request: GenerationRequest, channel: EventChannel) -> PreparedRequest:
        self._check_open(request.request_id)
        if self.embedding_only:
            raise InvalidRequestError(
                f"{Path(self.info.path).name} is an embedding or reranking model "
                f"({self.info.architecture}); it does not generate text: load a chat model "
                "in a second engine beside it",
                request_id=request.request_id,
            )
        lora = self._loras.key(request.lora, request.request_id)
        return replace(self._prep.prepare(request, channel), lora=lora)

    def _handle(self, prepared: PreparedRequest) -> RequestHandle:
        return RequestHandle(
            prepared.request_id,
            prepared.channel,
            self._inbox.cancel,
            self._host.alive,
            logprobs=prepared.logprobs is not None,
        )

    def submit(
        self, request: GenerationRequest, *, queue_timeout: float | None = 0.0
    ) -> RequestHandle:
        """Queue a request; iterate the handle (in a thread) for its chunks.

        When ``max_queued`` requests already wait, wait up to ``queue_timeout`` seconds (``None``:
        as long as it takes) for room, then raise ``EngineOverloadedError``.
        """
        prepared = self._prepare(request, EventChannel())
        self._inbox.put(prepared, wait=queue_timeout)
        return self._handle(prepared)

    async def asubmit(
        self, request: GenerationRequest, *, queue_timeout: float | None = 0.0
    ) -> RequestHandle:
        """Like ``submit`` for asyncio; the handle is read with ``async for``."""
        prepared = await asyncio.to_thread(self._prepare, request, EventChannel.for_loop())
        await self._inbox.aput(prepared, wait=queue_timeout)
        return self._handle(prepared)

    def generate(self, request: GenerationRequest) -> Completion:
        """Run a request to the end. Raises the request's typed error if it fails."""
        return self.submit(request).result()

    def stream(self, request: GenerationRequest) -> Generator[StreamChunk, None, None]:
        """Chunks as they are produced; leaving the loop early cancels the request."""
        yield from self.submit(request)

    async def agenerate(self, request: GenerationRequest) -> Completion:
        """Async ``generate``; cancelling the awaiting task cancels the request."""
        handle = await self.asubmit(request)
        try:
            return await handle.aresult()
        finally:
            handle.cancel()  # reached early only when the awaiting task was cancelled

    async def astream(self, request: GenerationRequest) -> AsyncGenerator[StreamChunk, None]:
        """Async ``stream``; closing the generator or cancelling the task cancels the request."""
        handle = await self.asubmit(request)
        async for chunk in handle:
            yield chunk

    # ---- embeddings -----------------------------------------------------------------------

    def _embed_job(
        self,
        texts: Sequence[str],
        channel: EventChannel,
        normalize: bool,
        truncate: bool,
        timeout: float | None,
        chunk: bool = False,
    ) -> EmbedJob:
        self._check_open()
        return self._prep.embed_job(
            texts, channel, normalize=normalize, truncate=truncate, timeout=timeout, chunk=chunk
        )

    @property
    def chunks_long_texts(self) -> bool:
        """True: long texts may be averaged over windows (``embed(..., chunk=True)``)."""
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
        """One vector (plain floats) per text, batched with other callers' texts.

        Texts longer than ``embedding_n_ctx`` tokens (or the model's trained context) raise
        ``ContextOverflowError`` unless ``truncate`` keeps their head, or ``chunk`` cuts them
        into windows that fit, embeds each and averages them (weighted by their tokens). When
        ``max_queued`` requests already wait, this waits for room, up to ``timeout`` seconds if
        given, then raises ``EngineOverloadedError``.
        """
        job = self._embed_job(texts, EventChannel(), normalize, truncate, timeout, chunk)
        return self._run(job, timeout)

    async def aembed(
        self,
        texts: Sequence[str],
        *,
        normalize: bool = True,
        truncate: bool = False,
        timeout: float | None = None,
        chunk: bool = False,
    ) -> list[list[float]]:
        """Async ``embed``; tokenizing runs on a thread."""
        channel = EventChannel.for_loop()
        job = await asyncio.to_thread(
            self._embed_job, texts, channel, normalize, truncate, timeout, chunk
        )
        return await self._arun(job, timeout)

    def _run(self, job: EmbedJob, wait: float | None) -> list[list[float]]:
        """Queue an embedding job (waiting up to ``wait`` seconds for room); its vectors."""
        self._inbox.put(job, wait=wait)
        return _vectors(job.channel.get(self._host.alive))

    async def _arun(self, job: EmbedJob, wait: float | None) -> list[list[float]]:
        """Async ``_run``; cancelling the awaiting task cancels the job."""
        await self._inbox.aput(job, wait=wait)
        try:
            return _vectors(await job.channel.aget(self._host.alive))
        except asyncio.CancelledError:
            self._inbox.cancel(job.request_id)
            raise

    # ---- reranking --------------------------------------------------------------------------

    def _rerank_job(
        self,
        query: str,
        documents: Sequence[str],
        channel: EventChannel,
        truncate: bool,
        timeout: float | None,
    ) -> EmbedJob:
        self._check_open()
        if self.pooling != RANK_POOLING:
            raise InvalidRequestError(
                f"{Path(self.info.path).name} has no rank pooling, so it cannot rerank: load a "
                "cross-encoder (a reranker GGUF) or set embedding_pooling='rank' on a model "
                "with a classification head"
            )
        return self._prep.rerank_job(query, documents, channel, truncate=truncate, timeout=timeout)

    def rerank(
        self,
        query: str,
        documents: Sequence[str],
        *,
        truncate: bool = False,
        timeout: float | None = None,
    ) -> list[float]:
        """How relevant each document is to ``query``: one score per document, in order
        (higher is more relevant), from a cross-encoder's rank pooling.

        Pairs are batched into the embedding decodes like texts are, with other callers'
        work. A pair longer than ``embedding_n_ctx`` tokens raises ``ContextOverflowError``
        unless ``truncate`` cuts the document's end. Needs a model whose pooling is ``rank``.
        """
        job = self._rerank_job(query, documents, EventChannel(), truncate, timeout)
        return _scores(self._run(job, timeout))

    async def arerank(
        self,
        query: str,
        documents: Sequence[str],
        *,
        truncate: bool = False,
        timeout: float | None = None,
    ) -> list[float]:
        """Async ``rerank``; tokenizing runs on a thread."""
        channel = EventChannel.for_loop()
        job = await asyncio.to_thread(
            self._rerank_job, query, documents, channel, truncate, timeout
        )
        return _scores(await self._arun(job, timeout))

    # ---- introspection --------------------------------------------------------------------

    def stats(self) -> EngineStats:
        """Running and waiting requests and every slot's cache, as the worker last published
        them (after its latest step, and before any request's end is reported)."""
        return replace(self._board.latest, waiting=self._inbox.n_waiting)

    def clear_cache(self, timeout: float | None = 60) -> None:
        """Free the KV cells that idle sequences keep for prefix reuse (their next prompts are
        read in full); running requests keep theirs."""
        self._check_open()
        done: concurrent.futures.Future[None] = concurrent.futures.Future()

        def drop(core: Any) -> None:
            core.drop_idle_caches()
            done.set_result(None)

        self._inbox.call(drop)
        done.result(timeout)


def _vectors(event: object) -> list[list[float]]:
    if isinstance(event, BaseException):
        raise event
    assert isinstance(event, list)
    return event


def _scores(vectors: list[list[float]]) -> list[float]:
    """A rank pooling's scores: the one value of each pair's vector."""
    return [v[0] for v in vectors]
