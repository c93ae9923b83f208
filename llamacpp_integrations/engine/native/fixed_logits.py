"""A generation context whose decode does nothing: a test seam for measuring the engine alone.

``FixedLogitsContext`` fills llama.cpp's batch exactly as ``GenerationContext`` does, then skips
``llama_decode`` and answers every logits row with the same fixed distribution. Whatever a step
costs on top of that is the engine's own work (scheduling, batch building, sampling, output,
the channel to the caller), which is what ``benchmarks/bench_overhead.py`` measures. Nothing in
the engine uses it: the benchmark puts it in place of ``GenerationContext`` where the worker makes
its context, so production code pays nothing for it (``_run`` is one method call).

Only greedy requests that no penalty, bias or grammar changes read their rows through
``logits_view``; a sampled request's chain reads llama.cpp's logits buffer, which no decode
filled, so the benchmark sends greedy requests only.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import numpy.typing as npt

from .runner import DecodeStatus, GenerationContext

__all__ = ["FixedLogitsContext"]


class FixedLogitsContext(GenerationContext):
    """A ``GenerationContext`` (same arguments) whose decodes only fill the batch; every row of
    logits is ``fixed_logits(n_vocab)``."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._row = fixed_logits(self.model.n_vocab)
        self.decodes = 0

    def _run(self, batch: Any) -> int:
        self.decodes += 1
        return DecodeStatus.OK

    def logits_view(self, index: int) -> npt.NDArray[np.float32]:
        return self._row

    def argmax_rows(self, indices: Sequence[int]) -> list[int]:
        return [int(self._row.argmax())] * len(indices)


def fixed_logits(n_vocab: int, seed: int = 0) -> npt.NDArray[np.float32]:
    """A fixed row of ``n_vocab`` logits (standard normal, scaled like a model's), read-only."""
    row = (np.random.default_rng(seed).standard_normal(n_vocab) * 3.0).astype(np.float32)
    row.flags.writeable = False
    return row
