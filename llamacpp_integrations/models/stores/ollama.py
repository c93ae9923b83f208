"""Ollama's model store, read in place: ``ollama://NAME[:TAG]``.

The layout (Ollama's ``server/manifest.go``, ``server/images.go`` and ``types/model/name.go``;
the same since 0.1.x, when blob names changed from ``sha256:<hex>`` to ``sha256-<hex>``, both
read here)::

    $OLLAMA_MODELS  (default ~/.ollama/models; the Linux service's /usr/share/ollama/.ollama/models)
        manifests/<host>/<namespace>/<model>/<tag>   an OCI-style JSON manifest
        blobs/sha256-<hex>                           each layer, named by its digest

A name is ``[host/][namespace/]model[:tag]``: host ``registry.ollama.ai``, namespace
``library`` and tag ``latest`` by default, so ``ollama://smollm2:135m`` is
``manifests/registry.ollama.ai/library/smollm2/135m`` and a model pulled from Hugging Face is
``ollama://hf.co/owner/repo:Q4_K_M``. The manifest's ``layers`` each have a ``mediaType``, a
``digest`` and a ``size``; of the ``application/vnd.ollama.image.*`` types:

* ``model``: the GGUF, loaded from its blob as it is (llama.cpp needs no ``.gguf`` suffix);
* ``projector``: the image projector of a vision model (``mmproj``);
* ``params``: JSON options (``stop``, ``temperature``, ``num_ctx``...), taken as defaults;
* ``adapter``: a LoRA adapter GGUF applied on top of the model;
* ``template``: a Go template, which this package does not run: the GGUF's own chat template
  (or ``chat_template=``) is used; ``system``, ``license``: text, kept for who wants it.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ...errors import ModelLoadError

__all__ = [
    "OLLAMA_MODELS_ENV",
    "OLLAMA_PREFIX",
    "OllamaModel",
    "OllamaName",
    "ollama_models_dir",
    "ollama_names",
    "parse_ollama_spec",
    "read_ollama_model",
]

OLLAMA_PREFIX = "ollama://"
OLLAMA_MODELS_ENV = "OLLAMA_MODELS"
DEFAULT_HOST = "registry.ollama.ai"
DEFAULT_NAMESPACE = "library"
DEFAULT_TAG = "latest"
_MEDIA = "application/vnd.ollama.image."
_DIGEST = re.compile(r"^sha256[:-](?P<hex>[0-9a-f]{64})$")
_PART = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*$")

# Ollama's option name -> this package's call option (client.options); num_ctx is an engine
# setting. Options with no counterpart here (mirostat, num_keep...) are left out.
_SAMPLING = {
    "temperature": "temperature",
    "top_k": "top_k",
    "top_p": "top_p",
    "min_p": "min_p",
    "repeat_penalty": "repeat_penalty",
    "presence_penalty": "presence_penalty",
    "frequency_penalty": "frequency_penalty",
    "repeat_last_n": "penalty_last_n",
    "seed": "seed",
}


@dataclass(frozen=True)
class OllamaName:
    """A model's name in the store: ``host/namespace/model:tag``."""

    host: str
    namespace: str
    model: str
    tag: str

    @property
    def manifest_path(self) -> Path:
        """The manifest's path under ``manifests/``."""
        return Path(self.host, self.namespace, self.model, self.tag)

    def __str__(self) -> str:
        """The shortest spec naming it (``ollama://smollm2:135m``)."""
        if self.host != DEFAULT_HOST:
            name = f"{self.host}/{self.namespace}/{self.model}"
        elif self.namespace != DEFAULT_NAMESPACE:
            name = f"{self.namespace}/{self.model}"
        else:
            name = self.model
        return f"{OLLAMA_PREFIX}{name}:{self.tag}"


def parse_ollama_spec(spec: str) -> OllamaName:
    """Parse ``ollama://[host/][namespace/]model[:tag]`` (see the module doc)."""
    body = spec.strip().removeprefix(OLLAMA_PREFIX)
    head, colon, tail = body.rpartition(":")
    name, tag = (head, tail) if colon and "/" not in tail else (body, DEFAULT_TAG)
    parts = name.split("/")
    valid = 1 <= len(parts) <= 3 and all(_PART.match(p) for p in [*parts, tag])
    if not spec.strip().startswith(OLLAMA_PREFIX) or not valid:
        raise ModelLoadError(
            spec, "malformed ollama:// spec; expected ollama://[host/][namespace/]model[:tag]"
        )
    defaults = [DEFAULT_HOST, DEFAULT_NAMESPACE][: 3 - len(parts)]
    host, namespace, model = [*defaults, *parts]
    return OllamaName(host, namespace, model, tag)


def ollama_models_dir() -> Path:
    """Ollama's store: ``$OLLAMA_MODELS``, else ``~/.ollama/models``, else the Linux service's
    ``/usr/share/ollama/.ollama/models`` when only that one exists."""
    env = os.environ.get(OLLAMA_MODELS_ENV)
    if env:
        return Path(env).expanduser()
    home = Path.home() / ".ollama" / "models"
    service = Path("/usr/share/ollama/.ollama/models")
    return service if not home.is_dir() and service.is_dir() else home


