"""A failure behind a Serve handle reaches ``RayEngine``'s caller as one of our errors."""

from __future__ import annotations

import pytest

from llamacpp_integrations import errors

pytest.importorskip("ray")

from ray.exceptions import ActorDiedError, RayTaskError, TaskCancelledError
from ray.serve.exceptions import (
    BackPressureError,
    DeploymentUnavailableError,
    ReplicaUnavailableError,
)

from llamacpp_integrations.ray.failures import deployment_url, typed_error

URL = deployment_url("app", "EngineService")


def wrapped(cause: BaseException, name: str = "agenerate") -> RayTaskError:
    """``cause`` as a replica's failure reaches the caller (Ray's task error, as its cause)."""
    error = RayTaskError(name, "Traceback ...", cause, proctitle="replica", pid=1, ip="10.0.0.1")
    return error.as_instanceof_cause()


def test_a_typed_error_from_the_replica_comes_back_as_raised() -> None:
    raised = errors.ContextOverflowError("too long", n_prompt_tokens=900, n_ctx=512)
    assert typed_error(wrapped(raised), url=URL) is raised
    # wrapped twice: a replica that called another through its handle
    assert typed_error(wrapped(wrapped(raised)), url=URL) is raised


@pytest.mark.parametrize(
    "failure",
    [
        ActorDiedError(),
        ReplicaUnavailableError("replica-1"),
        DeploymentUnavailableError("app#EngineService"),
        wrapped(ActorDiedError()),
    ],
    ids=["actor-died", "replica-gone", "deployment-unavailable", "wrapped-actor-died"],
)
def test_a_dead_or_missing_replica_is_server_unavailable(failure: Exception) -> None:
    before = typed_error(failure, url=URL, request_id="r1")
    assert isinstance(before, errors.ServerUnavailableError)
    assert before.url == URL and before.retryable and before.request_id == "r1"
    after = typed_error(failure, url=URL, started=True)
    assert isinstance(after, errors.ServerUnavailableError) and not after.retryable


def test_back_pressure_is_overload_and_a_cancel_is_a_cancel() -> None:
    full = typed_error(BackPressureError(9, 8), url=URL, request_id="r2")
    assert isinstance(full, errors.EngineOverloadedError) and full.request_id == "r2"
    cancelled = typed_error(TaskCancelledError(), url=URL, request_id="r3")
    assert isinstance(cancelled, errors.RequestCancelledError)


def test_other_failures_stay_as_ray_raised_them() -> None:
    bug = wrapped(KeyError("x"))
    assert typed_error(bug, url=URL) is bug
    plain = RuntimeError("not from Ray")
    assert typed_error(plain, url=URL) is plain
