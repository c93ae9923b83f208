"""Media bytes carried inside a string: a ``data:`` URI or bare base64, and a source's scheme.

Images and clips are read from strings the same way (``loading`` and ``audio``); what differs
is the error class they raise, the media types they allow, their byte cap and how bytes are
recognised. ``MediaRules`` carries those, and each function here holds the string to them
before decoding more than a prefix of it.
"""

from __future__ import annotations

import base64
import binascii
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol
from urllib.parse import unquote_to_bytes

__all__ = ["MediaRules", "bare_base64", "data_uri_bytes", "source_scheme"]

_SCHEME = re.compile(r"([A-Za-z][A-Za-z0-9+.\-]*):")
_BASE64 = re.compile(r"[A-Za-z0-9+/_\-]+={0,2}")
_URLSAFE_TO_STANDARD = str.maketrans("-_", "+/")
_MIN_BARE_BASE64 = 16  # shorter strings are never taken for media data


class _LoadError(Protocol):
    """``ImageLoadError`` or ``AudioLoadError``: a message and a ``reason`` code."""

    def __call__(self, message: str, *, reason: Any) -> Exception: ...


@dataclass(frozen=True)
class MediaRules:
    """What a string's media must be: ``error`` is raised with a ``reason`` code; ``sniff``
    tells whether bytes start like this kind of media (``None`` if not)."""

    error: _LoadError
    allowed_content_types: tuple[str, ...]
    max_bytes: int
    sniff: Callable[[bytes], object | None]


def source_scheme(text: str) -> str | None:
    """The lowercased scheme of ``scheme:...``, or ``None`` for anything else. One letter is a
    Windows drive (``C:\\...``), a path, not a scheme."""
    match = _SCHEME.match(text)
    if match is None or len(match.group(1)) < 2:
        return None
    return match.group(1).lower()


def data_uri_bytes(uri: str, rules: MediaRules) -> bytes:
    """The payload of ``data:<type>[;base64],<payload>``, its declared type allowed and its
    size under the cap (base64 or percent-encoded)."""
    header, comma, payload = uri[len("data:") :].partition(",")
    if not comma:
        raise rules.error("a data URI without a ',' before its data", reason="decode-failed")
    params = [p.strip().lower() for p in header.split(";")]
    if params[0] not in rules.allowed_content_types:
        raise rules.error(
            f"data URI of type {params[0] or 'text/plain (none given)'!r}; allowed are "
            f"{', '.join(rules.allowed_content_types)}",
            reason="bad-content-type",
        )
    if "base64" in params[1:]:
        _check_encoded_size(len(payload), rules, "the data URI")
        data = _b64decode(payload)
        if data is None:
            raise rules.error("the data URI's base64 payload is invalid", reason="decode-failed")
        return data
    if len(payload) // 3 > rules.max_bytes:  # "%XY" is the densest percent-encoding gets
        raise rules.error(
            f"the data URI is over the {rules.max_bytes}-byte limit", reason="too-large"
        )
    return unquote_to_bytes(payload)


def bare_base64(text: str, rules: MediaRules, what: str) -> bytes | None:
    """``text`` decoded, if it is base64 of bytes that ``rules.sniff`` recognises; else
    ``None`` (the caller takes it for a path)."""
    compact = "".join(text.split())
    if len(compact) < _MIN_BARE_BASE64 or not _BASE64.fullmatch(compact):
        return None
    # Decode only a prefix first: a long path-like string must not cost a full decode.
    head = _b64decode(compact[:64])
    if head is None or rules.sniff(head) is None:
        return None
    _check_encoded_size(len(compact), rules, "the base64 string")
    data = _b64decode(compact)
    if data is None:
        raise rules.error(f"the base64 {what} is invalid past its start", reason="decode-failed")
    return data


def _check_encoded_size(encoded_length: int, rules: MediaRules, what: str) -> None:
    if encoded_length * 3 // 4 > rules.max_bytes:
        raise rules.error(
            f"{what} holds about {encoded_length * 3 // 4} bytes, over the "
            f"{rules.max_bytes}-byte limit",
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
