"""One local Ray cluster for the Ray tests of a pytest process (a worker of `make test`'s two).

The cluster inherits this process's CPU affinity and environment (the models folder), so its
actors load the test models from `.cache/models` and, on one pinned core, default to one thread.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

ray = pytest.importorskip("ray")


@pytest.fixture(scope="session")
def ray_cluster() -> Iterator[Any]:
    """A local cluster with two logical CPUs (two one-CPU actors fit), stopped after the session."""
    context = ray.init(
        num_cpus=2,
        include_dashboard=False,
        log_to_driver=False,
        configure_logging=False,
    )
    try:
        yield context
    finally:
        ray.shutdown()
