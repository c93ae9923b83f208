"""Log-probabilities of generated tokens, from the raw logits of the decode that produced them.

Runs on the worker thread, and only for requests that ask for log-probabilities. The work per
token is one pass over the vocabulary in float64 (the log-sum-exp), plus a partial sort of the
logits when the most likely tokens are wanted; the text of each token is looked up once and kept.
"""

from __future__ import annotations

import math
from typing import Protocol

import numpy as np
import numpy.typing as npt

from ..results import TokenLogprob, TopLogprob

__all__ = ["LogprobComputer", "Vocabulary"]


class Vocabulary(Protocol):
    """What the computer needs of a model: its size and each token's bytes."""

    @property
    def n_vocab(self) -> int: ...

    def token_to_piece(self, token: int, *, special: bool = False) -> bytes: ...


class LogprobComputer:
    """Turns a logits row into a ``TokenLogprob``; owned by the worker thread (not thread-safe)."""

    def __init__(self, model: Vocabulary) -> None:
        self._model = model
        self._scratch = np.empty(model.n_vocab, dtype=np.float64)
        # Token text by (id, special): the vocabulary is fixed, and a lookup is a ctypes call.
        self._pieces: dict[tuple[int, bool], tuple[str, tuple[int, ...]]] = {}

    def compute(
        self, logits: npt.NDArray[np.float32], token: int, n_top: int, *, special: bool
    ) -> TokenLogprob:
        """The log-probability of ``token`` and the ``n_top`` most likely tokens in ``logits``.

        ``logits`` is the raw row of the decode (it is read, never written). The normalizer is
        computed in float64 and shifted by the largest logit, so it neither overflows nor loses
        the small probabilities.
        """
        peak = float(logits.max())
        shifted = self._scratch
        np.subtract(logits, peak, out=shifted, dtype=np.float64)
        np.exp(shifted, out=shifted)
        log_norm = peak + math.log(float(shifted.sum()))
        text, raw = self._piece(token, special)
        top: tuple[TopLogprob, ...] = ()
        n_top = min(n_top, len(logits))
        if n_top > 0:
            # The order of the logits is the order of the probabilities: partition the float32 row.
            ids = np.argpartition(logits, len(logits) - n_top)[-n_top:]
            values = logits[ids].astype(np.float64)
            ids = ids[np.lexsort((ids, -values))]  # most likely first, ties by lower id
            top = tuple(self._top(int(i), float(logits[i]) - log_norm, special) for i in ids)
        return TokenLogprob(
            token=text,
            token_id=token,
            logprob=float(logits[token]) - log_norm,
            bytes=raw,
            top=top,
        )

    def _top(self, token: int, logprob: float, special: bool) -> TopLogprob:
        text, raw = self._piece(token, special)
        return TopLogprob(token=text, token_id=token, logprob=logprob, bytes=raw)

    def _piece(self, token: int, special: bool) -> tuple[str, tuple[int, ...]]:
        key = (token, special)
        piece = self._pieces.get(key)
        if piece is None:
            raw = self._model.token_to_piece(token, special=special)
            piece = self._pieces[key] = (raw.decode("utf-8", errors="replace"), tuple(raw))
        return piece
