"""One sequence's share of a batched decode: the plan the scheduler makes and the runner runs."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

__all__ = ["BatchEntry"]


@dataclass
class BatchEntry:
    """Tokens of one sequence for one decode, starting at position ``start_pos``.

    With ``logits_last`` the last token's logits are kept; the runner then sets
    ``logits_index`` to its row in the decode's output. With ``logits_all`` (a speculating
    sequence: its next token and its drafts) every token's logits are kept, in rows
    ``first_index`` to ``logits_index``.
    """

    seq_id: int
    tokens: Sequence[int]
    start_pos: int
    logits_last: bool
    logits_index: int = -1
    logits_all: bool = False
    first_index: int = -1
