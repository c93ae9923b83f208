"""The threads an engine in a Ray actor decodes on: what Ray reserved for the actor.

Ray places actors by the CPUs they reserve (``num_cpus``), not by the cores they use: an engine
that counted the node's cores would have every actor on the node share them. Read only where
Ray is already in use: outside a Ray worker this answers ``None`` without importing Ray.
"""

from __future__ import annotations

import sys
from collections.abc import Mapping
from typing import Any

from ..engine.cpu_budget import read_cpu_budget
from ..optional import require

__all__ = ["actor_cpus", "actor_threads", "with_actor_threads"]


def actor_cpus() -> int | None:
    """The whole CPUs Ray reserved for the calling actor, or ``None`` outside one (in the
    driver, or where Ray was never imported)."""
    if "ray" not in sys.modules:  # nothing imported Ray: this is not a Ray worker
        return None
    ray = require("ray", "ray")
    if not ray.is_initialized():
        return None
    context = ray.get_runtime_context()
    if context.get_actor_id() is None:  # the driver (or a task): no reservation of its own
        return None
    cpus = context.get_assigned_resources().get("CPU")
    return max(1, int(cpus)) if cpus else None


def actor_threads() -> int | None:
    """The default ``n_threads`` of an engine made in the calling actor: its reserved whole
    CPUs, no more than the cores the process may use (``engine/cpu_budget.py``: a reservation
    larger than the cores, or than a pod's CPU limit, gains nothing); ``None`` outside one."""
    cpus = actor_cpus()
    return None if cpus is None else min(cpus, read_cpu_budget().threads)


def with_actor_threads(settings: Mapping[str, Any]) -> dict[str, Any]:
    """Engine ``settings`` with ``n_threads`` set to ``actor_threads()`` where they leave it
    unset (absent or ``None``) in a Ray actor; otherwise as they are."""
    chosen = dict(settings)
    if chosen.get("n_threads") is None:
        threads = actor_threads()
        if threads is not None:
            chosen["n_threads"] = threads
    return chosen
