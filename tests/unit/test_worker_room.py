"""Room in the KV cache as data: the cells a step's sequences need, how far the streams grow,
who ends when they cannot or when cells were lost, who gives way in a full unified cache, and
a plan without the requests that ended while the worker made room."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any, cast

import pytest

from llamacpp_integrations.engine.batch import BatchEntry
from llamacpp_integrations.engine.worker.requests import PreparedRequest
from llamacpp_integrations.engine.worker.room import (
    Growth,
    after_growth,
    cells_needed,
    cells_to,
    drop_ended,
    give_way,
    plan_growth,
)
from llamacpp_integrations.engine.worker.scheduler import Scheduler
from llamacpp_integrations.engine.worker.sequences import ImageStep, Join, StepPlan
from llamacpp_integrations.errors import EngineError, KVCacheFullError


def request(spans: dict[int, tuple[int, int]] | None = None) -> PreparedRequest:
    """A request whose images are ``start -> (positions, embeddings)``."""
    media = None
    if spans is not None:
        media = SimpleNamespace(
            spans={s: SimpleNamespace(n_pos=p, n_tokens=t) for s, (p, t) in spans.items()}
        )
    return cast(PreparedRequest, cast(Any, SimpleNamespace(media=media)))


def test_an_image_with_fewer_positions_than_embeddings_takes_its_embeddings_in_cells() -> None:
    assert cells_to(request(), 100) == 100
    m_rope = request({10: (4, 16)})  # 16 embeddings over 4 positions
    assert cells_to(m_rope, 10) == 10
    assert cells_to(m_rope, 14) == 26
    assert cells_to(m_rope, 20) == 32


def test_needs_and_dropping_ended_requests_from_a_plan() -> None:
    scheduler = Scheduler(n_seq_max=3, n_batch=64)
    a = scheduler.admit("a", list(range(1, 30)))
    b = scheduler.admit("b", list(range(1, 10)))
    c = scheduler.admit("c", [5, -7, -7, -7, 6], {1: 3})
    plan = StepPlan(
        [
            (a, BatchEntry(a.slot.seq_id, list(range(1, 30)), 0, True)),
            (b, BatchEntry(b.slot.seq_id, list(range(1, 9)), 0, False)),
            (c, BatchEntry(c.slot.seq_id, [5], 0, False)),
        ],
        image=ImageStep(c, 1, 3),
        groups=[[0], [1, 2]],
    )
    requests = {"a": request(), "b": request(), "c": request({1: (3, 12)})}
    assert cells_needed(plan, requests) == {"a": 29, "b": 8, "c": 1 + 12}
    drop_ended(plan, {"a", "c"})  # b ended
    assert [seq.request_id for seq, _ in plan.entries] == ["a", "c"]
    assert plan.groups == [[0], [1]] and plan.image is not None
    drop_ended(plan, {"a"})
    assert plan.groups == [[0]] and plan.image is None


def test_streams_grow_by_doubling_to_the_largest_need_and_no_further_than_the_limit() -> None:
    assert plan_growth({"a": 300, "b": 200}, stream_cells=512, limit=2048) is None  # fits
    assert plan_growth({}, stream_cells=512, limit=2048) is None
    assert plan_growth({"a": 600}, stream_cells=256, limit=2048) == Growth(1024, {"a": 600})
    assert plan_growth({"a": 3}, stream_cells=0, limit=2048) == Growth(4, {"a": 3})  # from 1
    assert plan_growth({"a": 1500}, stream_cells=512, limit=1200) == Growth(1200, {"a": 1500})
    assert plan_growth({"a": 1500}, stream_cells=1200, limit=1200) is None  # whole already


def _running(n: int) -> Scheduler:
    scheduler = Scheduler(n_seq_max=4, n_batch=512)
    for i in range(n):
        scheduler.admit(f"r{i}", list(range(100 * (i + 1), 100 * (i + 1) + 10)))
    return scheduler


def test_a_growth_that_lost_cells_ends_their_requests_and_the_followers_copying_them() -> None:
    scheduler = _running(3)
    a, _, c = scheduler.running
    joins = [Join(a.slot, c.slot, 8)]  # c was to copy a's first cells this step
    growth = Growth(1024, {"r1": 600})
    decision = after_growth(
        growth, scheduler.running, joins, lost=[a.slot.seq_id], stream_cells=1024, n_seq_max=4
    )
    assert set(decision.ends) == {"r0", "r2"} and decision.failure is None
    assert "lost while the cache grew" in str(decision.ends["r0"])
    assert "prefix it was to copy was lost" in str(decision.ends["r2"])
    assert decision.lost == {a.slot.seq_id}
    clean = after_growth(growth, scheduler.running, joins, stream_cells=1024, n_seq_max=4)
    assert not clean.ends and not clean.lost
    # Before the context is first made there is none to keep: growing only sized it.
    sized = after_growth(growth, scheduler.running, stream_cells=1024, n_seq_max=4, kept=False)
    assert not sized.ends and not sized.lost


def test_streams_that_cannot_grow_end_only_the_requests_that_needed_them() -> None:
    scheduler = _running(2)
    a, _ = scheduler.running
    error = EngineError("could not create the generation context (simulated)")
    growth = Growth(1024, {"r0": 600, "r1": 100})
    decision = after_growth(
        growth, scheduler.running, lost=[], error=error, stream_cells=512, n_seq_max=4
    )
    assert list(decision.ends) == ["r0"] and decision.failure is error
    assert isinstance(decision.ends["r0"], KVCacheFullError)
    assert "could not grow to 600 cells per sequence" in str(decision.ends["r0"])
    assert decision.lost == {a.slot.seq_id}  # its cells go with it: no follower copies them


def test_without_any_context_left_every_request_ends_and_every_cell_is_gone() -> None:
    scheduler = _running(2)
    error = EngineError("not even the old size")
    decision = after_growth(
        Growth(1024, {"r0": 600}),
        scheduler.running,
        error=error,
        stream_cells=512,
        n_seq_max=4,
        kept=False,
    )
    assert set(decision.ends) == {"r0", "r1"}
    assert all(type(e) is EngineError and str(e) == str(error) for e in decision.ends.values())
    assert decision.lost == {0, 1, 2, 3}


def test_a_full_unified_cache_ends_the_newest_answer_or_pauses_the_newest_prompt() -> None:
    scheduler = Scheduler(n_seq_max=3, n_batch=64)
    old = scheduler.admit("a", list(range(100, 110)))
    scheduler.decoded(scheduler.plan())
    old.next_token = 5
    new = scheduler.admit("b", list(range(200, 300)))
    # The decode of this step finds no room: the prompt being read waits.
    asked = [s for s, _ in scheduler.plan().entries]
    seq, decision = give_way(scheduler.running, asked, n_cells=256)
    assert seq is new and decision.pauses == [new] and not decision.ends
    scheduler.pause(new)
    # Only the answer is left to give way: it ends, typed.
    seq, decision = give_way(scheduler.running, [old], n_cells=256)
    assert seq is old and not decision.pauses and list(decision.ends) == ["a"]
    with pytest.raises(KVCacheFullError, match=r"KV cache \(256 cells\) is full"):
        raise decision.ends["a"]


def test_joins_leave_the_plan_with_their_follower_or_their_lost_source() -> None:
    scheduler = _running(3)
    a, b, c = scheduler.running
    plan = StepPlan([], joins=[Join(a.slot, b.slot, 8), Join(a.slot, c.slot, 8)])
    drop_ended(plan, {"r0", "r1", "r2"})
    assert len(plan.joins) == 2
    scheduler.release(c, keep_cache=False)
    drop_ended(plan, {"r0", "r1"})
    assert plan.joins == [Join(a.slot, b.slot, 8)]
    drop_ended(plan, {"r0", "r1"}, lost={a.slot.seq_id})
    assert plan.joins == []
