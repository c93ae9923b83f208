"""What an engine's worker publishes between steps for callers to read: ``EngineStats``."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

from ..results import EngineStats, SlotStats

if TYPE_CHECKING:
    from ..speculation.step import SpeculationStep
    from .cells import SequenceCells
    from .scheduler import Scheduler

__all__ = ["StatsBoard", "snapshot"]


# The most often a generating step publishes (``due``): a snapshot asks llama.cpp about every
# slot, a cost that counts when steps are fast; admissions and endings publish at once.
_PUBLISH_EVERY_S = 0.005


class StatsBoard:
    """Where the worker publishes an engine's latest ``EngineStats`` for callers to read."""

    def __init__(self) -> None:
        self._latest = EngineStats(running=0, waiting=0, steps=0, slots=())
        self.published_at = 0.0  # time.perf_counter() of the last publication

    @property
    def latest(self) -> EngineStats:
        return self._latest

    @latest.setter
    def latest(self, stats: EngineStats) -> None:
        self._latest = stats
        self.published_at = time.perf_counter()

    def due(self, now: float) -> bool:
        """Whether a step at ``now`` (``time.perf_counter()``) should publish again."""
        return now - self.published_at >= _PUBLISH_EVERY_S


def snapshot(
    scheduler: Scheduler,
    cells: SequenceCells,
    speculation: SpeculationStep | None,
    *,
    running: int,
    steps: int,
    threads: int,
) -> EngineStats:
    """The engine's statistics now: every slot's cache and cells, and drafts so far."""
    slots = []
    for slot in scheduler.slots:
        draft = 0 if speculation is None else speculation.draft_cells(slot.seq_id)
        held = cells.held(slot.seq_id)
        slots.append(SlotStats(slot.seq_id, slot.busy, len(slot.cached), held, draft))
    return EngineStats(
        running=running,
        waiting=0,
        steps=steps,
        slots=tuple(slots),
        drafted_tokens=0 if speculation is None else speculation.stats.drafted,
        accepted_tokens=0 if speculation is None else speculation.stats.accepted,
        shared_prompt_tokens=scheduler.shared_tokens,
        evicted_cached_tokens=scheduler.evicted_tokens,
        kv_cells_allocated=cells.n_cells if cells.made else 0,
        decode_threads=threads,
    )
