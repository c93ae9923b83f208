"""Embedding jobs waiting on the worker, cut into batches that fit one embedding decode.

Jobs are served oldest first; a batch is packed by token count (``packing.py``) from as
many jobs as fit the context's token budget and sequence count, so a big job does not starve
small ones for more than one decode, and a job's vectors are delivered together, in the order of
its texts, once its last text is embedded. Pure bookkeeping: the
decode itself is the ``embed`` function the caller passes.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Iterable, Sequence

import numpy as np
import numpy.typing as npt

from ...errors import EngineError, LlamaCppIntegrationError, RequestTimeoutError
from .job import EmbedJob
from .packing import PendingTexts

__all__ = ["EmbedFn", "EmbeddingQueue"]

EmbedFn = Callable[[list[Sequence[int]]], list[npt.NDArray[np.float32]]]


class _Progress:
    """One job: the vectors so far, by text index, and the texts still to embed."""

    def __init__(self, job: EmbedJob) -> None:
        self.job = job
        self.vectors: list[list[float] | None] = [None] * len(job.token_lists)
        self.pending = PendingTexts([len(tokens) for tokens in job.token_lists])
        self.remaining = len(job.token_lists)


class EmbeddingQueue:
    """The embedding jobs of one engine, owned by the worker thread."""

    def __init__(self) -> None:
        self._jobs: deque[_Progress] = deque()

    def __bool__(self) -> bool:
        return bool(self._jobs)

    def add(self, jobs: Iterable[EmbedJob]) -> None:
        self._jobs.extend(_Progress(job) for job in jobs)

    def next_decode_tokens(self, max_tokens: int) -> int:
        """At most how many tokens the next ``step`` with this budget decodes: the budget
        while some pending text fits it, else the oldest job's shortest text, which goes
        alone (the queue must not be empty)."""
        pending = [p.pending for p in self._jobs if p.pending]
        if any(texts.shortest <= max_tokens for texts in pending):
            return max_tokens
        return pending[0].shortest if pending else 0

    def step(self, embed: EmbedFn, *, max_tokens: int, max_texts: int) -> int:
        """Embed one batch of texts from the oldest jobs; deliver the jobs it completes.
        Returns the number of tokens decoded."""
        picked = self._pick(max_tokens, max_texts)
        token_lists = [p.job.token_lists[i] for p, i in picked]
        try:
            vectors = embed(token_lists)
        except EngineError as error:
            for progress in {id(p): p for p, _ in picked}.values():
                self._end(progress, EngineError(str(error)))
            return 0
        for (progress, index), vector in zip(picked, vectors, strict=True):
            progress.vectors[index] = as_floats(vector, progress.job.normalize)
            progress.remaining -= 1
            if progress.remaining == 0:
                self._jobs.remove(progress)
                progress.job.channel.put(_joined(progress))
        return sum(len(tokens) for tokens in token_lists)

    def _pick(self, max_tokens: int, max_texts: int) -> list[tuple[_Progress, int]]:
        """Texts for one decode: the oldest job packs first, younger ones fill what it leaves,
        so a big job cannot starve later callers for more than one decode."""
        picked: list[tuple[_Progress, int]] = []
        budget = max_tokens
        for progress in self._jobs:
            if len(picked) == max_texts or budget <= 0:
                break
            taken = progress.pending.take(budget, max_texts - len(picked))
            budget -= sum(len(progress.job.token_lists[i]) for i in taken)
            picked.extend((progress, i) for i in taken)
        if not picked:
            # The budget may have been cut below every text (to leave room for chats), and
            # every text fits the context itself: the oldest job's shortest goes alone.
            oldest = self._jobs[0]
            picked.append((oldest, oldest.pending.take_shortest()))
        return picked

    def cancel(self, request_id: str, error: LlamaCppIntegrationError) -> bool:
        """End the job ``request_id`` with ``error``; False if it is not here."""
        for progress in self._jobs:
            if progress.job.request_id == request_id:
                self._end(progress, error)
                return True
        return False

    def expire(self, now: float) -> None:
        for progress in list(self._jobs):
            if progress.job.deadline is not None and progress.job.deadline <= now:
                self._end(progress, RequestTimeoutError("the request timed out"))

    def fail_all(self, make_error: Callable[[], LlamaCppIntegrationError]) -> None:
        for progress in list(self._jobs):
            self._end(progress, make_error())

    def _end(self, progress: _Progress, error: LlamaCppIntegrationError) -> None:
        self._jobs.remove(progress)
        error.request_id = progress.job.request_id
        progress.job.channel.put(error)


def as_floats(vector: npt.NDArray[np.float32], normalize: bool) -> list[float]:
    """Plain Python floats (numpy scalars trip up LangChain's checks), unit length if asked."""
    wide = vector.astype(np.float64)
    if normalize:
        norm = float(np.linalg.norm(wide))
        if norm > 0:
            wide = wide / norm
    return [float(x) for x in wide.tolist()]


def _joined(progress: _Progress) -> list[list[float]]:
    """One vector per text: each text's chunks averaged, weighted by their token counts."""
    job = progress.job
    vectors = [v for v in progress.vectors if v is not None]
    if job.chunks is None:
        return vectors
    out: list[list[float]] = []
    start = 0
    for count in job.chunks:
        parts = np.asarray(vectors[start : start + count], dtype=np.float64)
        weights = np.asarray(
            [len(job.token_lists[i]) for i in range(start, start + count)], dtype=np.float64
        )
        mean = (parts * weights[:, None]).sum(axis=0) / weights.sum()
        out.append(as_floats(mean.astype(np.float32), job.normalize))
        start += count
    return out
