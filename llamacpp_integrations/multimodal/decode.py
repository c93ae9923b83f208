"""Decoding and validating image bytes (or a PIL image) into ``LoadedImage``'s RGB pixels.

Nothing here touches Pillow's global state (``Image.MAX_IMAGE_PIXELS``,
``ImageFile.LOAD_TRUNCATED_IMAGES``): the pixel cap is checked against the header, which
``Image.open`` reads without decoding, before any pixel is decoded. Pillow's own global guard
still applies on top (it refuses images over twice ``Image.MAX_IMAGE_PIXELS``). Only the
decoders of the policy's allowed types are ever tried, so bytes of any other format (EPS, PSD,
...) never reach a Pillow plugin.
"""

from __future__ import annotations

import io
import struct
from dataclasses import dataclass, field
from functools import lru_cache

from PIL import Image, ImageOps, UnidentifiedImageError

from ..errors import ImageLoadError, InvalidRequestError
from ..prompts.media import ImageInput
from .policy import ImagePolicy

__all__ = ["LoadedImage", "decode_bytes", "from_pil", "sniff_format"]

# Media type -> Pillow format names; other types fall back to Pillow's own MIME table.
_FORMATS_BY_TYPE: dict[str, tuple[str, ...]] = {
    "image/png": ("PNG",),
    "image/apng": ("PNG",),
    "image/jpeg": ("JPEG",),  # multi-picture JPEGs come out as "MPO" through the JPEG opener
    "image/jpg": ("JPEG",),
    "image/pjpeg": ("JPEG",),
    "image/webp": ("WEBP",),
    "image/gif": ("GIF",),
    "image/bmp": ("BMP",),
    "image/x-bmp": ("BMP",),
    "image/x-ms-bmp": ("BMP",),
    "image/tiff": ("TIFF",),
}

_SIXTEEN_BIT_MODES = frozenset({"I", "I;16", "I;16L", "I;16B", "I;16N"})
_ALPHA_MODES = frozenset({"RGBA", "RGBa", "LA", "La", "PA"})
_ORIENTATION = 0x0112  # the EXIF tag


@dataclass(frozen=True, kw_only=True)
class LoadedImage(ImageInput):
    """An image that passed the policy, decoded: an engine ``ImageInput`` that remembers its
    source bytes.

    Attributes:
        width: Width of ``rgb`` in pixels (after any ``max_side`` downscaling).
        height: Height of ``rgb`` in pixels.
        rgb: The pixels, RGB888, row by row: ``width * height * 3`` bytes. Alpha is composited
            over white, the EXIF orientation applied, and an animation's first frame taken.
        data: The encoded bytes as received (for a PIL image given directly: its pixels as PNG).
        format: Pillow's name of the format of ``data`` (``"PNG"``, ``"JPEG"``, ...).
    """

    data: bytes = field(repr=False)
    format: str

    def to_pil(self) -> Image.Image:
        """The pixels as a new RGB PIL image."""
        return Image.frombytes("RGB", (self.width, self.height), self.rgb)

    def resized(self, max_side: int) -> LoadedImage:
        """This image downscaled (aspect ratio kept, LANCZOS) so its longer side is ``max_side``.

        Returns ``self`` when the image already fits; never upscales. ``data`` is kept.
        """
        check_max_side(max_side)
        if max(self.width, self.height) <= max_side:
            return self
        small = downscale(self.to_pil(), max_side)
        return LoadedImage(
            width=small.width,
            height=small.height,
            rgb=small.tobytes(),
            data=self.data,
            format=self.format,
        )


def check_max_side(max_side: int | None) -> None:
    if max_side is not None and (isinstance(max_side, bool) or max_side < 1):
        raise InvalidRequestError(f"max_side must be a positive int, not {max_side!r}")


def downscale(image: Image.Image, max_side: int) -> Image.Image:
    """Shrink ``image`` keeping its aspect ratio so that its longer side is ``max_side``."""
    width, height = image.size
    longest = max(width, height)
    if longest <= max_side:
        return image
    scale = max_side / longest
    size = (max(1, round(width * scale)), max(1, round(height * scale)))
    return image.resize(size, Image.Resampling.LANCZOS)


@lru_cache(maxsize=32)
def pillow_formats(content_types: tuple[str, ...]) -> tuple[str, ...]:
    """The Pillow decoders that the media types ``content_types`` allow."""
    Image.init()
    formats: list[str] = []
    for content_type in content_types:
        known = _FORMATS_BY_TYPE.get(content_type)
        if known is None:
            known = tuple(f for f, mime in Image.MIME.items() if mime == content_type)
        formats.extend(f for f in known if f in Image.OPEN and f not in formats)
    return tuple(formats)


def sniff_format(data: bytes) -> str | None:
    """The format that ``data``'s magic number announces, for the common image formats."""
    if data.startswith(b"\x89PNG\r\n\x1a\n"):
        return "PNG"
    if data.startswith(b"\xff\xd8\xff"):
        return "JPEG"
    if data[:6] in (b"GIF87a", b"GIF89a"):
        return "GIF"
    if data[:4] == b"RIFF" and data[8:12] == b"WEBP":
        return "WEBP"
    if data.startswith(b"BM") and len(data) >= 26:
        return "BMP"
    if data[:4] in (b"II*\x00", b"MM\x00*"):
        return "TIFF"
    return None


