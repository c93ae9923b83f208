"""``ImagePolicy``: what an image input may be, where it may come from, and how big it may get."""

from __future__ import annotations

import math
import os
from dataclasses import dataclass
from pathlib import Path

from ..errors import InvalidRequestError

__all__ = ["DEFAULT_IMAGE_POLICY", "DEFAULT_IMAGE_TYPES", "ImagePolicy"]

DEFAULT_IMAGE_TYPES: tuple[str, ...] = (
    "image/png",
    "image/jpeg",
    "image/webp",
    "image/gif",
    "image/bmp",
)


@dataclass(frozen=True)
class ImagePolicy:
    """The limits every image input is held to; the default is the strict one.

    By default only in-memory images are accepted (bytes, ``data:`` URIs, base64, PIL images):
    local paths need ``allowed_dirs`` and URLs need ``allow_remote``.

    Attributes:
        allowed_dirs: Local paths are read only when, resolved with every symlink followed, they
            lie under one of these directories (resolved the same way, when checked). Empty: no
            local path is read.
        allow_remote: Fetch ``http`` and ``https`` URLs. The host must resolve only to public
            addresses; the connection goes to the vetted address, never to a second lookup.
        timeout_s: Budget of one remote fetch, redirects included (connect, TLS and every read).
        max_bytes: Most encoded bytes accepted, from any source (a download is cut off there).
        max_pixels: Most pixels (``width * height``, read from the header before decoding).
        max_redirects: Most redirects followed; every hop is checked like the first URL.
        allowed_content_types: Media types accepted (from a ``data:`` URI, an HTTP
            ``Content-Type``, or what the bytes turn out to be); they also choose which Pillow
            decoders may run at all.
        allow_private_networks: Let URLs reach loopback and private (non-global) addresses, for
            a server on the same machine or network. Link-local, multicast, reserved and
            unspecified addresses stay refused, and so do the cloud metadata addresses.
    """

    allowed_dirs: tuple[Path, ...] = ()
    allow_remote: bool = False
    timeout_s: float = 10.0
    max_bytes: int = 20 * 1024 * 1024
    max_pixels: int = 40_000_000
    max_redirects: int = 3
    allowed_content_types: tuple[str, ...] = DEFAULT_IMAGE_TYPES
    allow_private_networks: bool = False

    def __post_init__(self) -> None:
        # A lone string would otherwise be split into one entry per character.
        if isinstance(self.allowed_dirs, str | bytes | os.PathLike):
            raise InvalidRequestError("ImagePolicy.allowed_dirs must be a tuple of paths")
        if isinstance(self.allowed_content_types, str | bytes):
            raise InvalidRequestError("ImagePolicy.allowed_content_types must be a tuple of str")
        object.__setattr__(self, "allowed_dirs", tuple(Path(d) for d in self.allowed_dirs))
        object.__setattr__(
            self,
            "allowed_content_types",
            tuple(t.strip().lower() for t in self.allowed_content_types),
        )
        checks = {
            "timeout_s": math.isfinite(self.timeout_s) and self.timeout_s > 0,
            "max_bytes": self.max_bytes >= 1,
            "max_pixels": self.max_pixels >= 1,
            "max_redirects": self.max_redirects >= 0,
            "allowed_content_types": bool(self.allowed_content_types),
        }
        bad = [name for name, ok in checks.items() if not ok]
        if bad:
            raise InvalidRequestError(f"invalid ImagePolicy values: {', '.join(bad)}")


DEFAULT_IMAGE_POLICY = ImagePolicy()
"""The strict default: in-memory images only, no local paths, no URLs."""
