"""The cells a step's sequences need (what decides whether KV streams grow), and a plan
without the requests that ended while the worker made room."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any, cast

from llamacpp_integrations.engine.batch import BatchEntry
from llamacpp_integrations.engine.worker.requests import PreparedRequest
from llamacpp_integrations.engine.worker.room import cells_needed, cells_to, drop_ended
from llamacpp_integrations.engine.worker.scheduler import Scheduler
from llamacpp_integrations.engine.worker.sequences import ImageStep, StepPlan


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
