"""Image inputs: the one place where untrusted image sources are read, checked and decoded.

``load_image`` (or ``aload_image``) turns bytes, a ``data:`` URI, base64, a PIL image, a local
path or an http(s) URL into a ``LoadedImage`` (the encoded bytes plus RGB888 pixels), holding it
to an ``ImagePolicy``: by default in-memory sources only, no local files, no network. Anything
refused raises ``ImageLoadError`` with a machine-readable ``reason``.

The modules, one job each: ``policy`` (the limits), ``loading`` (which source is which),
``local`` (files under the allowed directories), ``targets`` (which URLs and addresses a fetch
may reach), ``fetch`` (http(s) to vetted addresses: redirects re-checked, one timeout, a size
cap) and ``decode`` (Pillow restricted to the allowed formats, pixel cap, RGB conversion).
"""

from __future__ import annotations

from ..errors import ImageLoadError, ImageLoadReason
from .decode import LoadedImage
from .loading import ImageSource, aload_image, image_reader_for, load_image
from .policy import DEFAULT_IMAGE_POLICY, DEFAULT_IMAGE_TYPES, ImagePolicy

__all__ = [
    "DEFAULT_IMAGE_POLICY",
    "DEFAULT_IMAGE_TYPES",
    "ImageLoadError",
    "ImageLoadReason",
    "ImagePolicy",
    "ImageSource",
    "LoadedImage",
    "aload_image",
    "image_reader_for",
    "load_image",
]
