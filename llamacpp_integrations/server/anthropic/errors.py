"""Errors in Anthropic's shape: ``{"type": "error", "error": {"type", "message"}}``, and the
``error`` event that ends a stream which already began.

The status is the one every endpoint answers with (``errors.ERROR_TABLE``); the error's
``type`` is Anthropic's name for that status, which its SDK shows beside the status it maps to
an exception class. Streams end with ``message_stop`` (or the error event), never OpenAI's
``[DONE]``.
"""

from __future__ import annotations

from typing import Any

from ..errors import ApiError, invalid_request
from ..exchange import WireShape
from ..streaming import named_sse

__all__ = [
    "ANTHROPIC_SHAPE",
    "anthropic_error_body",
    "anthropic_error_event",
    "anthropic_error_type",
    "bad_request",
    "speaks_anthropic",
]

_TYPES = {
    400: "invalid_request_error",
    401: "authentication_error",
    403: "permission_error",
    404: "not_found_error",
    413: "request_too_large",
    429: "rate_limit_error",
    503: "overloaded_error",
    504: "timeout_error",
    529: "overloaded_error",
}


def bad_request(message: str, param: str) -> ApiError:
    """A 400 in the shape every Anthropic translation error takes: the field at fault named
    in the message too, since Anthropic's error shape has no ``param``."""
    return invalid_request(f"{param}: {message}", param)


def anthropic_error_type(status: int) -> str:
    """Anthropic's error type for an HTTP status."""
    return _TYPES.get(status, "api_error" if status >= 500 else "invalid_request_error")


def anthropic_error_body(error: ApiError) -> dict[str, Any]:
    """The JSON body of ``error``, in Anthropic's shape."""
    return {
        "type": "error",
        "error": {"type": anthropic_error_type(error.status), "message": error.message},
    }


def anthropic_error_event(error: ApiError) -> bytes:
    """``error`` as the ``error`` event of a stream that already began."""
    return named_sse("error", anthropic_error_body(error))


def speaks_anthropic(path: str) -> bool:
    """Whether a request path is one of the Anthropic endpoints (whose gatekeepers' errors,
    a bad key or a body too large, are answered in Anthropic's shape too)."""
    return path == "/v1/messages" or path.startswith("/v1/messages/")


ANTHROPIC_SHAPE = WireShape(anthropic_error_body, anthropic_error_event, None)
"""How the Anthropic endpoints answer failures."""
