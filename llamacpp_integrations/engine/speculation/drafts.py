"""Speculative decoding's pure parts: n-gram drafts, draft length, and the acceptance rule.

A speculating sequence puts its next token and ``k`` drafted tokens into the step's shared
``llama_decode`` with logits at every position. The worker then samples position by position
with the request's own sampler chain and keeps a draft only while it equals the token sampled at
its position; the first sample that differs is the step's correction token, and the cells after
it are dropped. Row ``i`` of the decode holds exactly the logits a non-speculative step would have
seen after the accepted prefix, so:

* greedy requests produce the same tokens as without speculation;
* sampled requests keep their output distribution. An n-gram draft is deterministic (its draft
  distribution ``q`` is one-hot on the drafted token ``d``), and the standard speculative-sampling
  rule then reads: accept ``d`` with probability ``min(1, p(d) / q(d)) = p(d)``, else sample from
  the residual ``max(0, p - q)`` normalized, which is ``p`` with ``d`` removed. Sampling ``t ~ p``
  and accepting ``d`` exactly when ``t == d`` does both at once: ``P(accept) = p(d)`` and a rejected
  step's ``t`` is distributed as ``p`` given ``t != d``. ``accept_draft`` is the general rule (any
  ``q``), and the unit tests check that the two agree;
* grammar-constrained requests stay in their grammar: only tokens the (grammar-aware) sampler
  itself picked are ever kept, so a draft the grammar refuses is simply never accepted;
* stop strings, end-of-generation, token limits and log-probabilities see accepted tokens one by
  one, as they would without speculation.

Nothing here imports llama.cpp.
"""

from __future__ import annotations

import random
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

__all__ = [
    "DraftLength",
    "DraftWant",
    "NgramDrafter",
    "SeqSpeculation",
    "SpecStats",
    "accept_draft",
    "residual",
]


@dataclass(frozen=True)
class DraftWant:
    """One sequence to draft for: what the target's cells hold, the token the target decodes
    next, and how many tokens to draft after it."""

    seq_id: int
    cached: Sequence[int]
    next_token: int
    k: int


class NgramDrafter:
    """Drafts by prompt lookup: the tokens that followed the latest earlier occurrence of the
    sequence's last ``n`` tokens (longest ``n`` first, down to ``min_n``).

    The index maps each n-gram to the position just after its latest occurrence; an n-gram is
    entered only once the token after it is known, so the sequence's own tail never finds itself.
    Negative tokens (image positions) are never drafted and break n-grams.
    """

    def __init__(self, tokens: Iterable[int] = (), *, max_n: int = 3, min_n: int = 2) -> None:
        if not 1 <= min_n <= max_n:
            raise ValueError("need 1 <= min_n <= max_n")
        self.max_n = max_n
        self.min_n = min_n
        self.history: list[int] = []
        self._index: dict[tuple[int, ...], int] = {}
        self.extend(tokens)

    def extend(self, tokens: Iterable[int]) -> None:
        for token in tokens:
            self.push(token)

    def push(self, token: int) -> None:
        """Append one token of the sequence (prompt or accepted output)."""
        history = self.history
        end = len(history)
        history.append(token)
        # The n-grams ending just before ``token`` now know what follows them.
        for n in range(self.min_n, self.max_n + 1):
            if n > end:
                break
            gram = tuple(history[end - n : end])
            if gram[0] < 0 or gram[-1] < 0:
                continue
            self._index[gram] = end

    def draft(self, k: int) -> list[int]:
        """Up to ``k`` tokens predicted to follow the history (empty when nothing matches)."""
        if k <= 0:
            return []
        history = self.history
        size = len(history)
        for n in range(min(self.max_n, size), self.min_n - 1, -1):
            at = self._index.get(tuple(history[size - n :]))
            if at is None:
                continue
            out: list[int] = []
            for token in history[at : at + k]:
                if token < 0:
                    break
                out.append(token)
            if out:
                return out
        return []


