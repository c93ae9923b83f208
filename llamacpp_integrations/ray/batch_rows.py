"""Rows in and out of a Ray Data batch: reading its columns, and one answer or error per row.

The contract every batch class keeps: the batch that comes out has the rows that went in, in
their order, each once; a row's result columns hold its answer, or ``None`` with its error
column saying why (``"ContextOverflowError: ..."``, the exception's class name and message).
One bad row never costs the others their answers, and never raises out of the batch.

Rows run concurrently inside the actor (``run_rows``): all of a batch's rows are submitted to
the one engine together, up to ``in_flight`` at a time, so the engine decodes them side by
side and rows that start alike share their prompt's prefix.

Pure: imports neither ray nor native code, so it is tested without either.
"""

from __future__ import annotations

import asyncio
import json
import math
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

import numpy as np

from ..errors import InvalidRequestError

__all__ = [
    "Batch",
    "RowOutcome",
    "columns_of",
    "error_text",
    "json_cell",
    "output_batch",
    "row_count",
    "run_rows",
    "text_cell",
]

T = TypeVar("T")

Batch = Any
"""A Ray Data batch: a mapping of column names to numpy arrays (``batch_format="numpy"``, the
default), a pandas ``DataFrame`` (``"pandas"``) or a pyarrow ``Table`` (``"pyarrow"``)."""


@dataclass(frozen=True)
class RowOutcome(Generic[T]):
    """One row's answer, or the error that took its place."""

    value: T | None = None
    error: BaseException | None = None

    @property
    def ok(self) -> bool:
        return self.error is None


def error_text(error: BaseException) -> str:
    """What a failed row's error column holds: the exception's class name and message."""
    message = str(error)
    return f"{type(error).__name__}: {message}" if message else type(error).__name__


def columns_of(batch: Batch) -> dict[str, list[Any]]:
    """A batch's columns as lists of Python values, whatever its format."""
    if isinstance(batch, Mapping):
        return {str(name): _values(column) for name, column in batch.items()}
    if hasattr(batch, "to_pydict"):  # pyarrow.Table
        return {str(name): list(column) for name, column in batch.to_pydict().items()}
    if hasattr(batch, "columns") and hasattr(batch, "__getitem__"):  # pandas.DataFrame
        return {str(name): list(batch[name].tolist()) for name in batch.columns}
    raise InvalidRequestError(
        f"a batch must be a dict of columns, a pandas DataFrame or a pyarrow Table, not "
        f"{type(batch).__name__}"
    )


def _values(column: Any) -> list[Any]:
    if isinstance(column, np.ndarray):
        return column.tolist() if column.dtype != object else list(column)
    return list(column)


def row_count(columns: Mapping[str, Sequence[Any]]) -> int:
    """How many rows the columns hold (they must agree)."""
    lengths = {len(values) for values in columns.values()}
    if len(lengths) > 1:
        raise InvalidRequestError(f"the batch's columns differ in length: {sorted(lengths)}")
    return lengths.pop() if lengths else 0


def text_cell(columns: Mapping[str, Sequence[Any]], name: str, row: int) -> str:
    """The text in column ``name`` at ``row``.

    Raises:
        InvalidRequestError: the batch has no such column, or the cell is not text (a missing
            value, a number).
    """
    if name not in columns:
        raise InvalidRequestError(
            f"the batch has no column {name!r} (columns: {', '.join(sorted(columns))})"
        )
    value = columns[name][row]
    if isinstance(value, bytes):
        value = value.decode("utf-8", errors="replace")
    if not isinstance(value, str):
        missing = value is None or (isinstance(value, float) and math.isnan(value))
        shown = "a missing value" if missing else f"a {type(value).__name__}"
        raise InvalidRequestError(f"column {name!r} holds {shown}, not text")
    return value


def run_rows(rows: Sequence[Callable[[], Awaitable[T]]], *, in_flight: int) -> list[RowOutcome[T]]:
    """Run every row's call concurrently, at most ``in_flight`` at once, and return each row's
    outcome in the rows' order. An exception a row raises is its outcome; it never stops the
    others. Runs its own event loop (an actor's ``__call__`` is synchronous)."""
    if in_flight < 1:
        raise InvalidRequestError("in_flight must be at least 1")
    return asyncio.run(_run_all(rows, in_flight))


async def _run_all(
    rows: Sequence[Callable[[], Awaitable[T]]], in_flight: int
) -> list[RowOutcome[T]]:
    gate = asyncio.Semaphore(in_flight)

    async def one(row: Callable[[], Awaitable[T]]) -> RowOutcome[T]:
        async with gate:
            try:
                return RowOutcome(value=await row())
            except Exception as error:  # every failure is the row's, reported in its column
                return RowOutcome(error=error)

    return list(await asyncio.gather(*(one(row) for row in rows)))


def output_batch(
    batch: Batch,
    columns: Mapping[str, Sequence[Any]],
    results: Mapping[str, Sequence[Any]],
    errors: Sequence[BaseException | None],
    *,
    error_column: str,
) -> dict[str, np.ndarray]:
    """The batch that comes out: the input's columns as they came (arrays passed through
    untouched), then each result column, then ``error_column`` (``None`` where a row
    succeeded). Every column is as long as the input, so no row is lost or added.

    Raises:
        InvalidRequestError: a result column named like an input column (it would be
            overwritten) or of the wrong length.
    """
    count = row_count(columns)
    out: dict[str, np.ndarray] = {}
    passed = batch if isinstance(batch, Mapping) else {}
    for name, values in columns.items():
        given = passed.get(name)
        out[name] = given if isinstance(given, np.ndarray) else _objects(values)
    for name, values in {**results, error_column: [_error(e) for e in errors]}.items():
        if name in columns:
            raise InvalidRequestError(
                f"output column {name!r} is already a column of the batch: name another"
            )
        if len(values) != count:
            raise AssertionError(f"column {name!r} has {len(values)} rows, not {count}")
        out[name] = _objects(values)
    return out


def _error(error: BaseException | None) -> str | None:
    return None if error is None else error_text(error)


def _objects(values: Sequence[Any]) -> np.ndarray:
    # An object array keeps each cell as it is (a list stays one cell, None stays missing).
    array = np.empty(len(values), dtype=object)
    for index, value in enumerate(values):
        array[index] = value
    return array


def json_cell(value: Any) -> str:
    """A value as a cell of JSON text (for nested results such as tool calls)."""
    return json.dumps(value, ensure_ascii=False)
