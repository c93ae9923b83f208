"""``load_image``: one entry point for every kind of image input, each held to an ``ImagePolicy``.

How a source is read:

* ``bytes`` / ``bytearray`` / ``memoryview``: encoded image data.
* a PIL image: used as it is (still size-checked); ``data`` becomes its PNG encoding.
* ``os.PathLike``: always a local path.
* ``str``, by its form:

  - ``data:<type>[;base64],<payload>``: the declared type must be allowed; base64 or
    percent-encoded payloads both work.
  - ``http://`` / ``https://``: fetched only when the policy allows remote images (see ``fetch``).
  - any other ``scheme:`` (two or more letters: ``file:``, ``ftp:``, ``javascript:`` ...): refused
    with ``scheme-refused``. A path that looks like one (``ab:c.png``) must be given as a
    ``Path`` or as ``./ab:c.png``.
  - bare base64 (no ``data:`` prefix): taken as image data only if it decodes to bytes that
    start like a PNG, JPEG, GIF, WebP, BMP or TIFF file; anything else is taken as a path.
  - anything else: a local path, read only from under the policy's ``allowed_dirs``.

Whatever the source, the bytes are then decoded and checked (``decode``) before anything else
sees them, and the result is a ``LoadedImage`` with RGB888 pixels.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import os
import re
from collections.abc import Callable
from functools import partial
from urllib.parse import unquote_to_bytes

from PIL import Image

from ..engine import ModelInfo
from ..errors import ImageLoadError
from .decode import LoadedImage, check_max_side, decode_bytes, from_pil, sniff_format
from .fetch import fetch_url
from .local import read_local_file
from .policy import DEFAULT_IMAGE_POLICY, ImagePolicy

__all__ = ["ImageSource", "aload_image", "image_reader_for", "load_image"]

ImageSource = bytes | bytearray | memoryview | str | os.PathLike[str] | Image.Image
"""What ``load_image`` accepts."""

_SCHEME = re.compile(r"([A-Za-z][A-Za-z0-9+.\-]*):")
_BASE64 = re.compile(r"[A-Za-z0-9+/_\-]+={0,2}")
_URLSAFE_TO_STANDARD = str.maketrans("-_", "+/")
_MIN_BARE_BASE64 = 16  # shorter strings are never taken for image data


def load_image(
    source: ImageSource, policy: ImagePolicy = DEFAULT_IMAGE_POLICY, *, max_side: int | None = None
) -> LoadedImage:
    """Read, check and decode one image input.

    Args:
        source: Encoded bytes, a ``data:`` URI, bare base64, an http(s) URL, a local path (str or
            ``os.PathLike``) or a PIL image (see the module docstring for how strings are read).
        policy: The limits to hold the input to; the default allows in-memory sources only.
        max_side: When given, the pixels are downscaled (aspect ratio kept, LANCZOS) so that the
            longer side is at most this many pixels.

    Raises:
        ImageLoadError: the input is refused or unreadable; ``reason`` says why.
        InvalidRequestError: ``max_side`` is not a positive int.
    """
    return _reader(source, policy, max_side)()


async def aload_image(
    source: ImageSource, policy: ImagePolicy = DEFAULT_IMAGE_POLICY, *, max_side: int | None = None
) -> LoadedImage:
    """``load_image`` with its reading and decoding in a worker thread, so neither the network
    nor decoding blocks the loop (a cancelled caller stops waiting at once)."""
    return await asyncio.to_thread(_reader(source, policy, max_side))


def _reader(
    source: ImageSource, policy: ImagePolicy, max_side: int | None
) -> Callable[[], LoadedImage]:
    """How ``source`` is read, decided without reading it: the step that reads, checks and
    decodes it. A bad ``max_side`` or a source of no known kind is refused here, before any
    work (and, for ``aload_image``, before a thread is taken); the worker of a fetch still ends
    within the policy's timeout."""
    check_max_side(max_side)
    if isinstance(source, Image.Image):
        return partial(from_pil, source, policy, max_side=max_side)
    if isinstance(source, bytes | bytearray | memoryview):
        data = bytes(source)
        return partial(decode_bytes, data, policy, max_side=max_side, what="the image data")
    if isinstance(source, os.PathLike):
        path = os.fspath(source)
        if not isinstance(path, str):
            raise ImageLoadError("a path must be a str path, not bytes", reason="bad-source")
        return partial(_from_path, path, policy, max_side)
    if isinstance(source, str):
        return partial(_from_string, source, policy, max_side)
    raise ImageLoadError(
        "an image source is bytes, a str (URL, data URI, base64 or path), an os.PathLike or a "
        f"PIL image, not {type(source).__name__}",
        reason="bad-source",
    )


