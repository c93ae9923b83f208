"""What Ray reserved for the calling actor, read only where Ray is already in use.

This module imports no Ray: outside a Ray worker it answers ``None`` without loading it.
"""

from __future__ import annotations

import sys

from ..optional import require

__all__ = ["actor_cpus"]


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
