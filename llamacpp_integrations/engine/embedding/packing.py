"""Which of a job's pending texts go into the next embedding decode.

A decode costs about the same per token however its tokens are split into sequences, so the
fewer and fuller the decodes, the faster a corpus goes. Texts are taken longest first, each the
longest that still fits the room left (first-fit decreasing): long texts do not end up alone at
the end, and short ones fill the gaps the long ones leave. Pure bookkeeping, no llama.cpp.
"""

from __future__ import annotations

from bisect import bisect_right
from collections.abc import Sequence

__all__ = ["PendingTexts"]


class PendingTexts:
    """The texts of one job not embedded yet, by token count; ``take`` hands out their indices."""

    def __init__(self, lengths: Sequence[int]) -> None:
        order = sorted(range(len(lengths)), key=lambda i: (lengths[i], i))
        self._lengths = [lengths[i] for i in order]
        self._indices = order

    def __len__(self) -> int:
        return len(self._lengths)

    @property
    def shortest(self) -> int:
        """Token count of the shortest pending text (the job must not be empty)."""
        return self._lengths[0]

    def take(self, budget: int, room: int) -> list[int]:
        """Indices of up to ``room`` texts, longest first, whose tokens add up to ``budget`` at
        most; they leave the pending set."""
        taken: list[int] = []
        while len(taken) < room and self._lengths:
            # the longest text that still fits what is left of the budget
            at = bisect_right(self._lengths, budget) - 1
            if at < 0:
                break
            budget -= self._lengths.pop(at)
            taken.append(self._indices.pop(at))
        return taken

    def take_shortest(self) -> int:
        """The shortest text alone, for a budget no pending text fits."""
        self._lengths.pop(0)
        return self._indices.pop(0)
