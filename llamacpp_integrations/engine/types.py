"""Framework-neutral request types of the engine: what a caller asks for.

Adapters translate LangChain / LlamaIndex objects into these (and the results in ``results.py``
back); nothing here knows about either framework or about llama.cpp. ``ImageInput`` is defined
with the prompts' media (``prompts/media.py``) and handed on here.
"""

from __future__ import annotations

import math
import re
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from ..errors import InvalidRequestError
from ..prompts.media import AudioInput, ImageInput, MediaInput, messages_have_images
from ..prompts.reasoning import ReasoningSpec

__all__ = [
    "AudioInput",
    "ChatMessage",
    "ChatRequest",
    "CompletionRequest",
    "GenerationRequest",
    "ImageInput",
    "MediaInput",
    "SamplingParams",
    "new_request_id",
]

MAX_TOP_LOGPROBS = 20


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
            same either way (see ``engine/speculation/drafts.py``); only the speed differs.
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


@dataclass(frozen=True, kw_only=True)
class ChatMessage:
    """One chat turn, in the shape GGUF chat templates expect.

    ``content`` is a string or a list of content parts (``{"type": "text", "text": ...}``,
    ``{"type": "image", "image": ImageInput}``, ``{"type": "audio", "audio": AudioInput}``;
    media need an engine whose projector reads them).
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
        lora: The LoRA adapters to answer with, by name (or id) with their scales:
            ``{"sql": 1.0}`` applies that adapter only, ``{}`` none; ``None`` (the default)
            takes the engine's default scales (llama-server's ``lora`` field).
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
    lora: Mapping[str | int, float] | None = None
    request_id: str = field(default_factory=new_request_id)

    def has_images(self) -> bool:
        """Whether the prompt carries any image."""
        return False

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

    def has_images(self) -> bool:
        """Whether a message carries an image part (cheap: no rendering)."""
        return messages_have_images(self.messages)


@dataclass(frozen=True, kw_only=True)
class CompletionRequest(GenerationRequest):
    """Raw completion of a text (or of token ids) with no chat template.

    ``images`` (images and audio clips alike) go where the prompt text holds
    ``Engine.media_marker``, one marker per item in order; text must follow the last one.
    """

    prompt: str | Sequence[int]
    add_bos: bool = True
    images: Sequence[MediaInput] = ()

    def has_images(self) -> bool:
        return bool(self.images)
