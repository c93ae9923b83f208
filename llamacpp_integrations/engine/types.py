"""Framework-neutral request and response types of the engine.

Adapters translate LangChain / LlamaIndex objects into these and back; nothing here knows about
either framework or about llama.cpp.
"""

from __future__ import annotations

import math
import re
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from ..errors import InvalidRequestError
from .reasoning import ReasoningSpec

__all__ = [
    "ChatMessage",
    "ChatRequest",
    "Completion",
    "CompletionRequest",
    "EngineStats",
    "FinishReason",
    "GenerationRequest",
    "ImageInput",
    "ModelInfo",
    "SamplingParams",
    "SlotStats",
    "StreamChunk",
    "Timings",
    "TokenLogprob",
    "TopLogprob",
    "Usage",
]

MAX_TOP_LOGPROBS = 20

FinishReason = Literal["stop", "length", "cancelled", "error"]


def new_request_id() -> str:
    return f"req-{uuid.uuid4().hex[:16]}"


@dataclass(frozen=True, kw_only=True)
class SamplingParams:
    """How the next token is picked. ``temperature <= 0`` means greedy (and ignores the rest).

    Attributes:
        temperature: Sampling temperature; ``0`` picks the most likely token every time.
        top_k: Keep the ``top_k`` most likely tokens (``0`` disables it).
        top_p: Keep the most likely tokens whose probabilities add up to ``top_p``.
        min_p: Drop tokens less likely than ``min_p`` times the most likely one.
        repeat_penalty: Divide the logits of recently generated tokens by this (``1``: off).
        presence_penalty: Subtract this from the logits of tokens generated recently.
        frequency_penalty: Subtract this times their count from recent tokens' logits.
        penalty_last_n: How many recent tokens the penalties look at (``-1``: the context).
        logit_bias: Added to the logits of these token ids (``-inf`` bans a token).
        seed: Seed of the sampler's random numbers (``None``: a random seed).
        allow_speculation: Let the engine speculate for this request when it is configured to
            (``EngineConfig.speculative``); ``False`` opts this request out. The output is the
            same either way (see ``engine/speculative.py``); only the speed differs.
    """

    temperature: float = 0.8
    top_k: int = 40
    top_p: float = 0.95
    min_p: float = 0.05
    repeat_penalty: float = 1.0
    presence_penalty: float = 0.0
    frequency_penalty: float = 0.0
    penalty_last_n: int = 64
    logit_bias: Mapping[int, float] | None = None
    seed: int | None = None
    allow_speculation: bool = True

    @property
    def greedy(self) -> bool:
        return self.temperature <= 0.0

    def validate(self, n_vocab: int, request_id: str | None = None) -> None:
        """Raise ``InvalidRequestError`` naming every out-of-range value."""
        problems: list[str] = []
        floats = {
            "temperature": self.temperature,
            "top_p": self.top_p,
            "min_p": self.min_p,
            "repeat_penalty": self.repeat_penalty,
            "presence_penalty": self.presence_penalty,
            "frequency_penalty": self.frequency_penalty,
        }
        problems += [
            f"{k} is not a finite number" for k, v in floats.items() if not math.isfinite(v)
        ]
        if self.temperature < 0:
            problems.append("temperature must be >= 0")
        if self.top_k < 0:
            problems.append("top_k must be >= 0 (0 disables it)")
        if not 0.0 < self.top_p <= 1.0:
            problems.append("top_p must be in (0, 1]")
        if not 0.0 <= self.min_p <= 1.0:
            problems.append("min_p must be in [0, 1]")
        if self.repeat_penalty <= 0:
            problems.append("repeat_penalty must be > 0")
        if self.penalty_last_n < -1:
            problems.append("penalty_last_n must be >= -1")
        if self.seed is not None and not 0 <= self.seed < 2**32:
            problems.append("seed must be in [0, 2**32)")
        for token, bias in (self.logit_bias or {}).items():
            if not isinstance(token, int) or not 0 <= token < n_vocab:
                problems.append(f"logit_bias token {token!r} is not in the vocabulary")
            elif math.isnan(bias):
                problems.append(f"logit_bias for token {token} is NaN")
        if problems:
            raise InvalidRequestError("; ".join(problems), request_id=request_id)


