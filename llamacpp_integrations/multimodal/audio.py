"""``load_audio``: one entry point for every kind of audio input, under the images' source policy.

Where a clip may come from is the ``ImagePolicy``'s business, as for images (the same rules,
the same code): bytes, ``data:`` URIs and base64 always; local paths only under
``allowed_dirs``; http(s) URLs only with ``allow_remote``, never to private addresses, every
redirect re-checked, one timeout. What a clip may be is ``AudioLimits``'s: its encoded size,
its duration and the media types a ``data:`` URI or a server may declare.

The bytes are then checked by ``audio_headers``: WAV, FLAC or MP3 by their first bytes
(whatever the name or the declared type says), the duration read from the header (MP3: from
its frames) and held to the cap before anything decodes a sample. The result is an
``AudioInput``, still encoded: the engine decodes it with libmtmd's helper (miniaudio) and
resamples it to its projector's rate. Every refusal is an ``AudioLoadError`` whose ``reason``
names the check and whose message names the limit.
"""

from __future__ import annotations

import asyncio
import math
import os
from collections.abc import Callable
from dataclasses import dataclass, replace
from functools import partial
from typing import Any

from ..engine import ModelInfo
from ..errors import (
    AudioInputNotSupportedError,
    AudioLoadError,
    ImageInputNotSupportedError,
    ImageLoadError,
    InvalidRequestError,
)
from ..prompts.media import AudioInput, ImageInput
from .audio_headers import read_header, sniff_audio
from .encoded import MediaRules, bare_base64, data_uri_bytes, source_scheme
from .fetch import fetch_url
from .loading import image_reader_for
from .local import read_local_file
from .policy import DEFAULT_IMAGE_POLICY, ImagePolicy

__all__ = [
    "DEFAULT_AUDIO_LIMITS",
    "DEFAULT_AUDIO_TYPES",
    "AudioLimits",
    "AudioSource",
    "MediaReader",
    "aload_audio",
    "audio_reader_for",
    "input_audio_source",
    "load_audio",
    "media_reader_for",
    "read_audio",
]

AudioSource = bytes | bytearray | memoryview | str | os.PathLike[str] | AudioInput
"""What ``load_audio`` accepts."""

DEFAULT_AUDIO_TYPES: tuple[str, ...] = (
    "audio/wav",
    "audio/x-wav",
    "audio/wave",
    "audio/vnd.wave",
    "audio/flac",
    "audio/x-flac",
    "audio/mpeg",
    "audio/mp3",
)


@dataclass(frozen=True)
class AudioLimits:
    """What an audio clip may be, wherever it comes from.

    Attributes:
        max_bytes: Most encoded bytes (a download or a file is cut off there).
        max_duration_s: Longest clip, in seconds, as its header states it (checked before
            decoding). Whisper-style projectors read 30-second chunks, each a few hundred
            embeddings in the prompt.
        allowed_content_types: Media types a ``data:`` URI or an HTTP ``Content-Type`` may
            declare; the bytes must still be WAV, FLAC or MP3.
    """

    max_bytes: int = 25 * 1024 * 1024
    max_duration_s: float = 600.0
    allowed_content_types: tuple[str, ...] = DEFAULT_AUDIO_TYPES

    def __post_init__(self) -> None:
        if isinstance(self.allowed_content_types, str | bytes):
            raise InvalidRequestError("AudioLimits.allowed_content_types must be a tuple of str")
        object.__setattr__(
            self,
            "allowed_content_types",
            tuple(t.strip().lower() for t in self.allowed_content_types),
        )
        duration_ok = math.isfinite(self.max_duration_s) and self.max_duration_s > 0
        if self.max_bytes < 1 or not duration_ok or not self.allowed_content_types:
            raise InvalidRequestError(
                "invalid AudioLimits: max_bytes and max_duration_s must be positive, "
                "allowed_content_types non-empty"
            )


DEFAULT_AUDIO_LIMITS = AudioLimits()
"""25 MiB, 10 minutes, WAV, FLAC and MP3 media types."""


