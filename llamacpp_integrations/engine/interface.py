"""The engine interface: what adapters and tools may ask of an engine, local or remote.

``InferenceEngine`` is a structural type: the local ``Engine`` (llama.cpp in this process)
implements it, and so can any other backend (a llama-server fleet, a fake in unit tests). Code
above the engine (``tools/``, ``client/``, the framework adapters) is written against this
protocol and gets engines from the registry's ``shared_engine``, never by naming a concrete
class, so a second backend changes nothing above it.

Every method is safe to call from any thread; the ``a``-methods never block the event loop.
Failures are this package's typed errors (``llamacpp_integrations.errors``).
"""

from __future__ import annotations

from collections.abc import AsyncGenerator, Generator, Mapping, Sequence
from typing import Protocol, runtime_checkable

from .lora import LoraInfo
from .results import Completion, ModelInfo, StreamChunk
from .types import ChatRequest, CompletionRequest, GenerationRequest

__all__ = [
    "ChatRenderer",
    "ChunkingEngine",
    "InferenceEngine",
    "LoraEngine",
    "PromptRequest",
    "RerankingEngine",
    "TokenPieceEngine",
]

PromptRequest = ChatRequest | CompletionRequest


class ChatRenderer(Protocol):
    """Anything that renders chats with a template: enough to probe what the template does
    (an engine, or a template alone when no model is loaded)."""

    def render_chat(self, request: ChatRequest) -> str:
        """The prompt text a chat request becomes (its chat template applied)."""
        ...


@runtime_checkable
class InferenceEngine(Protocol):
    """A served model: generation, embeddings, tokens and chat rendering."""

    @property
    def info(self) -> ModelInfo:
        """What the model is and how it is served (context per request, projector...)."""
        ...

    @property
    def closed(self) -> bool:
        """True once ``close`` ran or the backend stopped; every call then fails."""
        ...

    @property
    def media_marker(self) -> str | None:
        """Where an image goes in a raw ``CompletionRequest`` prompt (``None``: no images)."""
        ...

    def close(self) -> None:
        """Stop serving: running requests end with ``EngineClosedError``, memory is freed."""
        ...

    # ---- tokens and prompts ----------------------------------------------------------------

    def tokenize(
        self, text: str, *, add_special: bool = False, parse_special: bool = False
    ) -> list[int]:
        """Token ids of ``text`` with the model's own tokenizer."""
        ...

    def detokenize(self, tokens: Sequence[int], *, special: bool = False) -> str:
        """The text of ``tokens``."""
        ...

    def render_chat(self, request: ChatRequest) -> str:
        """The prompt text a chat request becomes (its chat template applied)."""
        ...

    def count_prompt_tokens(self, request: PromptRequest) -> int:
        """How many tokens the prompt counts as in ``Usage.prompt_tokens``."""
        ...

    # ---- generation ------------------------------------------------------------------------

    def generate(self, request: GenerationRequest) -> Completion:
        """Run a request to the end; raises the request's typed error if it fails."""
        ...

    async def agenerate(self, request: GenerationRequest) -> Completion:
        """Async ``generate``; cancelling the awaiting task cancels the request."""
        ...

    def stream(self, request: GenerationRequest) -> Generator[StreamChunk, None, None]:
        """Chunks as they are produced; leaving the loop early cancels the request."""
        ...

    def astream(self, request: GenerationRequest) -> AsyncGenerator[StreamChunk, None]:
        """Async ``stream``."""
        ...

    # ---- embeddings ------------------------------------------------------------------------

    def embed(
        self,
        texts: Sequence[str],
        *,
        normalize: bool = True,
        truncate: bool = False,
        timeout: float | None = None,
    ) -> list[list[float]]:
        """One vector (plain floats) per text."""
        ...

    async def aembed(
        self,
        texts: Sequence[str],
        *,
        normalize: bool = True,
        truncate: bool = False,
        timeout: float | None = None,
    ) -> list[list[float]]:
        """Async ``embed``."""
        ...


@runtime_checkable
class RerankingEngine(Protocol):
    """An optional capability beside ``InferenceEngine``: scoring documents against a query
    with a cross-encoder (the local ``Engine`` over a model with rank pooling)."""

    def rerank(
        self,
        query: str,
        documents: Sequence[str],
        *,
        truncate: bool = False,
        timeout: float | None = None,
    ) -> list[float]:
        """One relevance score per document, in order; higher is more relevant."""
        ...

    async def arerank(
        self,
        query: str,
        documents: Sequence[str],
        *,
        truncate: bool = False,
        timeout: float | None = None,
    ) -> list[float]:
        """Async ``rerank``."""
        ...


@runtime_checkable
class ChunkingEngine(Protocol):
    """An optional capability: ``embed`` that cuts texts too long for the context into windows
    and averages their vectors (``chunk=True``), as the local ``Engine`` does. An engine has
    it when it says so (``chunks_long_texts``): a runtime check sees methods, not their
    parameters, and every engine has an ``embed``."""

    @property
    def chunks_long_texts(self) -> bool:
        """True: ``embed`` and ``aembed`` take ``chunk``."""
        ...

    def embed(
        self,
        texts: Sequence[str],
        *,
        normalize: bool = True,
        truncate: bool = False,
        timeout: float | None = None,
        chunk: bool = False,
    ) -> list[list[float]]:
        """One vector per text; with ``chunk``, long texts are averaged over windows."""
        ...

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
        ...


@runtime_checkable
class TokenPieceEngine(Protocol):
    """An optional capability: one token's text as the raw bytes the vocabulary holds, which
    ``detokenize`` cannot give for a token that is part of a UTF-8 character (byte-level
    vocabularies split emoji and most non-Latin characters so)."""

    def token_piece(self, token: int, *, special: bool = True) -> bytes:
        """The bytes of ``token`` (control tokens' text too, unless ``special`` is off)."""
        ...


@runtime_checkable
class LoraEngine(Protocol):
    """An optional capability: LoRA adapters chosen per request (``GenerationRequest.lora``),
    listed with their default scales, loaded while serving, and given new default scales (the
    local ``Engine``; a remote llama-server lists and scales the adapters it started with)."""

    @property
    def lora_adapters(self) -> list[LoraInfo]:
        """The adapters requests may choose, by id, with their default scales."""
        ...

    def load_lora(
        self, name: str, path: str, *, scale: float = 0.0, timeout: float | None = 60
    ) -> LoraInfo:
        """Load an adapter file beside the weights and register it as ``name``."""
        ...

    def set_lora_scales(self, scales: Mapping[str | int, float]) -> None:
        """New default scales: the adapters named get theirs, every other one 0."""
        ...