@dataclass(frozen=True)
class ImageInput:
    """Decoded pixels of one image: ``width`` x ``height`` RGB888, rows top to bottom.

    Build it with ``llamacpp_integrations.multimodal.load_image`` (which checks and decodes
    untrusted sources) or directly from pixels you trust. In a chat it goes in a content part
    ``{"type": "image", "image": ImageInput(...)}``.
    """

    width: int
    height: int
    rgb: bytes = field(repr=False)

    def __post_init__(self) -> None:
        if not (isinstance(self.width, int) and isinstance(self.height, int)):
            raise InvalidRequestError("image width and height must be integers")
        if self.width < 1 or self.height < 1:
            raise InvalidRequestError(f"image is {self.width}x{self.height}: it must not be empty")
        if not isinstance(self.rgb, bytes) or len(self.rgb) != self.width * self.height * 3:
            raise InvalidRequestError(
                f"a {self.width}x{self.height} RGB image needs {self.width * self.height * 3} "
                f"bytes of pixels"
            )


@dataclass(frozen=True, kw_only=True)
class ChatMessage:
    """One chat turn, in the shape GGUF chat templates expect.

    ``content`` is a string or a list of content parts (``{"type": "text", "text": ...}``,
    ``{"type": "image", "image": ImageInput}``; images need an engine with a projector).
    ``tool_calls`` are OpenAI-style dicts; ``tool_call_id`` links a tool result to its call.
    ``reasoning`` is an earlier answer's reasoning, given to templates that render it as
    ``reasoning_content`` (the field reasoning models' templates read).
    """

    role: str
    content: str | Sequence[Mapping[str, Any]] = ""
    name: str | None = None
    tool_calls: Sequence[Mapping[str, Any]] | None = None
    tool_call_id: str | None = None
    reasoning: str | None = None

    def to_template_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"role": self.role, "content": self.content}
        if self.name is not None:
            out["name"] = self.name
        if self.tool_calls:
            out["tool_calls"] = [dict(call) for call in self.tool_calls]
        if self.tool_call_id is not None:
            out["tool_call_id"] = self.tool_call_id
        if self.reasoning is not None:
            out["reasoning_content"] = self.reasoning
        return out


@dataclass(frozen=True, kw_only=True)
class GenerationRequest:
    """What every generation request has, whatever its prompt.

    Attributes:
        sampling: Sampler settings.
        max_tokens: Most tokens to generate; ``None`` runs to the end of the sequence's context.
        stop: Strings that end generation; they are never part of the returned text.
        grammar: A GBNF grammar the output must follow (root rule ``root``).
        grammar_triggers: Regular expressions (ECMAScript syntax, as llama.cpp's ``std::regex``)
            that make ``grammar`` lazy: output is free until one of them matches the text
            generated so far, then the grammar constrains everything from the match (from its
            first capture group, if it has one) on. A pattern written ``^...$`` must match the
            whole output so far; any other pattern may match anywhere in it.
        ignore_eos: Keep generating past end-of-generation tokens (benchmarks).
        timeout: Seconds from submission after which the request fails with a timeout.
        special: Render special tokens (control markers) into the text.
        logprobs: Per-token log-probabilities: ``None`` for none, ``0`` for the log-probability
            of each generated token, ``k`` (up to 20) for it and the ``k`` most likely tokens at
            each step. They come with every ``StreamChunk`` and in ``Completion.logprobs``; see
            ``TokenLogprob`` for what they measure.
        reasoning: A reasoning model's format (and budget): the output's reasoning is split
            from its text (``StreamChunk.reasoning``, ``Completion.reasoning``) and its tokens
            counted (``Usage.reasoning_tokens``); see ``ReasoningSpec``.
        request_id: Identifier carried by every event and error of this request.
    """

    sampling: SamplingParams = field(default_factory=SamplingParams)
    max_tokens: int | None = None
    stop: Sequence[str] = ()
    grammar: str | None = None
    grammar_triggers: Sequence[str] = ()
    ignore_eos: bool = False
    timeout: float | None = None
    special: bool = False
    logprobs: int | None = None
    reasoning: ReasoningSpec | None = None
    request_id: str = field(default_factory=new_request_id)

    def validate_common(self, n_vocab: int) -> None:
        self.sampling.validate(n_vocab, self.request_id)
        problems: list[str] = []
        if self.max_tokens is not None and self.max_tokens < 1:
            problems.append("max_tokens must be >= 1")
        if isinstance(self.stop, str):
            problems.append("stop must be a sequence of strings, not one string")
        elif any(not isinstance(s, str) or not s for s in self.stop):
            problems.append("stop strings must be non-empty strings")
        if self.timeout is not None and not self.timeout > 0:
            problems.append("timeout must be > 0 seconds")
        if self.logprobs is not None and (
            isinstance(self.logprobs, bool)
            or not isinstance(self.logprobs, int)
            or not 0 <= self.logprobs <= MAX_TOP_LOGPROBS
        ):
            problems.append(
                f"logprobs must be None or an integer from 0 to {MAX_TOP_LOGPROBS}, "
                f"not {self.logprobs!r}"
            )
        reasoning = self.reasoning
        if reasoning is not None and reasoning.budget is not None and reasoning.budget < 0:
            problems.append("the reasoning budget must be >= 0 tokens")
        if self.grammar is not None and not self.grammar.strip():
            problems.append("grammar is empty")
        if isinstance(self.grammar_triggers, str):
            problems.append("grammar_triggers must be a sequence of patterns, not one string")
        elif self.grammar_triggers:
            if self.grammar is None:
                problems.append("grammar_triggers need a grammar")
            problems += [
                f"grammar trigger {pattern!r} is not a valid regular expression"
                for pattern in self.grammar_triggers
                if not _is_regex(pattern)
            ]
        if problems:
            raise InvalidRequestError("; ".join(problems), request_id=self.request_id)


