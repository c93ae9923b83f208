"""``ScriptedEngine``: an engine that says what the test tells it to, for unit tests.

Unlike a fake chat model that returns canned text, it sits under the real adapters, so a test
sees their whole behaviour: streamed chunk boundaries, reasoning kept apart from the answer,
tool calls parsed from the text (in the ``<tool_call>[...]</tool_call>`` markup the adapters
ask of templates without a tool format of their own, ChatML's among them), usage,
log-probabilities, finish reasons and typed errors part-way through a stream.

The engine needs no model: tokens are characters, chats are rendered with the given chat
template, vectors come from a hash of the text. It keeps what it was asked (``requests``,
``tokenized``, ``rendered``, ``embedded``) for the test to check. The optional capabilities
are subclasses (``scripted_capabilities.py``), so that a plain ``ScriptedEngine`` has none.
"""

from __future__ import annotations

import hashlib
import json
import math
import threading
from collections.abc import AsyncGenerator, Generator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from ..engine.interface import PromptRequest
from ..engine.results import (
    Completion,
    FinishReason,
    ModelInfo,
    StreamChunk,
    Timings,
    TokenLogprob,
    Usage,
)
from ..engine.types import ChatRequest, GenerationRequest
from ..errors import EngineClosedError, EngineError, LlamaCppIntegrationError
from ..prompts.chat_rendering import ChatTemplates

__all__ = [
    "CHATML",
    "SCRIPTED_INFO",
    "SCRIPTED_TIMINGS",
    "Answer",
    "ScriptedEngine",
    "tool_calls_text",
]

CHATML = (
    "{%- for message in messages %}"
    "{{- '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>\\n' }}"
    "{%- endfor %}"
    "{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{%- endif %}"
)
SCRIPTED_INFO = ModelInfo(
    path="scripted.gguf",
    name="Scripted",
    architecture="llama",
    description="a scripted engine (no model)",
    n_ctx_train=4096,
    n_ctx_per_seq=4096,
    n_embd=8,
    n_vocab=256,
    n_params=0,
    size_bytes=0,
    chat_template=CHATML,
)
"""What a ``ScriptedEngine`` says it serves: a ChatML model with a 4096-token context."""
SCRIPTED_TIMINGS = Timings(
    queued_s=0.0, time_to_first_token_s=0.02, total_s=0.1, prompt_eval_s=0.01, generation_s=0.06
)
"""The timings a ``ScriptedEngine`` reports, unless given others."""

Piece = str | tuple[str, str]


def tool_calls_text(*calls: tuple[str, Mapping[str, Any]]) -> str:
    """The text of a model answering with tool calls (name, arguments), in the markup the
    adapters parse for templates without a tool format of their own."""
    listed = [{"name": name, "arguments": dict(arguments)} for name, arguments in calls]
    return f"<tool_call>{json.dumps(listed, ensure_ascii=False)}</tool_call>"


@dataclass(frozen=True)
class Answer:
    """One scripted answer.

    Attributes:
        pieces: The streamed chunks, in order: a text, or ``(reasoning, text)``.
        finish: The finish reason of the last chunk.
        stop_string: The stop string that ended the answer (reported on the last chunk, as the
            engine does, when ``finish`` is ``"stop"``); its text is not shown, but its token
            comes with the log-probabilities when the request asks for them.
        fail_at: Raise ``error`` before this chunk (``0``: before any); ``None``: no error.
        error: What to raise at ``fail_at`` (default ``EngineError("the model failed")``).
        logprobs: The log-probabilities reported when the request asks for them: the i-th
            with the i-th chunk, any left over with the last. ``None``: each chunk's text as
            one certain token (and the stop string's, if any, with the last).
    """

    pieces: Sequence[Piece] = (("", "Hello"), ("", " there"))
    finish: FinishReason = "stop"
    stop_string: str | None = None
    fail_at: int | None = None
    error: LlamaCppIntegrationError | None = None
    logprobs: Sequence[TokenLogprob] | None = None

    @classmethod
    def calling(cls, *calls: tuple[str, Mapping[str, Any]], pieces: int = 3) -> Answer:
        """An answer made of tool calls, streamed in ``pieces`` chunks."""
        text = tool_calls_text(*calls)
        size = max(1, math.ceil(len(text) / max(1, pieces)))
        return cls(pieces=tuple(text[i : i + size] for i in range(0, len(text), size)))

    @classmethod
    def refused(cls, error: LlamaCppIntegrationError) -> Answer:
        """A request refused before its first chunk: a full queue (``EngineOverloadedError``),
        a prompt over the context (``ContextOverflowError``)..."""
        return cls(pieces=(), fail_at=0, error=error)

    def split(self) -> list[tuple[str, str]]:
        """The chunks as ``(reasoning, text)`` pairs."""
        return [("", piece) if isinstance(piece, str) else piece for piece in self.pieces]


