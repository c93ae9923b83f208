"""Every exception the package raises on purpose.

The tree::

    LlamaCppIntegrationError            base of everything below
    ├── ModelLoadError                  missing / truncated / non-GGUF file, llama.cpp refused it
    ├── MissingDependencyError (ModuleNotFoundError)  an optional dependency is not installed;
    │                                   names the extra that installs it
    ├── InvalidRequestError (ValueError)  the request itself is wrong; nothing was generated
    │   ├── UnknownOptionError (TypeError)  a call got keyword arguments no adapter takes
    │   ├── UnknownAdapterError         a request named a LoRA adapter the engine has not loaded
    │   ├── ContextOverflowError        prompt (+ max_tokens) does not fit one sequence's context
    │   ├── ChatTemplateError           no chat template, or the template failed to render
    │   ├── SchemaNotSupportedError     a JSON schema part no grammar here can express
    │   ├── UnsupportedContentError     a message part of a kind the package cannot pass on
    │   ├── ImageInputNotSupportedError an image given to a model without an image projector
    │   ├── AudioInputNotSupportedError a clip given to a model without an audio projector
    │   ├── ServerFeatureError          a remote server lacks a feature the request needs; names
    │   │                               the feature and the server's build
    │   ├── ImageLoadError              an image input refused or unreadable; ``reason`` says why
    │   └── AudioLoadError              an audio input refused or unreadable; ``reason`` says why
    ├── EngineOverloadedError           the admission queue stayed full
    ├── ServerUnavailableError          a remote server refused, failed (5xx) or is still loading
    │   └── ServerAuthenticationError   it wants an API key, or refused the one given (401/403)
    ├── UntestedServerError             deprecated, no longer raised (every build is used)
    ├── EngineClosedError               the engine was closed (or its worker died)
    ├── RequestCancelledError           the request was cancelled before it finished
    ├── RequestTimeoutError (TimeoutError)  the request ran past its own timeout
    ├── OutputTruncatedError            max_tokens ended a structured answer before it was whole
    ├── ToolCallParseError              model text claimed to be a tool call but is not a valid one
    ├── EngineError                     llama.cpp failed while serving the request
    └── CassetteError                   a test cassette (``llamacpp_integrations.testing``) failed
        ├── CassetteFormatError         missing, corrupt, or of a format version not readable here
        └── UnmatchedRequestError       a replayed request was never recorded; names the nearest

Errors that belong to one request carry its ``request_id``; the ones that end a request part-way
also carry the text generated so far in ``partial_text``.
Every error pickles whole (class, message and attributes), so one raised in another process (a
Ray replica, a Ray Data actor) reaches the caller as the error it was.
"""

from __future__ import annotations

from typing import Any, Literal

__all__ = [
    "AudioInputNotSupportedError",
    "AudioLoadError",
    "AudioLoadReason",
    "CassetteError",
    "CassetteFormatError",
    "ChatTemplateError",
    "ContextOverflowError",
    "EngineClosedError",
    "EngineError",
    "EngineOverloadedError",
    "ImageInputNotSupportedError",
    "ImageLoadError",
    "ImageLoadReason",
    "InvalidRequestError",
    "KVCacheFullError",
    "LlamaCppIntegrationError",
    "MediaLoadReason",
    "MissingDependencyError",
    "ModelLoadError",
    "OutputTruncatedError",
    "RequestCancelledError",
    "RequestTimeoutError",
    "SchemaNotSupportedError",
    "ServerAuthenticationError",
    "ServerFeatureError",
    "ServerUnavailableError",
    "ToolCallParseError",
    "UnknownAdapterError",
    "UnknownOptionError",
    "UnmatchedRequestError",
    "UnsupportedContentError",
    "UntestedServerError",
]


class LlamaCppIntegrationError(Exception):
    """Base class of every error raised on purpose by this package."""

    def __init__(self, message: str, *, request_id: str | None = None) -> None:
        super().__init__(message)
        self.request_id = request_id

    def __reduce__(self) -> tuple[Any, ...]:
        # Errors cross processes (a Ray replica raises, the caller catches): rebuilt from the
        # message and attributes, not through ``__init__``, whose keyword-only arguments and
        # message formatting pickle's default (``cls(*args)``) cannot replay.
        state = dict(self.__dict__)
        if isinstance(self, ImportError):
            state["name"] = self.name  # a slot of ImportError's, not in ``__dict__``
        return (_restore, (type(self), self.args), state)


