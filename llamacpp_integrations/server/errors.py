"""Typed errors to HTTP answers in OpenAI's error shape, one table row per error class.

Every failure a client sees is ``{"error": {"message", "type", "param", "code"}}`` with the
status OpenAI's clients expect: 400 for a request that is wrong, 401 for a bad key, 413 for a
body over the limit, 429 (with ``Retry-After``) when the engine's queue is full, 504 when a
request ran past its timeout, 503 while the engine is closed or the server shuts down, 500 for
failures of the model itself.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from ..errors import (
    AudioInputNotSupportedError,
    AudioLoadError,
    ChatTemplateError,
    ContextOverflowError,
    EngineClosedError,
    EngineError,
    EngineOverloadedError,
    ImageInputNotSupportedError,
    ImageLoadError,
    InvalidRequestError,
    LlamaCppIntegrationError,
    ModelLoadError,
    OutputTruncatedError,
    RequestCancelledError,
    RequestTimeoutError,
    SchemaNotSupportedError,
    ServerUnavailableError,
    ToolCallParseError,
    UnknownAdapterError,
    UnknownOptionError,
    UnsupportedContentError,
    UntestedServerError,
)

__all__ = ["ERROR_TABLE", "ApiError", "ErrorRow", "api_error_of", "error_body", "invalid_request"]

RETRY_AFTER_S = 1
"""Seconds a refused client is told to wait (``Retry-After``) when the queue is full."""


@dataclass(frozen=True)
class ErrorRow:
    """How one error class is answered: HTTP status, OpenAI ``type`` and ``code``."""

    error: type[LlamaCppIntegrationError]
    status: int
    type: str
    code: str


# Most specific first: the first row whose class matches answers.
ERROR_TABLE: tuple[ErrorRow, ...] = (
    ErrorRow(UnknownOptionError, 400, "invalid_request_error", "unknown_parameter"),
    ErrorRow(UnknownAdapterError, 400, "invalid_request_error", "unknown_lora_adapter"),
    ErrorRow(ContextOverflowError, 400, "invalid_request_error", "context_length_exceeded"),
    ErrorRow(ChatTemplateError, 400, "invalid_request_error", "chat_template_error"),
    ErrorRow(SchemaNotSupportedError, 400, "invalid_request_error", "schema_not_supported"),
    ErrorRow(ImageInputNotSupportedError, 400, "invalid_request_error", "image_not_supported"),
    ErrorRow(ImageLoadError, 400, "invalid_request_error", "image_load_failed"),
    ErrorRow(AudioInputNotSupportedError, 400, "invalid_request_error", "audio_not_supported"),
    ErrorRow(AudioLoadError, 400, "invalid_request_error", "audio_load_failed"),
    ErrorRow(UnsupportedContentError, 400, "invalid_request_error", "unsupported_content"),
    ErrorRow(InvalidRequestError, 400, "invalid_request_error", "invalid_request"),
    ErrorRow(EngineOverloadedError, 429, "rate_limit_error", "queue_full"),
    ErrorRow(RequestTimeoutError, 504, "timeout_error", "timeout"),
    ErrorRow(EngineClosedError, 503, "server_error", "engine_closed"),
    ErrorRow(RequestCancelledError, 503, "server_error", "cancelled"),
    ErrorRow(ServerUnavailableError, 503, "server_error", "upstream_unavailable"),
    ErrorRow(OutputTruncatedError, 500, "server_error", "output_truncated"),
    ErrorRow(ToolCallParseError, 500, "server_error", "tool_call_parse_failed"),
    ErrorRow(EngineError, 500, "server_error", "engine_error"),
    ErrorRow(UntestedServerError, 500, "server_error", "untested_upstream"),
    ErrorRow(ModelLoadError, 500, "server_error", "model_load_failed"),
    ErrorRow(LlamaCppIntegrationError, 500, "server_error", "internal_error"),
)


@dataclass(frozen=True)
class ApiError(Exception):
    """An error answer: status, message, OpenAI ``type``, ``code`` and ``param``, and extra
    headers (``Retry-After``, ``WWW-Authenticate``)."""

    status: int
    message: str
    type: str = "invalid_request_error"
    code: str | None = None
    param: str | None = None
    headers: tuple[tuple[str, str], ...] = ()

    def __str__(self) -> str:
        return self.message

    def body(self) -> dict[str, Any]:
        """The JSON body, in OpenAI's shape."""
        return error_body(self.message, self.type, self.code, self.param)

    def sse(self) -> bytes:
        """The error as one server-sent event, for a stream that already began."""
        return f"data: {json.dumps(self.body())}\n\n".encode()


def error_body(message: str, type: str, code: str | None, param: str | None) -> dict[str, Any]:
    """``{"error": {...}}`` as OpenAI answers errors."""
    return {"error": {"message": message, "type": type, "param": param, "code": code}}


def invalid_request(message: str, param: str | None = None) -> ApiError:
    """A 400 ``invalid_request`` naming ``param``, the field at fault: how every translation of
    a body answers a value it cannot read."""
    return ApiError(400, message, "invalid_request_error", "invalid_request", param)


def api_error_of(error: BaseException) -> ApiError:
    """The answer to ``error`` per ``ERROR_TABLE`` (500 for anything not in it)."""
    if isinstance(error, ApiError):
        return error
    for row in ERROR_TABLE:
        if isinstance(error, row.error):
            headers: tuple[tuple[str, str], ...] = ()
            if row.status in (429, 503):
                headers = (("Retry-After", str(RETRY_AFTER_S)),)
            code = row.code
            if isinstance(error, ImageLoadError | AudioLoadError):
                code = f"{code}:{error.reason}"
            return ApiError(row.status, str(error), row.type, code, headers=headers)
    # Not one of ours: a bug. Say so without leaking internals.
    return ApiError(500, f"internal error ({type(error).__name__})", "server_error", "internal")
