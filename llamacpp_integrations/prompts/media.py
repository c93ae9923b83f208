"""Content parts inside requests: finding media, and flattening parts into template text.

A chat message carries an image as a content part ``{"type": "image", "image": ImageInput}``
and an audio clip as ``{"type": "audio", "audio": AudioInput}``; both are *media*, placed by
the same marker, in order.
Before the chat template runs, a message whose parts are all text and images becomes one string
(parts joined by newlines) in which each image is the engine's media marker, the way llama.cpp's
server hands images to templates: every template renders a string content, while many would
print a list of parts as Python text. libmtmd later swaps each marker for the model family's own
image tokens. Lists holding other part types are left for the template.
"""

from __future__ import annotations

import struct
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from ..errors import InvalidRequestError, UnsupportedContentError

__all__ = [
    "AUDIO_FORMATS",
    "AudioInput",
    "ImageInput",
    "MediaInput",
    "flatten_parts",
    "images_in",
    "messages_have_audio",
    "messages_have_images",
    "require_image",
    "require_media",
]

_MEDIA_TYPES = ("image", "audio")


@dataclass(frozen=True)
class ImageInput:
    """Decoded pixels of one image: ``width`` x ``height`` RGB888, rows top to bottom.

    Build it with ``llamacpp_integrations.multimodal.load_image`` (which checks and decodes
    untrusted sources) or directly from pixels you trust. In a chat it goes in a content part
    ``{"type": "image", "image": ImageInput(...)}``.
    """

    width: int
    height: int
    rgb: bytes = field(repr=False)

    def __post_init__(self) -> None:
        if not (isinstance(self.width, int) and isinstance(self.height, int)):
            raise InvalidRequestError("image width and height must be integers")
        if self.width < 1 or self.height < 1:
            raise InvalidRequestError(f"image is {self.width}x{self.height}: it must not be empty")
        if not isinstance(self.rgb, bytes) or len(self.rgb) != self.width * self.height * 3:
            raise InvalidRequestError(
                f"a {self.width}x{self.height} RGB image needs {self.width * self.height * 3} "
                f"bytes of pixels"
            )


AUDIO_FORMATS = ("wav", "flac", "mp3")
"""The encodings an ``AudioInput`` may hold (what libmtmd's decoder reads)."""


@dataclass(frozen=True)
class AudioInput:
    """One audio clip, still encoded: WAV, FLAC or MP3 bytes whose header was checked.

    Build it with ``llamacpp_integrations.multimodal.load_audio`` (which checks untrusted
    sources: format by its bytes, size and duration caps) or ``AudioInput.from_pcm`` for samples
    you trust. The engine decodes it with libmtmd's helper and resamples it to its projector's
    rate. In a chat it goes in a content part ``{"type": "audio", "audio": AudioInput(...)}``.

    Attributes:
        data: The encoded clip.
        format: ``"wav"``, ``"flac"`` or ``"mp3"``.
        duration_s: The clip's length as its header (or its frames, for MP3) states it.
    """

    data: bytes = field(repr=False)
    format: str
    duration_s: float

    def __post_init__(self) -> None:
        if not isinstance(self.data, bytes) or not self.data:
            raise InvalidRequestError("an audio clip needs its encoded bytes")
        if self.format not in AUDIO_FORMATS:
            raise InvalidRequestError(
                f"audio format {self.format!r}; expected one of {', '.join(AUDIO_FORMATS)}"
            )
        if not (isinstance(self.duration_s, int | float) and self.duration_s >= 0):
            raise InvalidRequestError(f"audio duration {self.duration_s!r} is not a duration")

    @classmethod
    def from_pcm(cls, samples: bytes, sample_rate: int) -> AudioInput:
        """A clip from mono float32 little-endian samples at ``sample_rate`` Hz (trusted).

        The samples are wrapped in a 32-bit float WAV header; nothing is resampled here.
        """
        if not isinstance(sample_rate, int) or not 1000 <= sample_rate <= 384_000:
            raise InvalidRequestError(f"sample rate {sample_rate!r} Hz is out of range")
        if not samples or len(samples) % 4:
            raise InvalidRequestError("PCM samples are float32: a non-empty multiple of 4 bytes")
        fmt = struct.pack("<HHIIHH", 3, 1, sample_rate, sample_rate * 4, 4, 32)
        header = (
            b"RIFF"
            + struct.pack("<I", 4 + 8 + len(fmt) + 8 + len(samples))
            + b"WAVEfmt "
            + struct.pack("<I", len(fmt))
            + fmt
            + b"data"
            + struct.pack("<I", len(samples))
        )
        return cls(data=header + samples, format="wav", duration_s=len(samples) / 4 / sample_rate)


