"""Framework-neutral result types of the engine: answers, their pieces, usage and timings, what a
model is, and the engine's statistics. Nothing here knows about a framework or llama.cpp."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from .machine import Placement

__all__ = [
    "Completion",
    "EngineStats",
    "FinishReason",
    "ModelInfo",
    "SlotStats",
    "StreamChunk",
    "Timings",
    "TokenLogprob",
    "TopLogprob",
    "Usage",
]

FinishReason = Literal["stop", "length", "cancelled", "error"]


@dataclass(frozen=True)
class Usage:
    """Token counts of one request.

    ``prompt_tokens`` counts every prompt token the model read, image embeddings included (
    ``prompt_image_tokens`` of them); ``cached_prompt_tokens`` were reused from the KV cache.
    ``reasoning_tokens`` are the completion tokens up to the one that ended a reasoning
    model's thinking (a request with ``reasoning`` set).
    """

    prompt_tokens: int
    completion_tokens: int
    cached_prompt_tokens: int = 0
    prompt_image_tokens: int = 0
    reasoning_tokens: int = 0

    @property
    def total_tokens(self) -> int:
        return self.prompt_tokens + self.completion_tokens


@dataclass(frozen=True)
class Timings:
    """Seconds spent by one request: waiting for a slot, to its first token, and overall."""

    queued_s: float
    time_to_first_token_s: float | None
    total_s: float
    prompt_eval_s: float
    generation_s: float


@dataclass(frozen=True)
class TopLogprob:
    """One of the most likely tokens at a step, with its log-probability."""

    token: str
    token_id: int
    logprob: float
    bytes: tuple[int, ...]


@dataclass(frozen=True)
class TokenLogprob:
    """The log-probability of one generated token, and the most likely tokens at its step.

    The probabilities are the model's own distribution: a softmax over the whole vocabulary of
    the raw logits, before logit bias, penalties, temperature, truncation (top-k, top-p, min-p)
    and grammar are applied. This is what llama.cpp's server reports for ``n_probs`` with
    ``post_sampling_probs`` off. So a token picked by a sampler at high temperature, or forced by
    a grammar, can have a low log-probability here, and the sampled token need not be ``top[0]``.

    Attributes:
        token: The token's text, decoded with ``errors="replace"`` (a token holding part of a
            UTF-8 character shows U+FFFD here; ``bytes`` has the exact bytes). Control tokens are
            rendered only when the request has ``special=True``, as in the answer's text.
        token_id: The token's id in the model's vocabulary.
        logprob: Natural logarithm of the token's probability (always <= 0).
        bytes: The raw bytes of the token's text.
        top: The ``logprobs`` most likely tokens at this step, most likely first (ties by token
            id); empty when the request asked for ``logprobs=0``.
    """

    token: str
    token_id: int
    logprob: float
    bytes: tuple[int, ...]
    top: tuple[TopLogprob, ...] = ()


@dataclass(frozen=True)
class StreamChunk:
    """One piece of a streamed answer. The last chunk has ``finish_reason`` and ``usage`` set.

    ``token_ids`` and ``logprobs`` hold the tokens sampled since the previous chunk. Their text is
    usually in ``text``, but it can show up in a later chunk (a UTF-8 character split over tokens,
    text held back as a possible stop string), and the text of the tokens that make up a stop
    string is never shown. Concatenated over all chunks they give one entry per generated token;
    a final end-of-generation token is not one. ``logprobs`` is empty unless the request asked.
    ``reasoning`` is the piece of a reasoning model's thinking (a request with ``reasoning``
    set), kept out of ``text``. ``stop_string`` (on the last chunk) is the one of the request's
    ``stop`` strings that ended the answer, ``None`` when none did.
    """

    request_id: str
    text: str
    token_ids: tuple[int, ...] = ()
    finish_reason: FinishReason | None = None
    usage: Usage | None = None
    timings: Timings | None = None
    logprobs: tuple[TokenLogprob, ...] = ()
    reasoning: str = ""
    stop_string: str | None = None


@dataclass(frozen=True)
class Completion:
    """A finished answer. ``logprobs`` (one per token of ``token_ids``) only when asked for;
    ``reasoning``: a reasoning model's thinking, kept out of ``text``; ``stop_string``: the
    request's stop string that ended it (``None``: none did)."""

    request_id: str
    text: str
    token_ids: tuple[int, ...]
    finish_reason: FinishReason
    usage: Usage
    timings: Timings
    logprobs: tuple[TokenLogprob, ...] | None = None
    reasoning: str = ""
    stop_string: str | None = None


@dataclass(frozen=True)
class ModelInfo:
    """What a served model is, from its GGUF header and from llama.cpp.

    ``n_ctx_per_seq`` is the context one request runs in (prompt plus answer), and
    ``context_reason`` why it is that (set explicitly, the training context, reduced to fit the
    KV memory budget); ``n_gpu_layers`` the layers offloaded (``-1``: all); ``image_max_side``
    is the side images are downscaled to before they reach the projector; ``vision_encoder``
    whether the projector reads images (``False``: an audio-only one) and ``audio_sample_rate``
    the rate it resamples audio to (``None``: it reads no audio); ``placement`` where
    the weights and the KV cache went (``None`` where the engine does not say, e.g. a remote
    one).
    """

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
    n_gpu_layers: int = 0
    context_reason: str = ""
    placement: Placement | None = None
    vision_encoder: bool = True
    audio_sample_rate: int | None = None

    @property
    def supports_images(self) -> bool:
        """Whether requests may carry images (a projector with an image encoder is loaded)."""
        return self.mmproj is not None and self.vision_encoder

    @property
    def supports_audio(self) -> bool:
        """Whether requests may carry audio (a projector with an audio encoder is loaded)."""
        return self.mmproj is not None and self.audio_sample_rate is not None

    @property
    def has_chat_template(self) -> bool:
        return self.chat_template is not None


@dataclass(frozen=True)
class SlotStats:
    """One sequence slot: whether a request holds it, and what its KV cells cache
    (``draft_kv_cells``: the cells of its mirror in a draft model's context, see
    ``EngineConfig.speculative``)."""

    seq_id: int
    busy: bool
    cached_tokens: int
    kv_cells: int
    draft_kv_cells: int = 0


@dataclass(frozen=True)
class EngineStats:
    """A snapshot the worker publishes between steps: requests running and waiting, decode
    steps so far, every slot's cache, the speculative drafts verified and accepted so far (see
    ``EngineConfig.speculative``), the prompt tokens requests took from the cells of others
    still reading the same prefix instead of reading them again, how many cells the KV
    cache has now (streams grow when a sequence needs more, see
    ``EngineConfig.kv_start_cells``), how many idle cached tokens were dropped to make
    room for running requests (in a unified cache, least recently used block first), and the
    CPU threads decodes run on now (fewer than ``n_threads`` resolved while other work keeps
    the cores busy, when ``n_threads`` is left to the engine)."""

    running: int
    waiting: int
    steps: int
    slots: tuple[SlotStats, ...]
    drafted_tokens: int = 0  # speculative drafts verified so far
    accepted_tokens: int = 0  # of which accepted
    shared_prompt_tokens: int = 0  # prompt tokens requests took from others' cells in flight
    kv_cells_allocated: int = 0  # the KV cache's cells now, over all sequences (0: not made)
    evicted_cached_tokens: int = 0  # idle cached tokens dropped for room, oldest blocks first
    decode_threads: int = 0  # CPU threads decodes run on now (0: not reported, a remote engine)
