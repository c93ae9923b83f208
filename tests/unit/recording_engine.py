"""An engine without a model for the adapters' unit tests: it answers every request with the
same words (whole or streamed) and keeps each request it gets, so a test can check what an
adapter asked of the engine (``max_tokens``, ``stop``, sampling...)."""

from __future__ import annotations

from collections.abc import AsyncGenerator, Generator, Sequence
from dataclasses import dataclass, field

from llamacpp_integrations.engine import (
    ChatRequest,
    Completion,
    GenerationRequest,
    ModelInfo,
    StreamChunk,
    TokenLogprob,
    Usage,
)
from llamacpp_integrations.prompts.chat_rendering import ChatTemplates
from llamacpp_integrations.testing.scripted import CHATML, SCRIPTED_TIMINGS

INFO = ModelInfo(
    path="/models/tiny-Q8_0.gguf",
    name="Tiny Test Model",
    architecture="llama",
    description="",
    n_ctx_train=512,
    n_ctx_per_seq=256,
    n_embd=3,
    n_vocab=100,
    n_params=1,
    size_bytes=1,
    chat_template=CHATML,
)
TIMINGS = SCRIPTED_TIMINGS


@dataclass
class FixedWordsEngine:
    """Answers ``words`` (each streamed as one piece, with ``logprobs`` on the first) and keeps
    every generation request in ``requests``."""

    words: Sequence[str] = ("o", "k")
    logprobs: tuple[TokenLogprob, ...] = ()
    requests: list[GenerationRequest] = field(default_factory=list)
    info: ModelInfo = INFO
    closed: bool = False
    media_marker: str | None = None

    def __post_init__(self) -> None:
        self._templates = ChatTemplates(self.info.chat_template)

    def close(self) -> None:
        self.closed = True

    def tokenize(
        self, text: str, *, add_special: bool = False, parse_special: bool = False
    ) -> list[int]:
        return [ord(c) % 100 for c in text]

    def detokenize(self, tokens: Sequence[int], *, special: bool = False) -> str:
        return "".join(chr(t) for t in tokens)

    def render_chat(self, request: ChatRequest) -> str:
        return self._templates.render_chat(request)

    def count_prompt_tokens(self, request: object) -> int:
        return 1

    def _usage(self) -> Usage:
        return Usage(prompt_tokens=3, completion_tokens=len(self.words))

    def generate(self, request: GenerationRequest) -> Completion:
        self.requests.append(request)
        ids = tuple(range(len(self.words)))
        logprobs = self.logprobs if request.logprobs is not None else None
        text = "".join(self.words)
        return Completion(request.request_id, text, ids, "stop", self._usage(), TIMINGS, logprobs)

    async def agenerate(self, request: GenerationRequest) -> Completion:
        return self.generate(request)

    def stream(self, request: GenerationRequest) -> Generator[StreamChunk, None, None]:
        self.requests.append(request)
        for i, word in enumerate(self.words):
            last = i == len(self.words) - 1
            yield StreamChunk(
                request.request_id,
                word,
                (i,),
                finish_reason="stop" if last else None,
                usage=self._usage() if last else None,
                timings=TIMINGS if last else None,
                logprobs=self.logprobs if i == 0 and request.logprobs is not None else (),
            )

    async def astream(self, request: GenerationRequest) -> AsyncGenerator[StreamChunk, None]:
        for chunk in self.stream(request):
            yield chunk

    def embed(
        self,
        texts: Sequence[str],
        *,
        normalize: bool = True,
        truncate: bool = False,
        timeout: float | None = None,
    ) -> list[list[float]]:
        return [[1.0, 0.0, float(len(t))] for t in texts]

    async def aembed(
        self,
        texts: Sequence[str],
        *,
        normalize: bool = True,
        truncate: bool = False,
        timeout: float | None = None,
    ) -> list[list[float]]:
        return self.embed(texts)


# The name most unit tests import; not llamacpp_integrations.testing.RecordingEngine, which
# records a real engine's calls into a cassette.
RecordingEngine = FixedWordsEngine