MediaInput = ImageInput | AudioInput
"""An image or an audio clip: what a prompt's media markers stand for, in order."""


def _is_image_part(part: object) -> bool:
    """An image or an audio part: anything the media marker stands for."""
    return isinstance(part, Mapping) and part.get("type") in _MEDIA_TYPES


def _has_image_parts(message: Mapping[str, Any]) -> bool:
    content = message.get("content")
    return (
        isinstance(content, Sequence)
        and not isinstance(content, str | bytes)
        and any(_is_image_part(part) for part in content)
    )


def messages_have_images(messages: object) -> bool:
    """Whether any of a chat's messages (``ChatMessage`` objects or mappings) carries an image
    part (cheap: no rendering)."""
    if isinstance(messages, str | bytes) or not isinstance(messages, Sequence):
        return False
    for message in messages:
        if isinstance(message, Mapping):
            if _has_image_parts(message):
                return True
        elif _has_image_parts({"content": getattr(message, "content", None)}):
            return True
    return False


def messages_have_audio(messages: object) -> bool:
    """Whether any of a chat's messages carries an audio part (cheap: no rendering)."""
    if isinstance(messages, str | bytes) or not isinstance(messages, Sequence):
        return False
    for message in messages:
        content = (
            message.get("content")
            if isinstance(message, Mapping)
            else getattr(message, "content", None)
        )
        if (
            isinstance(content, Sequence)
            and not isinstance(content, str | bytes)
            and any(isinstance(p, Mapping) and p.get("type") == "audio" for p in content)
        ):
            return True
    return False


def images_in(messages: Sequence[Any]) -> list[MediaInput]:
    """The images and clips of a chat's messages, in prompt order (as ``flatten_parts`` places
    them)."""
    images: list[MediaInput] = []
    for index, message in enumerate(messages):
        content: Any = message.get("content") if isinstance(message, Mapping) else message.content
        if not _is_flat(content):
            continue
        for part in content:
            if part["type"] in _MEDIA_TYPES:
                images.append(require_media(part, f"messages[{index}]"))
    return images


def require_image(value: object, where: str) -> ImageInput:
    """``value`` if it holds decoded pixels, else ``InvalidRequestError`` naming ``where``."""
    if isinstance(value, ImageInput):
        return value
    raise InvalidRequestError(
        f"{where} must hold decoded pixels (an ImageInput, such as multimodal.load_image "
        f"returns), not {type(value).__name__}"
    )


def require_media(part: Mapping[str, Any], where: str) -> MediaInput:
    """The decoded image or checked clip of an ``image`` or ``audio`` part."""
    if part.get("type") == "audio":
        value = part.get("audio")
        if isinstance(value, AudioInput):
            return value
        raise InvalidRequestError(
            f"{where} audio part must hold a checked clip (an AudioInput, such as "
            f"multimodal.load_audio returns), not {type(value).__name__}"
        )
    return require_image(part.get("image"), f"{where} image part")


def _is_flat(content: object) -> bool:
    return (
        isinstance(content, Sequence)
        and not isinstance(content, str | bytes)
        and all(
            isinstance(part, Mapping) and part.get("type") in ("text", *_MEDIA_TYPES)
            for part in content
        )
    )


def flatten_parts(
    messages: list[dict[str, Any]], marker: str | None
) -> tuple[list[dict[str, Any]], list[MediaInput]]:
    """Messages with text-and-media part lists as strings (each image or clip as ``marker``),
    and the media in prompt order. ``marker`` is ``None`` when the request has no media."""
    images: list[MediaInput] = []
    out: list[dict[str, Any]] = []
    for index, message in enumerate(messages):
        content: Any = message.get("content")
        if not _is_flat(content):
            if _has_image_parts(message):
                kinds = sorted({str(p.get("type")) for p in content if isinstance(p, Mapping)})
                raise UnsupportedContentError(
                    f"messages[{index}] mixes media with parts of types {kinds}; beside "
                    "images and audio only text parts are understood"
                )
            out.append(message)
            continue
        pieces: list[str] = []
        for part in content:
            if part["type"] in _MEDIA_TYPES:
                assert marker is not None, "media are only flattened with a projector's marker"
                images.append(require_media(part, f"messages[{index}]"))
                pieces.append(marker)
                continue
            text = part.get("text")
            if not isinstance(text, str):
                raise InvalidRequestError(f"messages[{index}] has a text part without text")
            if marker is not None and marker in text:
                raise InvalidRequestError(f"messages[{index}] text holds the media marker")
            pieces.append(text)
        out.append({**message, "content": "\n".join(pieces)})
    return out, images
