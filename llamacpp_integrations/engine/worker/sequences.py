"""What the scheduler keeps and plans, as plain data: slots (KV sequences) and what their cells
hold, the requests bound to them, and the steps it plans for the worker to run."""

from __future__ import annotations

import enum
from collections.abc import Hashable, Mapping, Sequence
from dataclasses import dataclass, field

from ..batch import BatchEntry
from ..lora import LoraKey
from ..prefix_index import PrefixIndex

__all__ = ["ImageStep", "Join", "RealignStep", "SeqState", "SeqStatus", "Slot", "StepPlan"]


class SeqStatus(enum.Enum):
    PREFILL = "prefill"
    DECODE = "decode"


@dataclass
class Slot:
    """One KV sequence. ``cached`` is what its cells hold, position by position (kept in the
    scheduler's prefix ``index`` under the slot's ``seq_id``, so that a prompt finds the slots
    sharing its prefix without comparing it with each); the first ``exact`` of them were made
    by reading a prompt of ``prompt_len`` positions in the prefill layout (what another prompt
    may keep of them, see ``PrefillLayout.kept``). ``unread``: the tokens an idle slot being
    realigned has still to read after ``cached``. ``lora``: the adapters its cells were made
    with (``engine/lora.py``): only a request with the same ones may keep them."""

    seq_id: int
    index: PrefixIndex[Hashable] = field(default_factory=PrefixIndex, repr=False)
    last_used: int = 0
    busy: bool = False
    exact: int = 0
    prompt_len: int = 0
    unread: list[int] = field(default_factory=list)
    lora: LoraKey = ()

    def __post_init__(self) -> None:
        self.index.extend(self.seq_id, ())  # listed, holding nothing yet

    @property
    def cached(self) -> Sequence[int]:
        """The tokens its cells hold (read-only: change them with ``extend``, ``hold``,
        ``cut``)."""
        return self.index.tokens(self.seq_id)

    def extend(self, tokens: Sequence[int]) -> None:
        """Its cells now also hold ``tokens``, after the ones they held."""
        self.index.extend(self.seq_id, tokens)

    def hold(self, tokens: Sequence[int]) -> None:
        """Its cells now hold ``tokens`` (a copy of another slot's prefix, or read anew)."""
        self.index.add(self.seq_id, tokens)

    def cut(self, n: int) -> None:
        """The cells from position ``n`` on are gone (and nothing is left to realign)."""
        self.index.truncate(self.seq_id, n)
        self.exact = min(self.exact, n)
        self.unread.clear()


@dataclass
class SeqState:
    """A request bound to a slot: how far its prompt went, and the token to decode next."""

    request_id: str
    prompt: Sequence[int]
    slot: Slot
    n_reused: int
    copy_from: Slot | None = None
    image_spans: Mapping[int, int] = field(default_factory=dict)  # start -> positions
    status: SeqStatus = SeqStatus.PREFILL
    next_token: int | None = None
    leader: SeqState | None = None  # a request reading this one's prefix, waited for
    share_until: int = 0  # positions taken from the leader's cells once they exist
    n_shared: int = 0  # prompt tokens taken from the cells of requests still running
    paused: bool = False  # its cells were given up for lack of room; reads again later
    lora: LoraKey = ()  # the adapters its rows are decoded with (``engine/lora.py``)

    @property
    def n_past(self) -> int:
        return len(self.slot.cached)


@dataclass(frozen=True)
class ImageStep:
    """One image of a prompt to evaluate: ``n_pos`` positions from ``start``."""

    seq: SeqState
    start: int
    n_pos: int


@dataclass(frozen=True)
class RealignStep:
    """One block of a finished answer read again into ``slot``. First, when ``copy_from`` is
    given, the slot takes a copy of that slot's cells before ``entry.start_pos``; with
    ``drop``, the slot's own cells from ``entry.start_pos`` on are dropped (in place)."""

    slot: Slot
    entry: BatchEntry
    copy_from: Slot | None = None
    drop: bool = False


@dataclass(frozen=True)
class Join:
    """A follower's sequence takes the first ``n_tokens`` cells of its leader's."""

    source: Slot
    target: Slot
    n_tokens: int


@dataclass
class StepPlan:
    """One step: ``joins`` applied first, then ``entries`` decoded in ``groups`` (index lists
    into them, one decode each), then at most one ``image`` read."""

    entries: list[tuple[SeqState, BatchEntry]]
    image: ImageStep | None = None
    groups: list[list[int]] = field(default_factory=list)
    joins: list[Join] = field(default_factory=list)
