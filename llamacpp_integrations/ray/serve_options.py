"""``ServeOptions``: how the llama.cpp deployment scales, drains and is checked, as Serve's
deployment options. Pure: no Ray.

One replica is one engine: the weights once, ``n_seq_max`` sequences decoded together by
continuous batching. So the number of calls a replica is sent at once (Serve's
``max_ongoing_requests``) defaults to twice ``n_seq_max``: a full batch running and the next one
queued inside the engine, where a finished sequence's place is refilled at the next step
instead of a round trip later; past that, calls wait in Serve's queue, where the router can
still send them to a replica that frees up first. Autoscaling aims at ``n_seq_max`` calls per
replica (a full batch) unless told otherwise.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from typing import Any

from ..errors import InvalidRequestError
from .prefix_keys import DEFAULT_LOAD_FACTOR

__all__ = ["ServeOptions"]


@dataclass(frozen=True)
class ServeOptions:
    """The deployment's scaling, health and drain settings (Serve's names where it has them).

    Attributes:
        replicas: Replicas kept running (ignored when ``autoscaling`` is set).
        autoscaling: Serve's ``autoscaling_config`` (``min_replicas``, ``max_replicas``,
            ``target_ongoing_requests``...), passed through; ``None``: a fixed count.
        max_ongoing_requests: Calls one replica takes at once (``None``: twice the engine's
            ``n_seq_max``).
        num_cpus: CPUs each replica reserves (llama.cpp's threads should match).
        num_gpus: GPUs each replica reserves.
        health_check_period_s: Seconds between Serve's health checks of a replica.
        health_check_timeout_s: Seconds a health check may take before the replica is
            replaced.
        graceful_shutdown_wait_loop_s: Seconds between a draining replica's checks for
            calls still running.
        graceful_shutdown_timeout_s: Seconds a draining replica (scaled down, redeployed)
            gets to finish its calls before it is stopped.
        load_factor: The prefix router's bound on one replica's load, against the average
            (``>= 1``).
        ray_actor_options: Further ``ray_actor_options`` (resources, runtime_env...), merged
            over the CPUs and GPUs above.
        ingress_replicas: Replicas of the HTTP ingress (it holds no model and reserves no
            CPU; one per node spreads the reading of bodies).
    """

    replicas: int = 1
    autoscaling: Mapping[str, Any] | None = None
    max_ongoing_requests: int | None = None
    num_cpus: float = 1.0
    num_gpus: float = 0.0
    health_check_period_s: float = 10.0
    health_check_timeout_s: float = 30.0
    graceful_shutdown_wait_loop_s: float = 2.0
    graceful_shutdown_timeout_s: float = 30.0
    load_factor: float = DEFAULT_LOAD_FACTOR
    ray_actor_options: Mapping[str, Any] = field(default_factory=dict)
    ingress_replicas: int = 1

    def __post_init__(self) -> None:
        problems = []
        if self.autoscaling is None and self.replicas < 1:
            problems.append("replicas must be >= 1")
        if self.ingress_replicas < 1:
            problems.append("ingress_replicas must be >= 1")
        if self.max_ongoing_requests is not None and self.max_ongoing_requests < 1:
            problems.append("max_ongoing_requests must be >= 1")
        if self.num_cpus < 0 or self.num_gpus < 0:
            problems.append("num_cpus and num_gpus must be >= 0")
        if not self.load_factor >= 1.0:
            problems.append("load_factor must be >= 1")
        if problems:
            raise InvalidRequestError("; ".join(problems))

    @classmethod
    def from_mapping(cls, values: Mapping[str, Any]) -> ServeOptions:
        """The options a config file's ``args`` give (``InvalidRequestError`` naming a key
        that is not one of them)."""
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(values) - known)
        if unknown:
            raise InvalidRequestError(
                f"unknown Ray Serve option(s) {unknown}; known: {sorted(known)}"
            )
        return cls(**values)

    def deployment_options(self, n_seq_max: int) -> dict[str, Any]:
        """Keyword arguments for ``Deployment.options``, for engines of ``n_seq_max``
        sequences (the request router is set by ``serve_app``)."""
        ongoing = self.max_ongoing_requests or 2 * n_seq_max
        options: dict[str, Any] = {
            "max_ongoing_requests": ongoing,
            "ray_actor_options": {
                "num_cpus": self.num_cpus,
                "num_gpus": self.num_gpus,
                **self.ray_actor_options,
            },
            "health_check_period_s": self.health_check_period_s,
            "health_check_timeout_s": self.health_check_timeout_s,
            "graceful_shutdown_wait_loop_s": self.graceful_shutdown_wait_loop_s,
            "graceful_shutdown_timeout_s": self.graceful_shutdown_timeout_s,
        }
        if self.autoscaling is not None:
            options["autoscaling_config"] = {
                "target_ongoing_requests": min(n_seq_max, ongoing),
                **self.autoscaling,
            }
        else:
            options["num_replicas"] = self.replicas
        return options
