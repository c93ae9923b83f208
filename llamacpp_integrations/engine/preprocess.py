"""Input processing: requests become work the worker can run, before they reach its queue.

Here a chat is rendered with its template, a prompt is tokenized (with libmtmd when it holds
images), the request is checked against the sequence's context, and its sampler is built. It
runs on the caller's side, off the worker (for asyncio callers, on a thread, so the event loop
never does this CPU work). Compiled templates of per-request ``chat_template`` s are kept in a
small LRU cache: a server passing arbitrary templates must not grow memory without bound.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass, replace

from ..errors import (
    AudioInputNotSupportedError,
    ContextOverflowError,
    ImageInputNotSupportedError,
    InvalidRequestError,
)
from ..prompts.chat_rendering import ChatTemplates
from ..prompts.media import AudioInput, MediaInput, messages_have_audio, require_image
from ..prompts.reasoning import ReasoningSpec, forced_end
from ..prompts.token_budget import fit_tokens
from .channel import EventChannel
from .embedding.job import EmbedJob
from .interface import PromptRequest
from .native.sampler import SamplerChain
from .native.vision import MediaPrompt, VisionProjector
from .native.weights import LoadedModel
from .types import ChatRequest, CompletionRequest, GenerationRequest, new_request_id
from .worker.requests import ForcedText, PreparedRequest

__all__ = ["Preprocessor", "PromptLimits"]

_RERANK_OVERFLOW = {"taker": "the reranker takes", "hint": "pass truncate=True or shorten them"}


@dataclass(frozen=True)
class PromptLimits:
    """The sizes a request is checked against."""

    n_ctx_per_seq: int
    embedding_n_ctx: int


class Preprocessor:
    """Renders, tokenizes, validates and prepares one engine's requests (thread-safe)."""

    def __init__(
        self,
        model: LoadedModel,
        vision: VisionProjector | None,
        template_source: str | None,
        limits: PromptLimits,
        *,
        model_label: str,
    ) -> None:
        self._model = model
        self._vision = vision
        self._limits = limits
        self._label = model_label
        self._bos_text = model.token_text(model.bos_token_id)
        self._eos_text = model.token_text(model.eos_token_id)
        self._templates = ChatTemplates(
            template_source,
            bos_token=self._bos_text,
            eos_token=self._eos_text,
            adds_bos=model.adds_bos,
            owner=f"model {model_label!r}",
        )

    # ---- templates -------------------------------------------------------------------------

    def render(self, request: ChatRequest) -> tuple[str, list[MediaInput]]:
        """The prompt text (media as the projector's marker) and the images and clips in order."""
        marker = self._require_vision(request).marker if request.has_images() else None
        return self._templates.render(request, marker=marker)

    def _require_vision(self, request: GenerationRequest) -> VisionProjector:
        if self._vision is None or (self._vision.audio_sample_rate is None and _has_audio(request)):
            if _has_audio(request):
                raise AudioInputNotSupportedError(
                    f"model {self._label!r} was loaded without an audio projector: pass "
                    "mmproj= (an mmproj GGUF with an audio encoder) to accept audio",
                    request_id=request.request_id,
                )
            raise ImageInputNotSupportedError(
                f"model {self._label!r} was loaded without an image projector: pass mmproj= "
                "(the model's mmproj GGUF) to accept images",
                request_id=request.request_id,
            )
        return self._vision

    # ---- tokens ----------------------------------------------------------------------------

    def tokenize_prompt(self, request: PromptRequest) -> tuple[list[int], MediaPrompt | None]:
        """The prompt in positions (image positions hold negative image keys), and its
        images' chunks when it has any (the caller closes them)."""
        if request.has_images():
            return self._tokenize_media(request)
        if isinstance(request, ChatRequest):
            text, _ = self.render(request)
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

    def _tokenize_media(self, request: PromptRequest) -> tuple[list[int], MediaPrompt]:
        vision = self._require_vision(request)
        if isinstance(request, ChatRequest):
            text, images = self.render(request)
            add_special = True
        elif isinstance(request.prompt, str):
            text, add_special = request.prompt, request.add_bos
            images = [
                item if isinstance(item, AudioInput) else require_image(item, "images[]")
                for item in request.images
            ]
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

    def count_prompt_tokens(self, request: PromptRequest) -> int:
        """Text tokens plus image embeddings (which M-RoPE models place on fewer positions)."""
        tokens, media = self.tokenize_prompt(request)
        if media is None:
            return len(tokens)
        media.close()
        return media.n_tokens

    # ---- work items ------------------------------------------------------------------------

    def prepare(self, request: GenerationRequest, channel: EventChannel) -> PreparedRequest:
        """A validated, tokenized request with its sampler, ready for the queue."""
        if not isinstance(request, ChatRequest | CompletionRequest):
            raise InvalidRequestError(f"unsupported request type {type(request).__name__}")
        request.validate_common(self._model.n_vocab)
        tokens, media = self.tokenize_prompt(request)
        try:
            return self._prepared(request, tokens, media, channel)
        except BaseException:
            if media is not None:
                media.close()
            raise

    def _prepared(
        self,
        request: ChatRequest | CompletionRequest,
        tokens: list[int],
        media: MediaPrompt | None,
        channel: EventChannel,
    ) -> PreparedRequest:
        if not tokens:
            raise InvalidRequestError("the prompt is empty", request_id=request.request_id)
        # KV cells, not positions: M-RoPE images take fewer positions than embeddings.
        n_prompt = len(tokens) if media is None else media.n_tokens
        n_ctx = self._limits.n_ctx_per_seq
        if n_prompt >= n_ctx or (request.max_tokens and n_prompt + request.max_tokens > n_ctx):
            raise ContextOverflowError(
                f"the prompt has {n_prompt} tokens and {request.max_tokens or 1} more were asked "
                f"for, but one sequence holds {n_ctx} (raise n_ctx_per_seq or shorten the prompt)",
                n_prompt_tokens=n_prompt,
                n_ctx=n_ctx,
                request_id=request.request_id,
            )
        sampler = SamplerChain(
            self._model,
            request.sampling,
            grammar=request.grammar,
            grammar_triggers=request.grammar_triggers,
            request_id=request.request_id,
        )
        spec = request.reasoning
        now = time.monotonic()
        return PreparedRequest(
            request_id=request.request_id,
            prompt_tokens=tuple(tokens),
            media=media,
            max_new_tokens=request.max_tokens or n_ctx - n_prompt,
            stop=tuple(request.stop),
            ignore_eos=request.ignore_eos,
            # Harmony's framing is control tokens: the reasoning is read from them.
            special=request.special or (spec is not None and spec.format.family == "gpt-oss"),
            logprobs=request.logprobs,
            speculative=request.sampling.allow_speculation,
            constrained=request.grammar is not None and not request.grammar_triggers,
            reasoning=spec,
            budget=self._budget(spec),
            submitted_at=now,
            deadline=None if request.timeout is None else now + request.timeout,
            channel=channel,
            sampler=sampler,
        )

    def _budget(self, spec: ReasoningSpec | None) -> ForcedText | None:
        if spec is None or spec.budget is None or not spec.expected:
            return None
        end = self._model.tokenize(forced_end(spec.format), add_special=False, parse_special=True)
        return ForcedText(after=spec.budget, tokens=tuple(end))

    def embed_job(
        self,
        texts: Sequence[str],
        channel: EventChannel,
        *,
        normalize: bool,
        truncate: bool,
        timeout: float | None,
        chunk: bool = False,
    ) -> EmbedJob:
        """Texts tokenized for the embedding context, each within its budget (or, with
        ``chunk``, cut into consecutive windows that are embedded apart and averaged)."""
        request_id = new_request_id()
        if isinstance(texts, str) or not all(isinstance(t, str) for t in texts):
            raise InvalidRequestError("texts must be a list of strings", request_id=request_id)
        if not texts:
            raise InvalidRequestError("texts is empty: nothing to embed", request_id=request_id)
        limit = self._limits.embedding_n_ctx
        token_lists: list[list[int]] = []
        chunks: list[int] = []
        for index, text in enumerate(texts):
            tokens = self._model.tokenize(text, add_special=True, parse_special=False)
            if not tokens:
                tokens = [self._model.bos_token_id]  # an empty text still gets a vector
            if chunk:
                windows = self._windows(text, tokens, limit)
                token_lists += windows
                chunks.append(len(windows))
                continue
            token_lists.append(
                fit_tokens(
                    tokens, limit, truncate=truncate, subject=f"text {index} has",
                    taker="embeddings take", hint="pass truncate=True or raise embedding_n_ctx",
                    request_id=request_id,
                )
            )  # fmt: skip
        job = self._embed_job(request_id, token_lists, channel, normalize, timeout)
        return replace(job, chunks=chunks) if chunk else job

    def _windows(self, text: str, tokens: list[int], limit: int) -> list[list[int]]:
        """``text`` as consecutive windows of at most ``limit`` tokens, each with the special
        tokens the model adds around a text (so every window reads as a text of its own)."""
        if len(tokens) <= limit:
            return [tokens]
        body = self._model.tokenize(text, add_special=False, parse_special=False)
        empty = self._model.tokenize("", add_special=True, parse_special=False)
        # Where the added tokens sit: those before the body, and those after it.
        n_head = 1 if self._model.adds_bos and self._model.bos_token_id >= 0 else 0
        head, tail = empty[:n_head], empty[n_head:]
        room = max(1, limit - len(head) - len(tail))
        return [head + body[i : i + room] + tail for i in range(0, len(body), room)]

    def rerank_job(
        self,
        query: str,
        documents: Sequence[str],
        channel: EventChannel,
        *,
        truncate: bool,
        timeout: float | None,
    ) -> EmbedJob:
        """One cross-encoder input per document: the query and the document as a sentence pair.

        The pair is laid out as llama.cpp's server does it for a model without a rerank
        template: BOS, query, EOS (or SEP), SEP, document, EOS, each only where the vocabulary
        adds it (so ``[CLS] q [SEP] d [SEP]`` for a BERT cross-encoder).
        """
        request_id = new_request_id()
        if not isinstance(query, str):
            raise InvalidRequestError("query must be a string", request_id=request_id)
        if isinstance(documents, str) or not all(isinstance(d, str) for d in documents):
            raise InvalidRequestError("documents must be a list of strings", request_id=request_id)
        if not documents:
            raise InvalidRequestError("documents is empty: nothing to rank", request_id=request_id)
        model = self._model
        if model.rerank_template is not None:
            return self._templated_rerank_job(
                request_id, query, documents, channel, truncate=truncate, timeout=timeout
            )
        end = model.eos_token_id if model.eos_token_id >= 0 else model.sep_token_id
        head = [model.bos_token_id] if model.adds_bos and model.bos_token_id >= 0 else []
        head += model.tokenize(query, add_special=False, parse_special=False)
        if model.adds_eos and end >= 0:
            head.append(end)
        if model.adds_sep and model.sep_token_id >= 0:
            head.append(model.sep_token_id)
        tail = [end] if model.adds_eos and end >= 0 else []
        limit = self._limits.embedding_n_ctx
        token_lists: list[list[int]] = []
        for index, document in enumerate(documents):
            body = model.tokenize(document, add_special=False, parse_special=False)
            tokens = head + body + tail
            room = limit - len(head) - len(tail)
            # Cut the document, never the query: with no room left for it, refuse.
            fit_tokens(
                tokens, limit, truncate=truncate and room > 0,
                subject=f"query and document {index} make", **_RERANK_OVERFLOW,
                request_id=request_id,
            )  # fmt: skip
            if len(tokens) > limit:
                tokens = head + body[:room] + tail
            token_lists.append(tokens)
        return self._embed_job(request_id, token_lists, channel, False, timeout)

    def _templated_rerank_job(
        self,
        request_id: str,
        query: str,
        documents: Sequence[str],
        channel: EventChannel,
        *,
        truncate: bool,
        timeout: float | None,
    ) -> EmbedJob:
        """Pairs laid out by the model's own rerank template (the head is kept on overflow)."""
        template = self._model.rerank_template
        assert template is not None
        limit = self._limits.embedding_n_ctx
        token_lists: list[list[int]] = []
        for index, document in enumerate(documents):
            text = template.replace("{query}", query).replace("{document}", document)
            tokens = self._model.tokenize(text, add_special=False, parse_special=True)
            token_lists.append(
                fit_tokens(
                    tokens, limit, truncate=truncate,
                    subject=f"query and document {index} make", **_RERANK_OVERFLOW,
                    request_id=request_id,
                )
            )  # fmt: skip
        return self._embed_job(request_id, token_lists, channel, False, timeout)

    def _embed_job(
        self,
        request_id: str,
        token_lists: list[list[int]],
        channel: EventChannel,
        normalize: bool,
        timeout: float | None,
    ) -> EmbedJob:
        now = time.monotonic()
        return EmbedJob(
            request_id=request_id,
            token_lists=token_lists,
            normalize=normalize,
            submitted_at=now,
            deadline=None if timeout is None else now + timeout,
            channel=channel,
        )


def _has_audio(request: GenerationRequest) -> bool:
    if isinstance(request, ChatRequest):
        return messages_have_audio(request.messages)
    if isinstance(request, CompletionRequest):
        return any(isinstance(item, AudioInput) for item in request.images)
    return False