class DraftLength:
    """How many tokens one sequence drafts next, following its acceptance.

    All drafts accepted: draft two more next time (up to ``max_k``); some rejected: draft one more
    than were accepted. A sequence whose drafts keep failing (an exponential average of the
    accepted share below ``floor``) pauses drafting for a number of steps that doubles each time,
    so free text that never repeats its input costs almost nothing.
    """

    def __init__(self, max_k: int, *, floor: float = 0.25, alpha: float = 0.3) -> None:
        self.max_k = max_k
        self.k = min(max_k, 4)
        self.rate = 0.5
        self._floor = floor
        self._alpha = alpha
        self._pause = 0
        self._next_pause = 4

    def next(self) -> int:
        """The draft length for this step (``0``: do not draft)."""
        if self.max_k <= 0:
            return 0
        if self._pause > 0:
            self._pause -= 1
            return 0
        return self.k

    def update(self, drafted: int, accepted: int) -> None:
        """A step verified ``drafted`` tokens and kept ``accepted`` of them."""
        if drafted <= 0:
            return
        self.rate += self._alpha * (accepted / drafted - self.rate)
        if accepted == drafted:
            self.k = min(self.max_k, self.k + 2)
        else:
            self.k = max(1, min(self.max_k, accepted + 1))
        if self.rate < self._floor:
            self._pause = self._next_pause
            self._next_pause = min(self._next_pause * 2, 64)
            self.rate = 0.5  # start over after the pause
        elif accepted > 0:
            self._next_pause = 4


@dataclass
class SpecStats:
    """Counters of one sequence (or engine): tokens drafted, accepted, and verify steps."""

    drafted: int = 0
    accepted: int = 0
    steps: int = 0

    @property
    def acceptance(self) -> float:
        return self.accepted / self.drafted if self.drafted else 0.0

    def add(self, drafted: int, accepted: int) -> None:
        self.drafted += drafted
        self.accepted += accepted
        self.steps += 1


class SeqSpeculation:
    """One sequence's speculation: its n-gram drafter (none when a draft model drafts), draft
    length and counters."""

    def __init__(self, prompt: Iterable[int], *, max_draft: int, ngram_size: int) -> None:
        self.drafter: NgramDrafter | None = NgramDrafter(prompt, max_n=ngram_size, min_n=2)
        self.length = DraftLength(max_draft)
        self.stats = SpecStats()

    @classmethod
    def without_ngrams(cls, *, max_draft: int) -> SeqSpeculation:
        """A sequence whose drafts come from elsewhere (a draft model): length and counters."""
        spec = cls((), max_draft=max_draft, ngram_size=2)
        spec.drafter = None
        return spec

    def push(self, token: int) -> None:
        """An accepted token of the sequence."""
        if self.drafter is not None:
            self.drafter.push(token)

    def budget(self, limit: int) -> int:
        """How many tokens to draft this step: at most ``limit`` (room left in the context and
        token budget), fewer when the draft length says so, 0 while paused."""
        return max(0, min(limit, self.length.next()))

    def draft(self, limit: int) -> list[int]:
        """This step's n-gram drafts: ``budget(limit)`` tokens at most, none without a match."""
        k = self.budget(limit)
        return self.drafter.draft(k) if k > 0 and self.drafter is not None else []

    def verified(self, drafted: int, accepted: int) -> None:
        """A verify step kept ``accepted`` of its ``drafted`` tokens."""
        self.length.update(drafted, accepted)
        self.stats.add(drafted, accepted)


def residual(p: Sequence[float], q: Sequence[float]) -> list[float]:
    """``max(0, p - q)`` normalized: where a rejected draft's replacement is sampled from.

    When ``p == q`` nothing is left (a draft from the target's own distribution is never
    rejected); ``p`` is returned then.
    """
    diff = [max(0.0, a - b) for a, b in zip(p, q, strict=True)]
    total = sum(diff)
    if total <= 0.0:
        return list(p)
    return [d / total for d in diff]


def accept_draft(
    p: Sequence[float], q: Sequence[float], draft: int, rng: random.Random
) -> tuple[bool, int]:
    """The speculative-sampling rule for one position.

    ``p`` is the target's distribution, ``q`` the draft's, ``draft`` the token drawn from ``q``.
    Returns ``(True, draft)`` with probability ``min(1, p[draft] / q[draft])``, else
    ``(False, t)`` with ``t`` drawn from ``residual(p, q)``; either way the token returned is
    distributed as ``p``.
    """
    qd = q[draft]
    if qd <= 0.0 or rng.random() < min(1.0, p[draft] / qd):
        return True, draft
    weights = residual(p, q)
    return False, rng.choices(range(len(p)), weights=weights)[0]
