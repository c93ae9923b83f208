"""Other programs' model stores laid out in a temporary folder, as those programs lay them out,
holding the real test model's file (hard-linked, or linked, never copied: 100 MB).

* ``ollama_store``: Ollama's ``manifests/<host>/<namespace>/<model>/<tag>`` JSON manifests
  naming ``blobs/sha256-<hex>`` layers, with correct digests and sizes;
* ``hub_repo``: a Hugging Face cache repository (``models--owner--repo`` with ``blobs``,
  ``refs/main`` and a snapshot of links), the layout llama.cpp's ``-hf`` writes in LLAMA_CACHE;
* ``lmstudio_repo``: LM Studio's ``<models>/<publisher>/<repo>/<file>.gguf``.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from llamacpp_integrations.models import KNOWN_MODELS

# The sha256 of SmolLM2-135M-Instruct.Q4_1.gguf, from its wheel's RECORD (fetch checks it), so
# the 100 MB file is not hashed again for each store.
SMOLLM_SHA256 = KNOWN_MODELS["smollm2-135m"].sha256
COMMIT = "0123456789abcdef0123456789abcdef01234567"


def place(source: Path, target: Path) -> Path:
    """``target`` as the same file as ``source``: a hard link, else a symbolic link."""
    target.parent.mkdir(parents=True, exist_ok=True)
    try:
        os.link(source, target)
    except OSError:  # another file system
        target.symlink_to(source)
    return target


def _layer(blobs: Path, media: str, data: bytes) -> dict[str, Any]:
    digest = hashlib.sha256(data).hexdigest()
    (blobs / f"sha256-{digest}").write_bytes(data)
    return {"mediaType": media, "digest": f"sha256:{digest}", "size": len(data)}


def ollama_store(
    root: Path,
    model_file: Path,
    name: str = "registry.ollama.ai/library/smollm2/135m",
    *,
    params: Mapping[str, Any] | None = None,
    template: str | None = "{{ .Prompt }}",
    projector: bytes | None = None,
    old_blob_names: bool = False,
) -> Path:
    """Add model ``name`` (``host/namespace/model/tag``) to the Ollama store at ``root``;
    return its model blob."""
    blobs = root / "blobs"
    blobs.mkdir(parents=True, exist_ok=True)
    assert SMOLLM_SHA256 is not None and model_file.name == KNOWN_MODELS["smollm2-135m"].filename
    blob_name = f"sha256{':' if old_blob_names else '-'}{SMOLLM_SHA256}"
    blob = blobs / blob_name
    if not blob.exists():
        place(model_file, blob)
    media = "application/vnd.ollama.image."
    layers = [
        {
            "mediaType": media + "model",
            "digest": f"sha256:{SMOLLM_SHA256}",
            "size": model_file.stat().st_size,
        }
    ]
    if projector is not None:
        layers.append(_layer(blobs, media + "projector", projector))
    if template is not None:
        layers.append(_layer(blobs, media + "template", template.encode()))
    if params is not None:
        layers.append(_layer(blobs, media + "params", json.dumps(params).encode()))
    config = _layer(
        blobs, "application/vnd.docker.container.image.v1+json", b'{"model_format":"gguf"}'
    )
    manifest = {
        "schemaVersion": 2,
        "mediaType": "application/vnd.docker.distribution.manifest.v2+json",
        "config": config,
        "layers": layers,
    }
    path = root / "manifests" / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(manifest), encoding="utf-8")
    return blob


def hub_repo(root: Path, repo_id: str, files: Mapping[str, Path | bytes]) -> Path:
    """A repository in a Hugging Face cache at ``root`` (snapshot ``COMMIT``, ref ``main``):
    each file a blob named by its hash and a relative link to it in the snapshot. Returns the
    snapshot folder."""
    repo = root / ("models--" + repo_id.replace("/", "--"))
    (repo / "refs").mkdir(parents=True, exist_ok=True)
    (repo / "refs" / "main").write_text(COMMIT, encoding="utf-8")
    snapshot = repo / "snapshots" / COMMIT
    for name, content in files.items():
        if isinstance(content, Path):
            digest = str(SMOLLM_SHA256)
            blob = repo / "blobs" / digest
            if not blob.exists():
                place(content, blob)
        else:
            digest = hashlib.sha256(content).hexdigest()
            blob = repo / "blobs" / digest
            blob.parent.mkdir(parents=True, exist_ok=True)
            blob.write_bytes(content)
        link = snapshot / name
        link.parent.mkdir(parents=True, exist_ok=True)
        link.symlink_to(os.path.relpath(blob, link.parent))
    return snapshot


def lmstudio_repo(root: Path, publisher: str, repo: str, files: Mapping[str, Path | bytes]) -> Path:
    """A repository folder in LM Studio's models folder at ``root``; returns the folder."""
    folder = root / publisher / repo
    folder.mkdir(parents=True, exist_ok=True)
    for name, content in files.items():
        if isinstance(content, Path):
            place(content, folder / name)
        else:
            (folder / name).write_bytes(content)
    return folder
