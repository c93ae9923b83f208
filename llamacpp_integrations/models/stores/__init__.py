"""Models other programs already downloaded, used where they lie: nothing is copied or linked.

* ``ollama://NAME[:TAG]``: Ollama's store (``ollama``);
* ``lmstudio://publisher/repo[/file.gguf | :TAG]``: LM Studio's models folder (``lmstudio``);
* ``hf://`` specs are looked for in llama.cpp's own cache (``LLAMA_CACHE``, ``llama_cache``)
  before the Hugging Face cache and the Hub.

This package only reads these folders. ``store_defaults`` gives the options a store keeps with
a model (Ollama's ``params`` and projector, and its template's chat format for a GGUF without a
chat template: ``ollama_template``), which the adapters and the commands take as defaults.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from typing import Any

from ...errors import ModelLoadError
from ..gguf import read_gguf_info
from .lmstudio import LMSTUDIO_PREFIX, resolve_lmstudio_spec
from .ollama import OLLAMA_PREFIX, OllamaModel, ollama_names, read_ollama_model
from .ollama_template import jinja_for_go_template

__all__ = [
    "LMSTUDIO_PREFIX",
    "OLLAMA_PREFIX",
    "STORE_PREFIXES",
    "StoreDefaults",
    "is_store_spec",
    "resolve_store_projector",
    "resolve_store_spec",
    "store_defaults",
    "store_display_name",
]

STORE_PREFIXES = (OLLAMA_PREFIX, LMSTUDIO_PREFIX)


def is_store_spec(spec: str | None) -> bool:
    """Whether ``spec`` names a model of another program's store."""
    return spec is not None and spec.strip().startswith(STORE_PREFIXES)


def resolve_store_spec(spec: str) -> Path:
    """The file an ``ollama://`` or ``lmstudio://`` spec names, where it lies."""
    spec = spec.strip()
    if spec.startswith(OLLAMA_PREFIX):
        return read_ollama_model(spec).model
    return resolve_lmstudio_spec(spec)


def resolve_store_projector(spec: str) -> Path | None:
    """The projector an ``ollama://`` model's manifest names (``ModelLoadError`` without one);
    ``None`` for a store whose projectors lie beside the model (LM Studio)."""
    spec = spec.strip()
    if not spec.startswith(OLLAMA_PREFIX):
        return None
    model = read_ollama_model(spec)
    if model.projector is None:
        raise ModelLoadError(
            spec,
            "mmproj='auto': the Ollama manifest has no projector layer (not a vision model); "
            "pass mmproj=None for a text-only engine",
        )
    return model.projector


@dataclass(frozen=True)
class StoreDefaults:
    """What a store keeps with a model: call options (``stop``, ``temperature``...) and engine
    settings (``mmproj``, ``n_ctx_per_seq``, ``lora_adapters``; ``chat_template`` for a GGUF
    without one), by this package's names."""

    sampling: dict[str, Any] = field(default_factory=dict)
    engine: dict[str, Any] = field(default_factory=dict)


def store_defaults(spec: str | None) -> StoreDefaults:
    """The defaults ``spec``'s store keeps with it; empty for other specs, and for a model the
    store does not have (resolving it raises that error, with the details, when it loads)."""
    if spec is None or not spec.strip().startswith(OLLAMA_PREFIX):
        return StoreDefaults()
    try:
        model = read_ollama_model(spec)
    except ModelLoadError:
        return StoreDefaults()
    engine = model.engine_defaults()
    template = _stand_in_template(model)
    if template is not None:
        engine["chat_template"] = template
    return StoreDefaults(model.sampling_defaults(), engine)


def _stand_in_template(model: OllamaModel) -> str | None:
    """The Jinja template of the manifest's chat format, for a GGUF that has no chat template
    of its own (``None`` when it has one: that one is used)."""
    if jinja_for_go_template(model.template) is None:
        return None
    return None if _has_chat_template(str(model.model)) else jinja_for_go_template(model.template)


@cache
def _has_chat_template(blob: str) -> bool:
    # A blob is named by its content's digest: its header, read once, never changes.
    try:
        return read_gguf_info(blob).chat_template is not None
    except ModelLoadError:
        return True  # a header that cannot be read: loading it says why


def store_display_name(path: str | os.PathLike[str]) -> str | None:
    """``name:tag`` for the model blob of an Ollama store (whose file name is only a hash),
    ``None`` for any other file."""
    path = Path(path)
    if path.parent.name != "blobs" or not path.name.startswith("sha256"):
        return None
    root, blob = path.parent.parent, path.name.replace(":", "-")
    key = (str(root), blob)
    if key not in _BLOB_NAMES:  # read once: a display name is asked for on every call
        for name in ollama_names(root):
            try:
                model = read_ollama_model(str(name), root)
            except ModelLoadError:
                continue
            if model.model.name.replace(":", "-") == blob:
                _BLOB_NAMES[key] = str(name).removeprefix(OLLAMA_PREFIX)
                break
    return _BLOB_NAMES.get(key)


# Only names found are kept, so a model pulled while this process runs is named too.
_BLOB_NAMES: dict[tuple[str, str], str] = {}
