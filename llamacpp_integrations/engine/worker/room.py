"""How many KV cells the sequences of a step need, and a plan without the requests that ended.

Pure bookkeeping for ``core.py``: with a stream per sequence, the worker grows the streams
(``SequenceCells.grow``) before a step whose sequences would not fit, and a request that ends
there leaves the step's plan.
"""

from __future__ import annotations

from collections.abc import Mapping, Set

from .requests import PreparedRequest
from .sequences import StepPlan

__all__ = ["cells_needed", "cells_to", "drop_ended"]


def cells_to(request: PreparedRequest, position: int) -> int:
    """Cells a request's sequence holds once it reaches ``position``: one per position, and
    for models whose images take fewer positions than embeddings (M-RoPE), the extra ones."""
    media = request.media
    if media is None:
        return position
    extra = sum(
        span.n_tokens - span.n_pos for start, span in media.spans.items() if start < position
    )
    return position + extra


def cells_needed(plan: StepPlan, requests: Mapping[str, PreparedRequest]) -> dict[str, int]:
    """The cells each request of ``plan`` holds after the step, by request id."""
    needs = {
        seq.request_id: cells_to(requests[seq.request_id], entry.end_pos)
        for seq, entry in plan.entries
    }
    image = plan.image
    if image is not None:
        request = requests[image.seq.request_id]
        needs[image.seq.request_id] = cells_to(request, image.start + image.n_pos)
    return needs


def drop_ended(plan: StepPlan, running: Set[str]) -> None:
    """Take the entries and image of requests no longer ``running`` out of ``plan``."""
    kept = [i for i, (seq, _) in enumerate(plan.entries) if seq.request_id in running]
    if len(kept) < len(plan.entries):
        renumbered = {old: new for new, old in enumerate(kept)}
        plan.entries = [plan.entries[i] for i in kept]
        groups = [[renumbered[i] for i in group if i in renumbered] for group in plan.groups]
        plan.groups = [group for group in groups if group]
    if plan.image is not None and plan.image.seq.request_id not in running:
        plan.image = None