def image_reader_for(
    info: ModelInfo, policy: ImagePolicy
) -> Callable[[ImageSource], LoadedImage] | None:
    """How an adapter reads images for the model ``info`` describes: ``load_image`` under
    ``policy``, downscaled to what its projector uses; ``None`` (images refused) without a
    projector, so nothing is fetched for a model that could not look at it."""
    if not info.supports_images:
        return None
    max_side = info.image_max_side
    return lambda source: load_image(source, policy, max_side=max_side)


def _from_path(path: str, policy: ImagePolicy, max_side: int | None) -> LoadedImage:
    data = read_local_file(path, policy)
    return decode_bytes(data, policy, max_side=max_side, what=f"file {path[:200]!r}")


def _from_string(text: str, policy: ImagePolicy, max_side: int | None) -> LoadedImage:
    stripped = text.strip()
    if not stripped:
        raise ImageLoadError("the image source is an empty string", reason="empty")
    match = _SCHEME.match(stripped)
    if match is not None and len(match.group(1)) > 1:  # one letter: a Windows drive, a path
        scheme = match.group(1).lower()
        if scheme == "data":
            data = _data_uri_bytes(stripped, policy)
            return decode_bytes(data, policy, max_side=max_side, what="the data URI image")
        if scheme in ("http", "https"):
            fetched = fetch_url(stripped, policy)
            return decode_bytes(
                fetched.data, policy, max_side=max_side, what=f"the image at {fetched.url[:200]!r}"
            )
        raise ImageLoadError(
            f"{scheme}: sources are not read (only http(s) URLs, data URIs, base64 and paths)",
            reason="scheme-refused",
        )
    decoded = _bare_base64_image(stripped, policy)
    if decoded is not None:
        return decode_bytes(decoded, policy, max_side=max_side, what="the base64 image")
    return _from_path(text, policy, max_side)


def _check_encoded_size(encoded_length: int, policy: ImagePolicy, what: str) -> None:
    if encoded_length * 3 // 4 > policy.max_bytes:
        raise ImageLoadError(
            f"{what} holds about {encoded_length * 3 // 4} bytes, over the "
            f"{policy.max_bytes}-byte limit",
            reason="too-large",
        )


def _b64decode(payload: str) -> bytes | None:
    """Standard or URL-safe base64, whitespace and missing padding tolerated; ``None`` if bad."""
    compact = "".join(payload.split())
    compact += "=" * (-len(compact) % 4)
    try:
        return base64.b64decode(compact.translate(_URLSAFE_TO_STANDARD), validate=True)
    except (binascii.Error, ValueError):
        return None


def _data_uri_bytes(uri: str, policy: ImagePolicy) -> bytes:
    header, comma, payload = uri[len("data:") :].partition(",")
    if not comma:
        raise ImageLoadError("a data URI without a ',' before its data", reason="decode-failed")
    params = [p.strip().lower() for p in header.split(";")]
    media_type = params[0]
    if media_type not in policy.allowed_content_types:
        raise ImageLoadError(
            f"data URI of type {media_type or 'text/plain (none given)'!r}; allowed are "
            f"{', '.join(policy.allowed_content_types)}",
            reason="bad-content-type",
        )
    if "base64" in params[1:]:
        _check_encoded_size(len(payload), policy, "the data URI")
        data = _b64decode(payload)
        if data is None:
            raise ImageLoadError("the data URI's base64 payload is invalid", reason="decode-failed")
        return data
    if len(payload) // 3 > policy.max_bytes:  # "%XY" is the densest percent-encoding gets
        raise ImageLoadError("the data URI is over the byte limit", reason="too-large")
    return unquote_to_bytes(payload)


def _bare_base64_image(text: str, policy: ImagePolicy) -> bytes | None:
    """``text`` decoded, if it is base64 of something that starts like an image; else ``None``."""
    compact = "".join(text.split())
    if len(compact) < _MIN_BARE_BASE64 or not _BASE64.fullmatch(compact):
        return None
    # Decode only a prefix first: a long path-like string must not cost a full decode.
    head = _b64decode(compact[:64])
    if head is None or sniff_format(head) is None:
        return None
    _check_encoded_size(len(compact), policy, "the base64 string")
    data = _b64decode(compact)
    if data is None:
        raise ImageLoadError(
            "the base64 image data is invalid past its start", reason="decode-failed"
        )
    return data