def _restore(cls: type[LlamaCppIntegrationError], args: tuple[Any, ...]) -> Any:
    """An error of ``cls`` with these ``args``, its ``__init__`` not run (see ``__reduce__``)."""
    return Exception.__new__(cls, *args)


class ModelLoadError(LlamaCppIntegrationError):
    """The model file could not be used: it names the path and the reason."""

    def __init__(self, path: str, reason: str) -> None:
        super().__init__(f"cannot load model {path!r}: {reason}")
        self.path = path
        self.reason = reason


class MissingDependencyError(LlamaCppIntegrationError, ModuleNotFoundError):
    """Something asked for needs an optional dependency that is not installed.

    ``name`` is the module that could not be imported (as on any ``ModuleNotFoundError``),
    ``package`` the distribution that provides it, ``extra`` this package's extra that installs
    it and ``install`` the pip command that does. A ``ModuleNotFoundError`` so code that probes
    for optional modules keeps working.
    """

    def __init__(self, module: str, *, package: str, extra: str, needed_for: str) -> None:
        install = f"pip install 'llamacpp-integrations[{extra}]'"
        super().__init__(
            f"{needed_for} requires {package} (module {module!r}), which is not installed; "
            f"install the {extra!r} extra: {install}"
        )
        self.name = module
        self.package = package
        self.extra = extra
        self.install = install


class InvalidRequestError(LlamaCppIntegrationError, ValueError):
    """The request is malformed (bad parameter, empty input, ...); nothing was generated."""


class UnknownOptionError(InvalidRequestError, TypeError):
    """A call got keyword arguments it does not take (a ``TypeError`` too, as Python's own
    calls raise for an unexpected keyword)."""


class UnknownAdapterError(InvalidRequestError):
    """A request named a LoRA adapter (by name or id) that the engine has not loaded;
    ``adapter`` is what it named, ``known`` the names the engine has."""

    def __init__(
        self,
        message: str,
        *,
        adapter: str | int,
        known: tuple[str, ...] = (),
        request_id: str | None = None,
    ) -> None:
        super().__init__(message, request_id=request_id)
        self.adapter = adapter
        self.known = known


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


MediaLoadReason = Literal[
    "bad-source",
    "bad-url",
    "scheme-refused",
    "remote-disabled",
    "private-address",
    "path-not-allowed",
    "not-found",
    "fetch-failed",
    "timeout",
    "too-many-redirects",
    "too-large",
    "bad-content-type",
    "empty",
    "decode-failed",
]
"""The reasons images and clips share: where they come from and how they are carried."""

ImageLoadReason = Literal[MediaLoadReason, "decompression-bomb"]
"""The machine-readable reasons an ``ImageLoadError`` carries."""


class ImageLoadError(InvalidRequestError):
    """An image input was refused, or could not be read; ``reason`` is a short code for why.

    The codes: ``bad-source`` (not bytes, a str, a path or a PIL image; or a string that is none
    of a URL, a data URI, base64 image data or a path), ``bad-url`` (a malformed http(s) URL, or
    one carrying credentials), ``scheme-refused`` (a URI scheme other than ``http``, ``https`` and
    ``data``: ``file:``, ``ftp:``, ...), ``remote-disabled`` (a URL while the policy allows no
    remote images), ``private-address`` (the host is, or resolves to, a loopback, private,
    link-local, multicast, reserved or cloud-metadata address), ``path-not-allowed`` (a local path
    outside the allowed directories, or no directory allowed at all), ``not-found`` (no regular
    file at an allowed path), ``fetch-failed`` (DNS, connection, TLS or HTTP status failure),
    ``timeout``, ``too-many-redirects``, ``too-large`` (encoded size over the cap),
    ``bad-content-type`` (a declared or detected type the policy does not allow), ``empty`` (no
    bytes, or an image with no pixels), ``decode-failed`` (not a readable image: corrupt,
    truncated, bad base64, unsupported mode) and ``decompression-bomb`` (more pixels than allowed).
    """

    def __init__(
        self, message: str, *, reason: ImageLoadReason, request_id: str | None = None
    ) -> None:
        super().__init__(f"image refused ({reason}): {message}", request_id=request_id)
        self.reason: ImageLoadReason = reason


class AudioInputNotSupportedError(UnsupportedContentError):
    """A clip was given, but the loaded model has no audio projector (``mmproj`` with an audio
    encoder)."""


AudioLoadReason = Literal[MediaLoadReason, "truncated", "too-long"]
"""The machine-readable reasons an ``AudioLoadError`` carries."""


