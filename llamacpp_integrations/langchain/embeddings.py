"""``LlamaCppEmbeddings``: LangChain embeddings served by the shared in-process engine."""

from __future__ import annotations

from langchain_core.embeddings import Embeddings
from pydantic import ConfigDict, Field

from ..client import EngineSettings
from ..client.embedding import EmbeddingSettings, aembed_texts, embed_texts
from ..engine import InferenceEngine

__all__ = ["LlamaCppEmbeddings"]


class LlamaCppEmbeddings(EmbeddingSettings, EngineSettings, Embeddings):
    """Text embeddings from a local GGUF model, computed in this process by llama.cpp.

    Each text becomes one pooled vector of plain Python floats (unit length unless
    ``normalize=False``). ``embed_documents`` sends the whole list to the engine in one call and
    the engine packs it into as few decodes as its embedding budget allows; the ``a``-methods
    await the engine directly, without a thread per call.

    Construction is cheap: the model is loaded on first use, through the engine registry. Two
    instances (or an instance and a ``ChatLlamaCpp``) with the same model and the same explicitly
    set engine settings serve from the same engine; with other settings they still share the
    weights. Pass ``engine=`` to use one you manage yourself; the model and engine settings are
    then ignored.

    Errors are the package's typed exceptions: an empty list raises ``InvalidRequestError``, a text
    longer than ``embedding_n_ctx`` tokens raises ``ContextOverflowError`` (unless
    ``truncate=True``), a request past ``timeout`` raises ``RequestTimeoutError``. Invalid
    settings are refused at construction with pydantic's ``ValidationError``.

    Example::

        from langchain_core.vectorstores import InMemoryVectorStore

        from llamacpp_integrations.langchain import LlamaCppEmbeddings

        embeddings = LlamaCppEmbeddings(model="smollm2-135m")
        vector = embeddings.embed_query("What is the capital of France?")

        store = InMemoryVectorStore.from_texts(
            ["Paris is the capital of France.", "Berlin is the capital of Germany."],
            embedding=embeddings,
        )
        docs = store.as_retriever(search_kwargs={"k": 1}).invoke("capital of France")
    """

    model_config = ConfigDict(arbitrary_types_allowed=True, extra="forbid")

    model: str | None = Field(
        default=None,
        description=(
            "A .gguf path, a known short name such as 'smollm2-135m', "
            "hf://owner/repo/file.gguf, or None for the LLAMACPP_MODEL environment variable."
        ),
    )
    engine: InferenceEngine | None = Field(
        default=None,
        exclude=True,
        repr=False,
        description="An engine to serve from instead of the registry's shared one.",
    )

    def _supplied_engine(self) -> InferenceEngine | None:
        return self.engine

    def _get_engine(self) -> InferenceEngine:
        """The engine to serve from, loaded on first use (replaced if it was closed)."""
        return self.binding.get()

    def embed_documents(self, texts: list[str]) -> list[list[float]]:
        """One vector per text, in order, computed in a single engine call."""
        return embed_texts(self.binding, texts, self)

    def embed_query(self, text: str) -> list[float]:
        """The vector of one text (queries and documents are embedded the same way)."""
        return self.embed_documents([text])[0]

    async def aembed_documents(self, texts: list[str]) -> list[list[float]]:
        """Like ``embed_documents``, awaiting the engine without blocking the event loop."""
        return await aembed_texts(self.binding, texts, self)

    async def aembed_query(self, text: str) -> list[float]:
        """Like ``embed_query``, awaiting the engine without blocking the event loop."""
        return (await self.aembed_documents([text]))[0]