@dataclass(eq=False)  # an engine is itself, not its settings: two are never equal
class ScriptedEngine:
    """An engine without a model that answers from a script, for the adapters' unit tests.

    Every generation request gets ``script`` (chunk by chunk when streamed), ending with
    ``finish``; or, with ``answers``, successive requests get successive answers (the last one
    repeating; ``Answer.refused`` refuses one). Every request is kept in ``requests``.

    Example::

        engine = ScriptedEngine(
            answers=[
                Answer.calling(("get_weather", {"city": "Oslo"})),
                Answer(pieces=[("Oslo is", ""), ("", "Sunny in Oslo.")]),
            ]
        )
        llm = ChatLlamaCpp(engine=engine)

    Attributes:
        script: The answer's chunks: ``(reasoning, text)`` pairs or texts.
        finish: Its finish reason.
        stop_string: The stop string that ended it (see ``Answer``).
        fail_at: Raise ``error`` before this chunk.
        error: The error (default ``EngineError``).
        logprobs: The log-probabilities it reports (see ``Answer``).
        answers: Answers for successive requests; when given, the six above are not used.
        prompt_tokens: ``Usage.prompt_tokens`` of every answer.
        cached_prompt_tokens: ``Usage.cached_prompt_tokens`` of every answer.
        info: The model it says it serves (``SCRIPTED_INFO``: a ChatML template, unless
            replaced; ``info.n_vocab`` bounds the token ids, ``info.n_embd`` sizes vectors).
        timings: The timings of every answer (``SCRIPTED_TIMINGS``).
        media_marker: Its image marker (``None``: no images).
        closed: Set by ``close``; calls then raise ``EngineClosedError``.
        requests: Every generation request received, in order.
        tokenized: Every text given to ``tokenize``, in order.
        rendered: Every chat given to ``render_chat``, in order (``count_prompt_tokens``
            renders without keeping it).
        embedded: Every ``embed`` call's texts and keywords (``normalize``, ``truncate``,
            ``timeout``), in order.
    """

    script: Sequence[Piece] = (("", "Hello"), ("", " there"))
    finish: FinishReason = "stop"
    stop_string: str | None = None
    fail_at: int | None = None
    error: LlamaCppIntegrationError | None = None
    logprobs: Sequence[TokenLogprob] | None = None
    answers: Sequence[Answer] = ()
    prompt_tokens: int = 7
    cached_prompt_tokens: int = 0
    info: ModelInfo = SCRIPTED_INFO
    timings: Timings = SCRIPTED_TIMINGS
    media_marker: str | None = None
    closed: bool = False
    requests: list[GenerationRequest] = field(default_factory=list)
    tokenized: list[str] = field(default_factory=list)
    rendered: list[ChatRequest] = field(default_factory=list)
    embedded: list[tuple[list[str], dict[str, Any]]] = field(default_factory=list)

    def __post_init__(self) -> None:
        self._templates = ChatTemplates(self.info.chat_template, owner="the scripted model")
        self._lock = threading.Lock()
        self._answered = 0

    def close(self) -> None:
        self.closed = True

    def _check_open(self, request_id: str | None = None) -> None:
        if self.closed:
            raise EngineClosedError("the engine is closed", request_id=request_id)

    # ---- tokens and prompts: one token per character --------------------------------------

    def tokenize(
        self, text: str, *, add_special: bool = False, parse_special: bool = False
    ) -> list[int]:
        self.tokenized.append(text)
        return [ord(c) % self.info.n_vocab for c in text]

    def detokenize(self, tokens: Sequence[int], *, special: bool = False) -> str:
        return "".join(chr(t) for t in tokens)

    def render_chat(self, request: ChatRequest) -> str:
        self.rendered.append(request)
        return self._templates.render_chat(request)

    def count_prompt_tokens(self, request: PromptRequest) -> int:
        if isinstance(request, ChatRequest):
            return len(self._templates.render_chat(request))
        return len(request.prompt)

    # ---- generation -------------------------------------------------------------------------

    def _next_answer(self, request: GenerationRequest) -> Answer:
        self._check_open(request.request_id)
        with self._lock:
            self.requests.append(request)
            if not self.answers:
                return Answer(
                    pieces=self.script,
                    finish=self.finish,
                    stop_string=self.stop_string,
                    fail_at=self.fail_at,
                    error=self.error,
                    logprobs=self.logprobs,
                )
            answer = self.answers[min(self._answered, len(self.answers) - 1)]
            self._answered += 1
            return answer

    def _usage(self, answer: Answer) -> Usage:
        pairs = answer.split()
        return Usage(
            prompt_tokens=self.prompt_tokens,
            completion_tokens=len(pairs),
            cached_prompt_tokens=self.cached_prompt_tokens,
            reasoning_tokens=sum(1 for thought, _ in pairs if thought),
        )

    def _logprobs(
        self, request: GenerationRequest, answer: Answer, i: int
    ) -> tuple[TokenLogprob, ...]:
        if request.logprobs is None:
            return ()
        last = i == len(answer.pieces) - 1
        if answer.logprobs is not None:
            return tuple(answer.logprobs[i:] if last else answer.logprobs[i : i + 1])
        thought, text = answer.split()[i]
        tokens = [_token(thought + text)]
        if last and answer.stop_string:
            tokens.append(_token(answer.stop_string))
        return tuple(tokens)

    def _failure(self, answer: Answer, request: GenerationRequest, shown: str) -> Exception:
        error = answer.error or EngineError("the model failed", partial_text=shown)
        error.request_id = request.request_id
        return error

    def _chunks(self, request: GenerationRequest) -> Generator[StreamChunk, None, None]:
        answer = self._next_answer(request)
        pairs = answer.split()
        shown = ""
        for i, (thought, text) in enumerate(pairs):
            if i == answer.fail_at:
                raise self._failure(answer, request, shown)
            last = i == len(pairs) - 1
            shown += text
            yield StreamChunk(
                request.request_id,
                text,
                (i,),
                finish_reason=answer.finish if last else None,
                usage=self._usage(answer) if last else None,
                timings=self.timings if last else None,
                logprobs=self._logprobs(request, answer, i),
                reasoning=thought,
                stop_string=answer.stop_string if last and answer.finish == "stop" else None,
            )
        if answer.fail_at is not None and answer.fail_at >= len(pairs):
            raise self._failure(answer, request, shown)

    def generate(self, request: GenerationRequest) -> Completion:
        chunks = list(self._chunks(request))
        last = chunks[-1]
        assert last.finish_reason is not None and last.usage is not None
        logprobs = tuple(token for chunk in chunks for token in chunk.logprobs)
        return Completion(
            request.request_id,
            "".join(chunk.text for chunk in chunks),
            tuple(token for chunk in chunks for token in chunk.token_ids),
            last.finish_reason,
            last.usage,
            self.timings,
            logprobs if request.logprobs is not None else None,
            reasoning="".join(chunk.reasoning for chunk in chunks),
            stop_string=last.stop_string,
        )

    async def agenerate(self, request: GenerationRequest) -> Completion:
        return self.generate(request)

    def stream(self, request: GenerationRequest) -> Generator[StreamChunk, None, None]:
        yield from self._chunks(request)

    async def astream(self, request: GenerationRequest) -> AsyncGenerator[StreamChunk, None]:
        for chunk in self._chunks(request):
            yield chunk

    # ---- embeddings: a vector from a hash of the text ----------------------------------------

    def embed(
        self,
        texts: Sequence[str],
        *,
        normalize: bool = True,
        truncate: bool = False,
        timeout: float | None = None,
    ) -> list[list[float]]:
        return self._embed(
            texts, {"normalize": normalize, "truncate": truncate, "timeout": timeout}
        )

    def _embed(self, texts: Sequence[str], keywords: dict[str, Any]) -> list[list[float]]:
        self._check_open()
        self.embedded.append((list(texts), keywords))
        return [_vector(text, self.info.n_embd, keywords["normalize"]) for text in texts]

    async def aembed(
        self,
        texts: Sequence[str],
        *,
        normalize: bool = True,
        truncate: bool = False,
        timeout: float | None = None,
    ) -> list[list[float]]:
        return self.embed(texts, normalize=normalize, truncate=truncate, timeout=timeout)


def _token(text: str) -> TokenLogprob:
    return TokenLogprob(text, 0, 0.0, tuple(text.encode()))


def _vector(text: str, size: int, normalize: bool) -> list[float]:
    digest = hashlib.sha256(text.encode()).digest()
    values = [digest[i % len(digest)] / 255.0 - 0.5 for i in range(size)]
    if not normalize:
        return values
    norm = math.sqrt(sum(v * v for v in values)) or 1.0
    return [v / norm for v in values]