def load_audio(
    source: AudioSource,
    policy: ImagePolicy = DEFAULT_IMAGE_POLICY,
    limits: AudioLimits = DEFAULT_AUDIO_LIMITS,
) -> AudioInput:
    """Read and check one audio input.

    Args:
        source: Encoded bytes, a ``data:`` URI, bare base64, an http(s) URL, a local path (str
            or ``os.PathLike``), or an ``AudioInput`` (checked again against ``limits``).
        policy: Where sources may come from (the images' policy: paths, URLs, addresses).
        limits: Size, duration and declared types.

    Raises:
        AudioLoadError: the input is refused or unreadable; ``reason`` says why.
    """
    return _reader(source, policy, limits)()


async def aload_audio(
    source: AudioSource,
    policy: ImagePolicy = DEFAULT_IMAGE_POLICY,
    limits: AudioLimits = DEFAULT_AUDIO_LIMITS,
) -> AudioInput:
    """``load_audio`` in a worker thread, so neither the network nor a file read blocks the
    loop."""
    return await asyncio.to_thread(_reader(source, policy, limits))


def audio_reader_for(
    info: ModelInfo, policy: ImagePolicy, limits: AudioLimits = DEFAULT_AUDIO_LIMITS
) -> Callable[[AudioSource], AudioInput] | None:
    """How an adapter reads audio for the model ``info`` describes: ``load_audio`` under
    ``policy``; ``None`` (audio refused) without an audio projector, so nothing is fetched for a
    model that could not listen to it."""
    if not info.supports_audio:
        return None
    return lambda source: load_audio(source, policy, limits)


def _reader(
    source: AudioSource, policy: ImagePolicy, limits: AudioLimits
) -> Callable[[], AudioInput]:
    if isinstance(source, AudioInput):
        return partial(_check, source.data, limits, "the audio clip")
    if isinstance(source, bytes | bytearray | memoryview):
        return partial(_check, bytes(source), limits, "the audio data")
    if isinstance(source, os.PathLike):
        path = os.fspath(source)
        if not isinstance(path, str):
            raise AudioLoadError("a path must be a str path, not bytes", reason="bad-source")
        return partial(_from_path, path, policy, limits)
    if isinstance(source, str):
        return partial(_from_string, source, policy, limits)
    raise AudioLoadError(
        "an audio source is bytes, a str (URL, data URI, base64 or path), an os.PathLike or "
        f"an AudioInput, not {type(source).__name__}",
        reason="bad-source",
    )


def _check(data: bytes, limits: AudioLimits, what: str) -> AudioInput:
    if not data:
        raise AudioLoadError(f"{what} is empty (no bytes)", reason="empty")
    if len(data) > limits.max_bytes:
        raise AudioLoadError(
            f"{what} is {len(data)} bytes, over the {limits.max_bytes}-byte limit",
            reason="too-large",
        )
    header = read_header(data, what, max_duration_s=limits.max_duration_s)
    return AudioInput(data=data, format=header.format, duration_s=header.duration_s)


def _transport(policy: ImagePolicy, limits: AudioLimits) -> ImagePolicy:
    """The images' policy for reading a clip: its sources, the clip's size and media types."""
    return replace(
        policy, max_bytes=limits.max_bytes, allowed_content_types=limits.allowed_content_types
    )


def _as_audio_error(error: ImageLoadError) -> AudioLoadError:
    message = str(error).split(": ", 1)[-1].replace("remote images", "remote media")
    return AudioLoadError(message, reason=error.reason)  # type: ignore[arg-type]


def _rules(limits: AudioLimits) -> MediaRules:
    return MediaRules(AudioLoadError, limits.allowed_content_types, limits.max_bytes, sniff_audio)


def _from_path(path: str, policy: ImagePolicy, limits: AudioLimits) -> AudioInput:
    try:
        data = read_local_file(path, _transport(policy, limits))
    except ImageLoadError as error:
        raise _as_audio_error(error) from None
    return _check(data, limits, f"file {path[:200]!r}")


