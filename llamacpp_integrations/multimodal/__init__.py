"""Image and audio inputs: the one place where untrusted media sources are read and checked.

``load_image`` (or ``aload_image``) turns bytes, a ``data:`` URI, base64, a PIL image, a local
path or an http(s) URL into a ``LoadedImage`` (the encoded bytes plus RGB888 pixels), holding it
to an ``ImagePolicy``: by default in-memory sources only, no local files, no network. Anything
refused raises ``ImageLoadError`` with a machine-readable ``reason``.

The modules, one job each: ``policy`` (the limits), ``loading`` (which source is which),
``local`` (files under the allowed directories), ``targets`` (which URLs and addresses a fetch
may reach), ``fetch`` (http(s) to vetted addresses: redirects re-checked, one timeout, a size
cap) and ``decode`` (Pillow restricted to the allowed formats, pixel cap, RGB conversion).

``load_audio`` (or ``aload_audio``) reads a clip from the same kinds of sources under the same
``ImagePolicy`` and holds it to ``AudioLimits`` (size, duration, declared types): ``audio``
reads the source, ``audio_headers`` checks the format by its bytes and the duration by its
header before anything decodes it. Refusals raise ``AudioLoadError``.
"""

from __future__ import annotations

from ..errors import AudioLoadError, AudioLoadReason, ImageLoadError, ImageLoadReason
from ..prompts.media import AudioInput
from .audio import (
    DEFAULT_AUDIO_LIMITS,
    DEFAULT_AUDIO_TYPES,
    AudioLimits,
    AudioSource,
    MediaReader,
    aload_audio,
    audio_reader_for,
    input_audio_source,
    load_audio,
    media_reader_for,
    read_audio,
)
from .decode import LoadedImage
from .loading import ImageSource, aload_image, image_reader_for, load_image
from .policy import DEFAULT_IMAGE_POLICY, DEFAULT_IMAGE_TYPES, ImagePolicy

__all__ = [
    "DEFAULT_AUDIO_LIMITS",
    "DEFAULT_AUDIO_TYPES",
    "DEFAULT_IMAGE_POLICY",
    "DEFAULT_IMAGE_TYPES",
    "AudioInput",
    "AudioLimits",
    "AudioLoadError",
    "AudioLoadReason",
    "AudioSource",
    "ImageLoadError",
    "ImageLoadReason",
    "ImagePolicy",
    "ImageSource",
    "LoadedImage",
    "MediaReader",
    "aload_audio",
    "aload_image",
    "audio_reader_for",
    "image_reader_for",
    "input_audio_source",
    "load_audio",
    "load_image",
    "media_reader_for",
    "read_audio",
]