@dataclass(frozen=True)
class OllamaModel:
    """A model of Ollama's store: the blobs its manifest names, and its options."""

    name: OllamaName
    manifest: Path
    model: Path
    """The GGUF blob, loaded in place."""
    projector: Path | None = None
    adapters: tuple[Path, ...] = ()
    params: Mapping[str, Any] = field(default_factory=dict)
    """The ``params`` layer as Ollama wrote it (its option names)."""
    template: str | None = None
    """The Go template: shown, never run (the GGUF's Jinja template is used)."""
    system: str | None = None

    def sampling_defaults(self) -> dict[str, Any]:
        """The ``params`` that are call options here, by this package's names (``stop``,
        ``temperature``, ``top_k``, ``penalty_last_n``, ``max_tokens``...)."""
        out = {
            ours: self.params[theirs] for theirs, ours in _SAMPLING.items() if theirs in self.params
        }
        stop = self.params.get("stop")
        if isinstance(stop, str):
            stop = [stop]
        if isinstance(stop, list) and stop:
            out["stop"] = [str(s) for s in stop]
        predict = self.params.get("num_predict")
        if isinstance(predict, int) and predict > 0:
            out["max_tokens"] = predict
        return out

    def engine_defaults(self) -> dict[str, Any]:
        """Engine settings the manifest implies: the projector as ``mmproj``, the adapters as
        ``lora_adapters`` and ``num_ctx`` as ``n_ctx_per_seq`` (Ollama's context per request)."""
        out: dict[str, Any] = {}
        if self.projector is not None:
            out["mmproj"] = str(self.projector)
        if self.adapters:
            out["lora_adapters"] = tuple((str(a), 1.0) for a in self.adapters)
        num_ctx = self.params.get("num_ctx")
        if isinstance(num_ctx, int) and num_ctx > 0:
            out["n_ctx_per_seq"] = num_ctx
        return out


def ollama_names(root: Path | None = None) -> list[OllamaName]:
    """Every model of the store (every manifest file), sorted."""
    manifests = (ollama_models_dir() if root is None else root) / "manifests"
    if not manifests.is_dir():
        return []
    names = []
    for path in manifests.glob("*/*/*/*"):
        if path.is_file():
            host, namespace, model, tag = path.relative_to(manifests).parts
            names.append(OllamaName(host, namespace, model, tag))
    return sorted(names, key=str)


def _unknown(spec: str, name: OllamaName, root: Path) -> ModelLoadError:
    names = ollama_names(root)
    same = [str(n) for n in names if (n.host, n.namespace, n.model) == name.manifest_path.parts[:3]]
    listed = ", ".join(same or [str(n) for n in names]) or "none"
    what = "tags of this model" if same else "models"
    return ModelLoadError(
        spec, f"not in Ollama's store at {root} (pull it with `ollama pull`); {what}: {listed}"
    )


def _blob(root: Path, layer: Mapping[str, Any], spec: str) -> Path:
    found = _DIGEST.match(str(layer.get("digest", "")))
    if found is None:
        raise ModelLoadError(
            spec, f"manifest layer has a malformed digest: {layer.get('digest')!r}"
        )
    for name in (f"sha256-{found['hex']}", f"sha256:{found['hex']}"):
        path = root / "blobs" / name
        if path.is_file():
            return path
    raise ModelLoadError(
        spec, f"blob {layer['digest']} named by the manifest is not in {root / 'blobs'}"
    )


def _text(path: Path) -> str:
    return path.read_text(encoding="utf-8", errors="replace")


def _manifest_file(root: Path, name: OllamaName) -> Path | None:
    exact = root / "manifests" / name.manifest_path
    if exact.is_file():
        return exact
    # Names are case-insensitive to Ollama; stores made on a case-insensitive disk keep any case.
    wanted = str(name).lower()
    return next(
        (
            root / "manifests" / n.manifest_path
            for n in ollama_names(root)
            if str(n).lower() == wanted
        ),
        None,
    )


def read_ollama_model(spec: str, root: Path | None = None) -> OllamaModel:
    """The model ``spec`` names in Ollama's store (``root``: :func:`ollama_models_dir`).

    Raises:
        ModelLoadError: A malformed spec, a model or tag the store lacks (listing what it has),
            a manifest that is not JSON or names no model layer, or a blob missing.
    """
    name = parse_ollama_spec(spec)
    root = ollama_models_dir() if root is None else root
    manifest = _manifest_file(root, name)
    if manifest is None:
        raise _unknown(spec, name, root)
    try:
        layers = json.loads(_text(manifest)).get("layers", [])
    except (OSError, ValueError, AttributeError) as exc:
        raise ModelLoadError(spec, f"cannot read the manifest {manifest}: {exc}") from exc
    by_type: dict[str, list[Path]] = {}
    for layer in layers:
        # Newer media types may carry parameters ("...template; name=x"): the type is first.
        kind = str(layer.get("mediaType", "")).split(";")[0].strip().removeprefix(_MEDIA)
        by_type.setdefault(kind, []).append(_blob(root, layer, spec))
    if not by_type.get("model"):
        # A model Ollama imported from safetensors keeps tensors, not a GGUF (``image.tensor``).
        raise ModelLoadError(spec, f"the manifest {manifest} names no GGUF model layer")
    try:
        params = json.loads(_text(by_type["params"][0])) if by_type.get("params") else {}
    except ValueError as exc:
        raise ModelLoadError(spec, f"the params layer is not JSON: {exc}") from exc

    def first_text(kind: str) -> str | None:
        return _text(by_type[kind][0]) if by_type.get(kind) else None

    return OllamaModel(
        name=name,
        manifest=manifest,
        model=by_type["model"][0],
        projector=by_type["projector"][0] if by_type.get("projector") else None,
        adapters=tuple(by_type.get("adapter", ())),
        params=params if isinstance(params, dict) else {},
        template=first_text("template"),
        system=first_text("system"),
    )
