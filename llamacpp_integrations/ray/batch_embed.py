"""``EmbedBatches``: a Ray Data callable class that embeds a text column.

Each batch goes to the engine the way ``LlamaCppEmbeddings.embed_documents`` sends a list (the
same call, ``client.embedding.embed_texts``, with the same settings and the model family's
document prefix), so the vectors are the ones the adapter gives for the same texts. When that
call fails (a text too long for the context, say), the batch's texts are embedded one per
request, all submitted together, so only the rows at fault get an error.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

import numpy as np
from pydantic import Field

from ..client.embedding import EmbeddingSettings, aembed_texts, embed_texts, model_prefixes
from ..engine import InferenceEngine
from ..errors import LlamaCppIntegrationError
from .batch_engine import BatchJobSettings
from .batch_rows import Batch, columns_of, output_batch, row_count, run_rows, text_cell

__all__ = ["BatchEmbeddingSettings", "EmbedBatches"]


class BatchEmbeddingSettings(EmbeddingSettings, BatchJobSettings):
    """``LlamaCppEmbeddings``' settings (the embedding ones and the engine ones), plus the
    batch job's."""

    document_prefix: str | None = Field(
        default=None,
        description="Text put before every text; None takes the model family's document "
        "prefix (see model_prefixes).",
    )


class EmbedBatches:
    """Embeds ``text_column`` into ``output_column``, for ``Dataset.map_batches``.

    Each actor of the pool loads one engine in its constructor and embeds every batch it is
    given with it; a row whose text cannot be embedded gets ``None`` and its error in
    ``error_column``. The output keeps the input's rows, in order, with every input column.

    Args:
        model: The model, as the adapters take it (a path, a short name, ``hf://``,
            ``ollama://``).
        text_column: The column of texts to embed.
        output_column: The column the vectors go to (lists of floats).
        engine: An engine to use instead of loading one (in-process use and tests only: an
            engine cannot be sent to a Ray actor).
        **settings: ``LlamaCppEmbeddings``' settings (``normalize``, ``truncate``,
            ``batch_size``, ``document_prefix``, ``embedding_n_ctx``...), ``in_flight`` and
            ``error_column``; see ``BatchEmbeddingSettings``.

    Raises:
        pydantic.ValidationError: a setting that does not exist or has a bad value.

    Example::

        import ray
        from llamacpp_integrations.ray import EmbedBatches

        vectors = ray.data.from_items([{"text": t} for t in texts]).map_batches(
            EmbedBatches,
            fn_constructor_kwargs={"model": "smollm2-135m"},
            batch_size=64,
            compute=ray.data.ActorPoolStrategy(size=2),
            num_cpus=1,
        )
    """

    def __init__(
        self,
        model: str | None = None,
        *,
        text_column: str = "text",
        output_column: str = "embedding",
        engine: InferenceEngine | None = None,
        **settings: Any,
    ) -> None:
        self.settings = BatchEmbeddingSettings(model=model, **settings)
        self.text_column = text_column
        self.output_column = output_column
        self.engine = self.settings.load(engine)
        prefix = self.settings.document_prefix
        if prefix is None and self.settings.model_prefixes:
            prefix = model_prefixes(self.engine).document
        self._prefix = prefix or ""

    def __call__(self, batch: Batch) -> dict[str, np.ndarray]:
        """The batch with ``output_column`` and ``error_column`` added."""
        columns = columns_of(batch)
        count = row_count(columns)
        texts: list[str | None] = [None] * count
        errors: list[BaseException | None] = [None] * count
        for row in range(count):
            try:
                texts[row] = self._prefix + text_cell(columns, self.text_column, row)
            except LlamaCppIntegrationError as error:
                errors[row] = error
        vectors = self._embed(texts, errors)
        return output_batch(
            batch,
            columns,
            {self.output_column: vectors},
            errors,
            error_column=self.settings.error_column,
        )

    def _embed(
        self, texts: list[str | None], errors: list[BaseException | None]
    ) -> list[list[float] | None]:
        """One vector per text (``None`` where the row failed, its error set in ``errors``)."""
        rows = [row for row, text in enumerate(texts) if text is not None]
        vectors: list[list[float] | None] = [None] * len(texts)
        if not rows:
            return vectors
        binding = self.settings.binding
        try:
            whole = embed_texts(binding, [texts[row] or "" for row in rows], self.settings)
        except LlamaCppIntegrationError:
            # Some text spoiled the batch: one request per text finds which.
            calls = [self._one(texts[row] or "") for row in rows]
            outcomes = run_rows(calls, in_flight=self.settings.in_flight)
            for row, outcome in zip(rows, outcomes, strict=True):
                errors[row], vectors[row] = outcome.error, outcome.value
            return vectors
        for row, vector in zip(rows, whole, strict=True):
            vectors[row] = vector
        return vectors

    def _one(self, text: str) -> Callable[[], Awaitable[list[float]]]:
        async def call() -> list[float]:
            [vector] = await aembed_texts(self.settings.binding, [text], self.settings)
            return vector

        return call
