"""Every exception the package raises on purpose.

The tree::

    LlamaCppIntegrationError            base of everything below
    ├── ModelLoadError                  missing / truncated / non-GGUF file, llama.cpp refused it
    ├── InvalidRequestError (ValueError)  the request itself is wrong; nothing was generated
    │   ├── ContextOverflowError        prompt (+ max_tokens) does not fit one sequence's context
    │   ├── ChatTemplateError           no chat template, or the template failed to render
    │   ├── SchemaNotSupportedError     a JSON schema part no grammar here can express
    │   ├── UnsupportedContentError     a message part of a kind the package cannot pass on
    │   └── ImageInputNotSupportedError an image given to a model without an image projector
    ├── EngineOverloadedError           the admission queue stayed full
    ├── EngineClosedError               the engine was closed (or its worker died)
    ├── RequestCancelledError           the request was cancelled before it finished
    ├── RequestTimeoutError (TimeoutError)  the request ran past its own timeout
    ├── OutputTruncatedError            max_tokens ended a structured answer before it was whole
    ├── ToolCallParseError              model text claimed to be a tool call but is not a valid one
    └── EngineError                     llama.cpp failed while serving the request

Errors that belong to one request carry its ``request_id``; the ones that end a request part-way
also carry the text generated so far in ``partial_text``.
"""

from __future__ import annotations

__all__ = [
    "ChatTemplateError",
    "ContextOverflowError",
    "EngineClosedError",
    "EngineError",
    "EngineOverloadedError",
    "ImageInputNotSupportedError",
    "InvalidRequestError",
    "LlamaCppIntegrationError",
    "ModelLoadError",
    "OutputTruncatedError",
    "RequestCancelledError",
    "RequestTimeoutError",
    "SchemaNotSupportedError",
    "ToolCallParseError",
    "UnsupportedContentError",
]


class LlamaCppIntegrationError(Exception):
    """Base class of every error raised on purpose by this package."""

    def __init__(self, message: str, *, request_id: str | None = None) -> None:
        super().__init__(message)
        self.request_id = request_id


class ModelLoadError(LlamaCppIntegrationError):
    """The model file could not be used: it names the path and the reason."""

    def __init__(self, path: str, reason: str) -> None:
        super().__init__(f"cannot load model {path!r}: {reason}")
        self.path = path
        self.reason = reason


class InvalidRequestError(LlamaCppIntegrationError, ValueError):
    """The request is malformed (bad parameter, empty input, ...); nothing was generated."""


class ContextOverflowError(InvalidRequestError):
    """The prompt, plus the tokens asked for, does not fit the per-sequence context."""

    def __init__(
        self,
        message: str,
        *,
        n_prompt_tokens: int,
        n_ctx: int,
        request_id: str | None = None,
    ) -> None:
        super().__init__(message, request_id=request_id)
        self.n_prompt_tokens = n_prompt_tokens
        self.n_ctx = n_ctx


class ChatTemplateError(InvalidRequestError):
    """The model has no chat template (and none was given), or rendering it failed."""


class SchemaNotSupportedError(InvalidRequestError):
    """A JSON schema uses something the grammar converter cannot express; ``path`` names it."""

    def __init__(self, message: str, *, path: str, request_id: str | None = None) -> None:
        super().__init__(f"{message} (at {path})", request_id=request_id)
        self.path = path


class UnsupportedContentError(InvalidRequestError):
    """A message content part (audio, file, ...) that no model path here accepts."""


class ImageInputNotSupportedError(UnsupportedContentError):
    """An image was given, but the loaded model has no image projector (``mmproj``)."""


class EngineOverloadedError(LlamaCppIntegrationError):
    """The admission queue was full for as long as the caller was willing to wait."""


class EngineClosedError(LlamaCppIntegrationError):
    """The engine was closed, or its worker stopped; it serves no more requests."""


class _PartialResultError(LlamaCppIntegrationError):
    def __init__(
        self, message: str, *, request_id: str | None = None, partial_text: str = ""
    ) -> None:
        super().__init__(message, request_id=request_id)
        self.partial_text = partial_text


class RequestCancelledError(_PartialResultError):
    """The request was cancelled (by its handle, its caller's task, or a dropped stream)."""


class RequestTimeoutError(_PartialResultError, TimeoutError):
    """The request did not finish within the timeout it was given."""


class EngineError(_PartialResultError):
    """llama.cpp reported a failure while serving this request; other requests go on."""


class OutputTruncatedError(_PartialResultError):
    """Generation stopped at ``max_tokens`` inside a structured answer; ``partial_text`` has it."""


class ToolCallParseError(_PartialResultError):
    """Text that opens a tool call is not a well-formed one (unconstrained output only).

    ``partial_text`` holds the whole text; ``position`` is the offset where parsing failed.
    """

    def __init__(
        self,
        message: str,
        *,
        position: int,
        request_id: str | None = None,
        partial_text: str = "",
    ) -> None:
        super().__init__(
            f"{message} (at character {position})",
            request_id=request_id,
            partial_text=partial_text,
        )
        self.position = position
