"""``RerankBatches``: a Ray Data callable class that scores (query, document) rows.

The rows of a batch that share a query are scored in one engine call (the reranker's own, as
``LlamaCppReranker`` and the server's ``/v1/rerank`` make it), all queries submitted together;
a call that fails is retried one document per request, so only the rows at fault get an error.
Needs a reranking engine: a local ``Engine`` over a cross-encoder GGUF (bge-reranker...).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any

import numpy as np
from pydantic import Field

from ..client.embedding import RerankSettings, arerank_texts, reranker_of
from ..engine import InferenceEngine
from ..errors import LlamaCppIntegrationError
from .batch_engine import BatchJobSettings
from .batch_rows import Batch, RowOutcome, columns_of, output_batch, row_count, run_rows, text_cell

__all__ = ["BatchRerankSettings", "RerankBatches"]


class BatchRerankSettings(BatchJobSettings):
    """The rerankers' settings (without ``top_n``: every row keeps its score), plus the batch
    job's."""

    truncate: bool = Field(
        default=True,
        description="Cut a document whose pair with the query is longer than the context "
        "instead of failing its row with ContextOverflowError.",
    )
    timeout: float | None = Field(
        default=None, gt=0, description="Seconds one query's call may take."
    )


class RerankBatches:
    """Scores ``document_column`` against ``query_column`` into ``output_column`` (higher is
    more relevant), for ``Dataset.map_batches``; a row that fails gets ``None`` and its error
    in ``error_column``. The output keeps the input's rows, in order.

    Args:
        model: A cross-encoder reranking model, as the adapters take it.
        query_column: The queries' column.
        document_column: The documents' column.
        output_column: The scores' column.
        engine: An engine to use instead of loading one (in-process use and tests only).
        **settings: ``truncate``, ``timeout``, the engine settings, ``in_flight`` and
            ``error_column``; see ``BatchRerankSettings``.

    Raises:
        InvalidRequestError: the engine cannot rerank (its model is not a cross-encoder).
        pydantic.ValidationError: a setting that does not exist or has a bad value.
    """

    def __init__(
        self,
        model: str | None = None,
        *,
        query_column: str = "query",
        document_column: str = "document",
        output_column: str = "score",
        engine: InferenceEngine | None = None,
        **settings: Any,
    ) -> None:
        self.settings = BatchRerankSettings(model=model, **settings)
        self.query_column = query_column
        self.document_column = document_column
        self.output_column = output_column
        self.engine = self.settings.load(engine)
        reranker_of(self.engine)  # a model that cannot rank is refused before any batch
        self._call_settings = RerankSettings(
            top_n=None, truncate=self.settings.truncate, timeout=self.settings.timeout
        )

    def __call__(self, batch: Batch) -> dict[str, np.ndarray]:
        """The batch with ``output_column`` and ``error_column`` added."""
        columns = columns_of(batch)
        count = row_count(columns)
        errors: list[BaseException | None] = [None] * count
        groups: dict[str, list[tuple[int, str]]] = {}
        for row in range(count):
            try:
                query = text_cell(columns, self.query_column, row)
                document = text_cell(columns, self.document_column, row)
            except LlamaCppIntegrationError as error:
                errors[row] = error
                continue
            groups.setdefault(query, []).append((row, document))
        scores: list[float | None] = [None] * count
        calls = [self._group(query, rows) for query, rows in groups.items()]
        outcomes = run_rows(calls, in_flight=self.settings.in_flight)
        for group, outcome in zip(groups.values(), outcomes, strict=True):
            # A group's call sorts out its rows' own errors; one that failed anyway fails all.
            found = outcome.value or {
                row: RowOutcome[float](error=outcome.error) for row, _ in group
            }
            for row, score in found.items():
                scores[row], errors[row] = score.value, score.error
        return output_batch(
            batch,
            columns,
            {self.output_column: scores},
            errors,
            error_column=self.settings.error_column,
        )

    def _group(
        self, query: str, rows: Sequence[tuple[int, str]]
    ) -> Callable[[], Awaitable[Mapping[int, RowOutcome[float]]]]:
        async def call() -> Mapping[int, RowOutcome[float]]:
            binding = self.settings.binding
            documents = [document for _, document in rows]
            try:
                scores = await arerank_texts(binding, query, documents, self._call_settings)
                return {row: RowOutcome(value=s) for (row, _), s in zip(rows, scores, strict=True)}
            except LlamaCppIntegrationError:
                pass  # one document spoiled the call: score each alone to find which
            out: dict[int, RowOutcome[float]] = {}
            for row, document in rows:
                try:
                    [score] = await arerank_texts(binding, query, [document], self._call_settings)
                    out[row] = RowOutcome(value=score)
                except Exception as error:  # the row's own failure, reported in its column
                    out[row] = RowOutcome(error=error)
            return out

        return call
