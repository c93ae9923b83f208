"""What an embedding request becomes on the caller's side before it crosses to the worker."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from ..channel import EventChannel

__all__ = ["EmbedJob"]


@dataclass(frozen=True, kw_only=True)
class EmbedJob:
    """Texts (already tokenized) to embed in as few batched decodes as the budget allows."""

    request_id: str
    token_lists: Sequence[Sequence[int]]
    normalize: bool
    submitted_at: float
    deadline: float | None
    channel: EventChannel = field(repr=False)
    # Chunk-and-average mode: how many consecutive token lists make each text (None: one each).
    chunks: Sequence[int] | None = None