class AudioLoadError(InvalidRequestError):
    """An audio input was refused, or could not be read; ``reason`` is a short code for why.

    The source and transport codes are ``ImageLoadError``'s (audio is read under the same
    ``ImagePolicy``). The others: ``too-large`` (encoded size over the cap), ``bad-content-type``
    (neither WAV, FLAC nor MP3 by its bytes, or a declared type not allowed), ``empty`` (no bytes,
    or no samples), ``decode-failed`` (a header or frame that is not what its format allows, or
    that does not state the clip's length), ``truncated`` (the header announces more data than
    there is) and ``too-long`` (the duration the header states is over the cap).
    """

    def __init__(
        self, message: str, *, reason: AudioLoadReason, request_id: str | None = None
    ) -> None:
        super().__init__(f"audio refused ({reason}): {message}", request_id=request_id)
        self.reason: AudioLoadReason = reason


class EngineOverloadedError(LlamaCppIntegrationError):
    """The admission queue was full for as long as the caller was willing to wait."""


class ServerUnavailableError(LlamaCppIntegrationError):
    """A remote server could not take the request: the connection failed, it answered 5xx, or
    it is still loading its model (503). ``url`` names the server; ``retryable`` is true when
    nothing was generated, so another server may take the request."""

    def __init__(
        self,
        message: str,
        *,
        url: str,
        retryable: bool = True,
        request_id: str | None = None,
    ) -> None:
        super().__init__(f"{url}: {message}", request_id=request_id)
        self.url = url
        self.retryable = retryable


class ServerAuthenticationError(ServerUnavailableError):
    """A remote server refused the request for its API key (401/403): none was given and the
    server wants one, or the one given is wrong. Never retryable (the key is wrong everywhere)."""

    def __init__(self, message: str, *, url: str, request_id: str | None = None) -> None:
        super().__init__(message, url=url, retryable=False, request_id=request_id)


class ServerFeatureError(InvalidRequestError):
    """A remote server lacks a feature the request needs (``feature``: ``"images"``,
    ``"embeddings"``, ``"rerank"``, ``"logprobs"``...), as it reports itself; ``build`` is the
    server's build, ``url`` the server."""

    def __init__(
        self,
        message: str,
        *,
        feature: str,
        url: str,
        build: str = "",
        request_id: str | None = None,
    ) -> None:
        where = f"{url} (llama-server build {build or 'unknown'})"
        super().__init__(f"{where} does not offer {feature}: {message}", request_id=request_id)
        self.feature = feature
        self.url = url
        self.build = build


class UntestedServerError(LlamaCppIntegrationError):
    """Deprecated: no longer raised. A remote server of any build is used, and what is sent to
    it is decided from what it reports about itself (``remote.ServerCapabilities``)."""


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


class KVCacheFullError(EngineError):
    """The KV cache had no room for this request's next tokens: a unified cache whose cells
    running requests held all (the newest answer is the one ended; a larger ``kv_cells`` or a
    smaller ``n_seq_max`` avoids it), or a sequence's stream that could not grow for lack of
    memory (a smaller ``n_ctx_per_seq`` or ``n_seq_max`` avoids it). It ends here; the others
    go on."""


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


class CassetteError(LlamaCppIntegrationError):
    """A cassette of ``llamacpp_integrations.testing`` could not serve a test."""


class CassetteFormatError(CassetteError):
    """The cassette file is missing, is not a cassette, is corrupt (``line`` names the bad
    line, 0 for the file as a whole), or has a format version this package cannot read."""

    def __init__(self, message: str, *, path: str, line: int = 0) -> None:
        where = f"{path}:{line}" if line else path
        super().__init__(f"{where}: {message}")
        self.path = path
        self.line = line


class UnmatchedRequestError(CassetteError):
    """A replaying engine got a call its cassette holds no answer to. The message names the
    nearest recorded call and how it differs; ``kind`` is the call (``"stream"``,
    ``"generate"``, ``"embed"``...), ``nearest`` its recorded request (``None``: none of that
    kind) and ``differences`` the fields that differ."""

    def __init__(
        self,
        message: str,
        *,
        kind: str,
        nearest: dict[str, object] | None = None,
        differences: tuple[str, ...] = (),
        request_id: str | None = None,
    ) -> None:
        super().__init__(message, request_id=request_id)
        self.kind = kind
        self.nearest = nearest
        self.differences = differences