def _is_regex(pattern: object) -> bool:
    # Python's re is close enough to ECMAScript for the patterns people write here; checking
    # up front turns what would be a C++ exception inside llama.cpp into a clear error.
    if not isinstance(pattern, str) or not pattern:
        return False
    # Constructs Python has and C++'s ECMAScript regex lacks (it would throw inside llama.cpp).
    if any(construct in pattern for construct in ("(?P", "(?<", "\\A", "\\Z", "(?#")):
        return False
    try:
        re.compile(pattern)
    except re.error:
        return False
    return True


@dataclass(frozen=True, kw_only=True)
class ChatRequest(GenerationRequest):
    """A chat: messages rendered with the model's chat template (or ``chat_template``).

    ``tools`` and ``template_kwargs`` are passed to the template as variables.
    """

    messages: Sequence[ChatMessage | Mapping[str, Any]]
    chat_template: str | None = None
    add_generation_prompt: bool = True
    tools: Sequence[Mapping[str, Any]] | None = None
    template_kwargs: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True, kw_only=True)
class CompletionRequest(GenerationRequest):
    """Raw completion of a text (or of token ids) with no chat template.

    ``images`` go where the prompt text holds ``Engine.media_marker``, one marker per image in
    order; text must follow the last image.
    """

    prompt: str | Sequence[int]
    add_bos: bool = True
    images: Sequence[ImageInput] = ()


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
    set), kept out of ``text``.
    """

    request_id: str
    text: str
    token_ids: tuple[int, ...] = ()
    finish_reason: FinishReason | None = None
    usage: Usage | None = None
    timings: Timings | None = None
    logprobs: tuple[TokenLogprob, ...] = ()
    reasoning: str = ""


@dataclass(frozen=True)
class Completion:
    """A finished answer. ``logprobs`` (one per token of ``token_ids``) only when asked for;
    ``reasoning``: a reasoning model's thinking, kept out of ``text``."""

    request_id: str
    text: str
    token_ids: tuple[int, ...]
    finish_reason: FinishReason
    usage: Usage
    timings: Timings
    logprobs: tuple[TokenLogprob, ...] | None = None
    reasoning: str = ""


@dataclass(frozen=True)
class ModelInfo:
    """What a served model is, from its GGUF header and from llama.cpp.

    ``n_ctx_per_seq`` is the context one request runs in (prompt plus answer), and
    ``context_reason`` why it is that (set explicitly, the training context, reduced to fit the
    KV memory budget); ``n_gpu_layers`` the layers offloaded (``-1``: all); ``image_max_side``
    is the side images are downscaled to before they reach the projector.
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

    @property
    def supports_images(self) -> bool:
        """Whether requests may carry images (a projector is loaded)."""
        return self.mmproj is not None

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
    steps so far, every slot's cache, and the speculative drafts verified and accepted so far
    (see ``EngineConfig.speculative``)."""

    running: int
    waiting: int
    steps: int
    slots: tuple[SlotStats, ...]
    drafted_tokens: int = 0  # speculative drafts verified so far
    accepted_tokens: int = 0  # of which accepted
