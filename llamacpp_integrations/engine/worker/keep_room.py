"""Room in the KV cache, carried out: what ``room.py`` decides, done on the context.

``room.py`` decides as data; ``RoomKeeper`` does the part that touches the cells: it grows the
streams and hands the cost to ``after_growth``, frees idle cells until a decode fits, has one
sequence give way in a full unified cache, and applies each ``RoomDecision`` (the scheduler
forgets lost cells, pauses who waits). The requests a decision ends go back to the core
(``end``), which ends every request in one place.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence

from ...errors import EngineError
from ..native.runner import DecodeStatus
from .cells import SequenceCells
from .room import RoomDecision, after_growth, give_way, plan_growth
from .scheduler import Scheduler
from .sequences import Join, StepPlan

__all__ = ["RoomKeeper"]


class RoomKeeper:
    """Keeps room in one core's KV cache, on the worker thread.

    ``end`` ends the requests a decision ends (by request id, with their errors), ``forget``
    drops a sequence's drafts when its cells go, ``publish`` puts fresh stats out when cells
    were freed.
    """

    def __init__(
        self,
        cells: SequenceCells,
        scheduler: Scheduler,
        n_seq_max: int,
        *,
        end: Callable[[Mapping[str, EngineError]], None],
        forget: Callable[[int], None],
        publish: Callable[[], None],
    ) -> None:
        self._cells = cells
        self._scheduler = scheduler
        self._n_seq_max = n_seq_max
        self._end = end
        self._forget = forget
        self._publish = publish

    def grow(self, needs: dict[str, int], joins: Sequence[Join] = ()) -> RoomDecision:
        """Grow the KV streams if a sequence needs more cells than they hold (``needs``, by
        request id), and apply what that decided (``room.after_growth``)."""
        cells = self._cells
        growth = plan_growth(needs, stream_cells=cells.stream_cells, limit=cells.stream_limit)
        if growth is None:
            return RoomDecision()
        lost, error = cells.grow(growth.stream_cells)
        decision = after_growth(
            growth,
            self._scheduler.running,
            joins,
            lost=lost,
            error=error,
            stream_cells=cells.stream_cells,
            n_seq_max=self._n_seq_max,
            kept=cells.made,
        )
        self.apply(decision)
        return decision

    def apply(self, decision: RoomDecision) -> None:
        """Carry out what keeping room decided; the requests it ends go to ``end``."""
        self._scheduler.lost(decision.lost)
        for seq in decision.pauses:
            self._scheduler.pause(seq)
        if decision.ends:
            self._end(decision.ends)

    def retry(self, decode: Callable[[], int], needed: int) -> int:
        """No room for ``needed`` cells: free idle cells, oldest block first, and decode again
        until it fits, then all idle cells (partial blocks may be what it lacked); the status."""
        status = DecodeStatus.NO_KV_SLOT
        while status == DecodeStatus.NO_KV_SLOT and self._cells.evicts:
            if not self._cells.cut(self._scheduler.evict(needed)):
                break
            self._publish()
            status = decode()
        if status == DecodeStatus.NO_KV_SLOT:
            self.drop_idle()
            status = decode()
        return status

    def give_way(self, plan: StepPlan, group: list[int]) -> list[int]:
        """The unified cache has no room for the group even with idle cells freed: one of its
        sequences gives up its cells (``room.give_way``). The rest of the group."""
        asked = [plan.entries[index][0] for index in group]
        seq, decision = give_way(self._scheduler.running, asked, self._cells.n_cells)
        self._cells.drop(seq.slot.seq_id)
        self.apply(decision)
        return [index for index in group if plan.entries[index][0] is not seq]

    def drop_idle(self) -> None:
        """Free the cells of every slot no request holds."""
        if self._cells.made:
            for seq_id in self._scheduler.drop_idle():
                self._cells.drop(seq_id)
                self._forget(seq_id)
        self._publish()
