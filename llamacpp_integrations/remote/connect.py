"""``connect``: the engine one server URL, or several, names."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ..engine.interface import InferenceEngine
from ..errors import InvalidRequestError
from .engine import RemoteEngine

__all__ = ["connect"]


def connect(base_url: str | Sequence[str], **options: Any) -> InferenceEngine:
    """A ``RemoteEngine`` for one URL; a ``FleetEngine`` spreading requests over several.

    ``options`` are the engines' keyword arguments (``embeddings_url``, ``api_key``,
    ``timeout``, ``allow_untested_build``...).
    """
    if isinstance(base_url, str):
        return RemoteEngine(base_url, **options)
    urls = list(base_url)
    if not urls or not all(isinstance(url, str) for url in urls):
        raise InvalidRequestError("base_url must be a URL or a non-empty list of URLs")
    if len(urls) == 1:
        return RemoteEngine(urls[0], **options)
    from .fleet import FleetEngine  # type: ignore[import-not-found,unused-ignore]

    engine: InferenceEngine = FleetEngine(urls, **options)
    return engine
