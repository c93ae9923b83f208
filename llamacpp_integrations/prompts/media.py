"""Content parts inside requests: finding images, and flattening parts into template text.

A chat message carries an image as a content part ``{"type": "image", "image": ImageInput}``.
Before the chat template runs, a message whose parts are all text and images becomes one string
(parts joined by newlines) in which each image is the engine's media marker, the way llama.cpp's
server hands images to templates: every template renders a string content, while many would
print a list of parts as Python text. libmtmd later swaps each marker for the model family's own
image tokens. Lists holding other part types are left for the template.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from ..errors import InvalidRequestError, UnsupportedContentError

__all__ = ["ImageInput", "flatten_parts", "images_in", "messages_have_images", "require_image"]


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


def _is_image_part(part: object) -> bool:
    return isinstance(part, Mapping) and part.get("type") == "image"


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


def images_in(messages: Sequence[Any]) -> list[ImageInput]:
    """The images of a chat's messages, in prompt order (as ``flatten_parts`` places them)."""
    images: list[ImageInput] = []
    for index, message in enumerate(messages):
        content: Any = message.get("content") if isinstance(message, Mapping) else message.content
        if not _is_flat(content):
            continue
        for part in content:
            if part["type"] == "image":
                images.append(require_image(part.get("image"), f"messages[{index}] image part"))
    return images


def require_image(value: object, where: str) -> ImageInput:
    """``value`` if it holds decoded pixels, else ``InvalidRequestError`` naming ``where``."""
    if isinstance(value, ImageInput):
        return value
    raise InvalidRequestError(
        f"{where} must hold decoded pixels (an ImageInput, such as multimodal.load_image "
        f"returns), not {type(value).__name__}"
    )


def _is_flat(content: object) -> bool:
    return (
        isinstance(content, Sequence)
        and not isinstance(content, str | bytes)
        and all(
            isinstance(part, Mapping) and part.get("type") in ("text", "image") for part in content
        )
    )


def flatten_parts(
    messages: list[dict[str, Any]], marker: str | None
) -> tuple[list[dict[str, Any]], list[ImageInput]]:
    """Messages with text-and-image part lists as strings (each image as ``marker``), and
    the images in prompt order. ``marker`` is ``None`` when the request has no images."""
    images: list[ImageInput] = []
    out: list[dict[str, Any]] = []
    for index, message in enumerate(messages):
        content: Any = message.get("content")
        if not _is_flat(content):
            if _has_image_parts(message):
                kinds = sorted({str(p.get("type")) for p in content if isinstance(p, Mapping)})
                raise UnsupportedContentError(
                    f"messages[{index}] mixes images with parts of types {kinds}; beside "
                    "images only text parts are understood"
                )
            out.append(message)
            continue
        pieces: list[str] = []
        for part in content:
            if part["type"] == "image":
                assert marker is not None, "images are only flattened with a projector's marker"
                images.append(require_image(part.get("image"), f"messages[{index}] image part"))
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
