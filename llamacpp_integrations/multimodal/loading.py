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
import os
from collections.abc import Callable
from functools import partial

from PIL import Image

from ..engine import ModelInfo
from ..errors import ImageLoadError
from .decode import LoadedImage, check_max_side, decode_bytes, from_pil, sniff_format
from .encoded import MediaRules, bare_base64, data_uri_bytes, source_scheme
from .fetch import fetch_url
from .local import read_local_file
from .policy import DEFAULT_IMAGE_POLICY, ImagePolicy

__all__ = ["ImageSource", "aload_image", "image_reader_for", "load_image"]

ImageSource = bytes | bytearray | memoryview | str | os.PathLike[str] | Image.Image
"""What ``load_image`` accepts."""


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


def _rules(policy: ImagePolicy) -> MediaRules:
    return MediaRules(ImageLoadError, policy.allowed_content_types, policy.max_bytes, sniff_format)


def _from_path(path: str, policy: ImagePolicy, max_side: int | None) -> LoadedImage:
    data = read_local_file(path, policy)
    return decode_bytes(data, policy, max_side=max_side, what=f"file {path[:200]!r}")


def _from_string(text: str, policy: ImagePolicy, max_side: int | None) -> LoadedImage:
    stripped = text.strip()
    if not stripped:
        raise ImageLoadError("the image source is an empty string", reason="empty")
    scheme = source_scheme(stripped)
    if scheme is not None:
        if scheme == "data":
            data = data_uri_bytes(stripped, _rules(policy))
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
    decoded = bare_base64(stripped, _rules(policy), "image data")
    if decoded is not None:
        return decode_bytes(decoded, policy, max_side=max_side, what="the base64 image")
    return _from_path(text, policy, max_side)
