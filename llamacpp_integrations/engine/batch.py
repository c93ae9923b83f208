"""One sequence's share of a batched decode: the plan the scheduler makes and the runner runs;
and how far two token sequences agree, which decides what cached cells a sequence can keep."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

__all__ = ["BatchEntry", "common_prefix"]


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


def common_prefix(a: Sequence[int], b: Sequence[int]) -> int:
    n = 0
    for x, y in zip(a, b, strict=False):
        if x != y:
            break
        n += 1
    return n
