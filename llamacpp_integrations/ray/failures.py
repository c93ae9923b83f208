"""What a failure behind a Ray Serve handle becomes on the caller's side: one of our errors.

An error raised in a replica reaches the caller wrapped in Ray's ``RayTaskError`` (its
``cause`` is the error itself: ours pickle whole, see ``errors``), so it is unwrapped to the
class and message the local engine raises. Failures of Ray itself are said in our terms:

- a replica, actor, worker or node that died, a deployment that is unavailable, and any other
  Serve failure: ``ServerUnavailableError`` naming the deployment, ``retryable`` while nothing
  was streamed yet (as ``remote/`` does for a llama-server);
- Serve's back-pressure (``max_queued_requests`` reached): ``EngineOverloadedError``;
- a request cancelled on the far side: ``RequestCancelledError``.

Anything else (a bug in code that is not ours) is left as Ray raised it, its traceback intact.
``asyncio.CancelledError`` is never mapped: it is the caller's own cancellation.
"""

from __future__ import annotations

from ..errors import (
    EngineOverloadedError,
    LlamaCppIntegrationError,
    RequestCancelledError,
    ServerUnavailableError,
)
from ..optional import requires

with requires("ray"):
    from ray.exceptions import RayError, RayTaskError, TaskCancelledError
    from ray.serve.exceptions import BackPressureError, RayServeException

__all__ = ["deployment_url", "typed_error"]

_DEPTH = 8  # how many wrappers deep a cause is looked for (a replica calling another's handle)


def deployment_url(app: str, deployment: str) -> str:
    """How errors name a Serve deployment (``ServerUnavailableError.url``)."""
    return f"ray-serve://{app}/{deployment}"


def typed_error(
    error: BaseException,
    *,
    url: str,
    request_id: str | None = None,
    started: bool = False,
) -> BaseException:
    """The error to raise for ``error``, which a handle call to ``url`` raised; ``started``:
    part of the answer was already streamed (a dead replica is then not retryable)."""
    cause = error
    for _ in range(_DEPTH):
        if not isinstance(cause, RayTaskError) or cause.cause is None:
            break
        cause = cause.cause
    if isinstance(cause, LlamaCppIntegrationError):
        return cause
    if isinstance(cause, BackPressureError):
        return EngineOverloadedError(f"{url}: {cause}", request_id=request_id)
    if isinstance(cause, TaskCancelledError):
        return RequestCancelledError(
            f"{url} cancelled the request ({cause})", request_id=request_id
        )
    if isinstance(cause, RayTaskError):
        return error  # a task failed for a reason not ours and not Ray's: its traceback says
    if isinstance(cause, RayError | RayServeException):  # Serve's are no RayError
        return ServerUnavailableError(
            f"{type(cause).__name__}: {cause}",
            url=url,
            retryable=not started,
            request_id=request_id,
        )
    return error