def _declared_size(data: bytes, fmt: str | None) -> tuple[int, int] | None:
    """Width and height as the header states them (PNG, GIF, BMP), whether or not Pillow agrees."""
    try:
        if fmt == "PNG" and data[12:16] == b"IHDR":
            width, height = struct.unpack(">II", data[16:24])
            return int(width), int(height)
        if fmt == "GIF":
            width, height = struct.unpack("<HH", data[6:10])
            return int(width), int(height)
        if fmt == "BMP":
            width, height = struct.unpack("<ii", data[18:26])
            return int(width), abs(int(height))
    except struct.error:
        return None
    return None


def decode_bytes(
    data: bytes,
    policy: ImagePolicy,
    *,
    max_side: int | None = None,
    what: str = "the image",
) -> LoadedImage:
    """Check and decode encoded image bytes; ``what`` names the source in error messages."""
    if not data:
        raise ImageLoadError(f"{what} is empty (no bytes)", reason="empty")
    if len(data) > policy.max_bytes:
        raise ImageLoadError(
            f"{what} is {len(data)} bytes, over the {policy.max_bytes}-byte limit",
            reason="too-large",
        )
    formats = pillow_formats(policy.allowed_content_types)
    sniffed = sniff_format(data)
    try:
        image = Image.open(io.BytesIO(data), formats=list(formats))
    except Image.DecompressionBombError as exc:
        raise ImageLoadError(f"{what}: {exc}", reason="decompression-bomb") from exc
    except Exception as exc:  # Pillow raises many kinds on hostile input; all mean the same
        size = _declared_size(data, sniffed)
        if size is not None and 0 in size:
            raise ImageLoadError(
                f"{what} has no pixels ({size[0]}x{size[1]})", reason="empty"
            ) from exc
        if sniffed is not None and sniffed not in formats:
            raise ImageLoadError(
                f"{what} is a {sniffed} image; allowed are "
                f"{', '.join(policy.allowed_content_types)}",
                reason="bad-content-type",
            ) from exc
        if isinstance(exc, UnidentifiedImageError):
            detail = f"not recognised as any of {', '.join(formats)}"
        else:
            detail = f"{type(exc).__name__}: {exc}"
        raise ImageLoadError(
            f"{what} is not a readable image ({detail})", reason="decode-failed"
        ) from exc
    with image:
        return _finish(
            image, policy, data=data, fmt=image.format or "?", max_side=max_side, what=what
        )


def from_pil(
    image: Image.Image, policy: ImagePolicy, *, max_side: int | None = None
) -> LoadedImage:
    """Check and convert an image the caller already opened; ``data`` becomes its PNG encoding."""
    return _finish(image, policy, data=None, fmt="PNG", max_side=max_side, what="the PIL image")


def _finish(
    image: Image.Image,
    policy: ImagePolicy,
    *,
    data: bytes | None,
    fmt: str,
    max_side: int | None,
    what: str,
) -> LoadedImage:
    width, height = image.size
    if width <= 0 or height <= 0:
        raise ImageLoadError(f"{what} has no pixels ({width}x{height})", reason="empty")
    if width * height > policy.max_pixels:
        raise ImageLoadError(
            f"{what} is {width}x{height} = {width * height} pixels, over the "
            f"{policy.max_pixels}-pixel limit",
            reason="decompression-bomb",
        )
    try:
        image.load()  # the first frame of an animation
        rgb_image = to_rgb(_upright(image))
        if data is None:
            buffer = io.BytesIO()
            rgb_image.save(buffer, format="PNG")
            data = buffer.getvalue()
        if max_side is not None:
            rgb_image = downscale(rgb_image, max_side)
        rgb = rgb_image.tobytes()
    except Image.DecompressionBombError as exc:
        raise ImageLoadError(f"{what}: {exc}", reason="decompression-bomb") from exc
    except Exception as exc:  # corrupt or truncated data, a mode with no RGB conversion, ...
        raise ImageLoadError(
            f"{what} could not be decoded ({type(exc).__name__}: {exc})", reason="decode-failed"
        ) from exc
    return LoadedImage(
        width=rgb_image.width, height=rgb_image.height, rgb=rgb, data=data, format=fmt
    )


def _upright(image: Image.Image) -> Image.Image:
    """``image`` turned as its EXIF orientation says (a copy only when it has to be turned)."""
    if image.getexif().get(_ORIENTATION, 1) in (None, 1):
        return image
    return ImageOps.exif_transpose(image)


def to_rgb(image: Image.Image) -> Image.Image:
    """``image`` as RGB: alpha composited over white, 16-bit gray scaled down to 8 bits."""
    mode = image.mode
    if mode in _SIXTEEN_BIT_MODES:
        # Pillow's own conversion clips 16-bit values at 255; scale them instead.
        return image.convert("I").point(lambda v: v * (1 / 256)).convert("L").convert("RGB")
    if mode == "RGB" and "transparency" not in image.info:
        return image
    if mode in _ALPHA_MODES or "transparency" in image.info:
        rgba = image.convert("RGBA")
        flat = Image.new("RGB", rgba.size, (255, 255, 255))
        flat.paste(rgba, (0, 0), rgba)  # the alpha band is the mask
        return flat
    return image.convert("RGB")
