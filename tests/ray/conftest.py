"""One local Ray cluster for the Ray tests of a pytest process (a worker of `make test`'s two).

The cluster inherits this process's CPU affinity and environment (the models folder), so its
actors load the test models from `.cache/models` and, on one pinned core, default to one thread.
"""

from __future__ import annotations

import socket
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


@pytest.fixture(scope="session")
def serve_port(ray_cluster: Any) -> int:
    """Ray Serve started on this cluster with its HTTP proxy on a free loopback port: Serve's
    default (8000) would collide between the clusters of two test workers."""
    from ray import serve

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
    serve.start(http_options={"host": "127.0.0.1", "port": port})
    return port