def _from_string(text: str, policy: ImagePolicy, limits: AudioLimits) -> AudioInput:
    stripped = text.strip()
    if not stripped:
        raise AudioLoadError("the audio source is an empty string", reason="empty")
    scheme = source_scheme(stripped)
    if scheme is not None:
        if scheme == "data":
            return _check(data_uri_bytes(stripped, _rules(limits)), limits, "the data URI clip")
        if scheme in ("http", "https"):
            try:
                fetched = fetch_url(stripped, _transport(policy, limits))
            except ImageLoadError as error:
                raise _as_audio_error(error) from None
            return _check(fetched.data, limits, f"the clip at {fetched.url[:200]!r}")
        raise AudioLoadError(
            f"{scheme}: sources are not read (only http(s) URLs, data URIs, base64 and paths)",
            reason="scheme-refused",
        )
    decoded = bare_base64(stripped, _rules(limits), "clip")
    if decoded is not None:
        return _check(decoded, limits, "the base64 clip")
    return _from_path(text, policy, limits)


class MediaReader:
    """How an adapter reads a request's media for one model: called with an image source it
    returns pixels (``load_image`` under the policy, downscaled for the projector), and
    ``audio`` reads a clip. Each refuses, before anything is read or fetched, the kind of media
    the model's projector does not take (``ImageInputNotSupportedError``,
    ``AudioInputNotSupportedError``)."""

    def __init__(
        self,
        info: ModelInfo,
        policy: ImagePolicy,
        limits: AudioLimits = DEFAULT_AUDIO_LIMITS,
    ) -> None:
        self._images = image_reader_for(info, policy)
        self._audio = audio_reader_for(info, policy, limits)

    def __call__(self, source: Any) -> ImageInput:
        if self._images is None:
            raise ImageInputNotSupportedError(
                "this model's projector reads no images, so it cannot take image inputs"
            )
        return self._images(source)

    def audio(self, source: AudioSource) -> AudioInput:
        """The clip at ``source``, checked."""
        if self._audio is None:
            raise AudioInputNotSupportedError(
                "this model has no audio projector (an mmproj with an audio encoder), so it "
                "cannot take audio inputs"
            )
        return self._audio(source)


def media_reader_for(info: ModelInfo, policy: ImagePolicy) -> MediaReader | None:
    """The adapters' reader of media for ``info``'s model; ``None`` without a projector."""
    if not (info.supports_images or info.supports_audio):
        return None
    return MediaReader(info, policy)


def read_audio(reader: Callable[[Any], ImageInput] | None, source: AudioSource) -> AudioInput:
    """``source`` read by an adapter's image reader when it is a ``MediaReader``; without one,
    the model takes no audio."""
    if not isinstance(reader, MediaReader):
        raise AudioInputNotSupportedError(
            "this model has no audio projector (an mmproj with an audio encoder), so it cannot "
            "take audio inputs"
        )
    return reader.audio(source)


_MIME_BY_FORMAT = {
    "wav": "audio/wav",
    "mp3": "audio/mpeg",
    "mpeg": "audio/mpeg",
    "flac": "audio/flac",
}


def input_audio_source(value: object, where: str) -> str:
    """The source an OpenAI ``input_audio`` object (``{"data": base64, "format": "wav"}``)
    names: a data URI of its format, or the bare base64 when no format is given (the bytes
    tell it)."""
    data = value.get("data") if isinstance(value, dict) else None
    if not isinstance(data, str) or not data:
        raise InvalidRequestError(f"{where}.input_audio names no base64 data")
    fmt = value.get("format") if isinstance(value, dict) else None
    if fmt is None:
        return data
    mime = _MIME_BY_FORMAT.get(str(fmt).lower())
    if mime is None:
        raise AudioLoadError(
            f"{where}.input_audio.format {fmt!r}; wav, mp3 and flac are read",
            reason="bad-content-type",
        )
    return f"data:{mime};base64,{data}"
