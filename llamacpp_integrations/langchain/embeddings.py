"""``LlamaCppEmbeddings``: LangChain embeddings served by the shared in-process engine."""

from __future__ import annotations

from contextlib import AbstractContextManager

from langchain_core.embeddings import Embeddings
from pydantic import ConfigDict, Field

from ..client import EngineSettings
from ..client.embedding import (
    EmbeddingSettings,
    Progress,
    aembed_texts,
    embed_texts,
    model_prefixes,
    progress_bar,
)
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

    Dedicated embedding models (BERT-style encoders such as bge or nomic-embed-text, decoder
    embedders with their own pooling) load as embedding-only engines. ``embed_query`` and
    ``embed_documents`` put the model family's query and document prefixes before the texts
    when the family defines them (``model_prefixes``; ``query_prefix`` and ``document_prefix``
    set them yourself); a model the table does not know gets none.

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
    query_prefix: str | None = Field(
        default=None,
        description="Text put before every query; None takes the model family's (see "
        "model_prefixes).",
    )
    document_prefix: str | None = Field(
        default=None,
        description="Text put before every document; None takes the model family's.",
    )
    show_progress: bool = Field(
        default=False, description="Show a tqdm progress bar in embed_documents (if installed)."
    )

    def _supplied_engine(self) -> InferenceEngine | None:
        return self.engine

    def _get_engine(self) -> InferenceEngine:
        """The engine to serve from, loaded on first use (replaced if it was closed)."""
        return self.binding.get()

    def _prefixed(self, texts: list[str], *, query: bool) -> list[str]:
        given = self.query_prefix if query else self.document_prefix
        if given is None:
            if not texts:  # refused as empty before any model is loaded
                return texts
            if not self.model_prefixes:
                return texts
            family = model_prefixes(self._get_engine())
            given = family.query if query else family.document
        return [given + text for text in texts] if given else texts

    def _progress(
        self, texts: list[str], show_progress: bool | None
    ) -> AbstractContextManager[Progress]:
        """A tqdm bar over ``texts`` when ``show_progress`` (default: the field) asks for one."""
        show = self.show_progress if show_progress is None else show_progress
        return progress_bar(show, len(texts), "Embedding")

    def embed_documents(
        self, texts: list[str], *, show_progress: bool | None = None
    ) -> list[list[float]]:
        """One vector per document, in order, sent to the engine ``batch_size`` texts at a
        time; ``show_progress`` (default: the field) shows a tqdm bar."""
        with self._progress(texts, show_progress) as bar:
            return embed_texts(self.binding, self._prefixed(texts, query=False), self, progress=bar)

    def embed_query(self, text: str) -> list[float]:
        """The vector of a search query (with the model family's query prefix, if any)."""
        return embed_texts(self.binding, self._prefixed([text], query=True), self)[0]

    async def aembed_documents(
        self, texts: list[str], *, show_progress: bool | None = None
    ) -> list[list[float]]:
        """Like ``embed_documents``, awaiting the engine without blocking the event loop."""
        await self.binding.aget()  # loads the model off the event loop before prefixes need it
        with self._progress(texts, show_progress) as bar:
            documents = self._prefixed(texts, query=False)
            return await aembed_texts(self.binding, documents, self, progress=bar)

    async def aembed_query(self, text: str) -> list[float]:
        """Like ``embed_query``, awaiting the engine without blocking the event loop."""
        await self.binding.aget()
        return (await aembed_texts(self.binding, self._prefixed([text], query=True), self))[0]
