"""llama.cpp's own download cache (``LLAMA_CACHE``), so a model fetched with ``llama-server
-hf`` is not downloaded a second time for ``hf://``.

Where llama.cpp puts its downloads, read from release b11434's sources:

* ``common/common.cpp`` ``fs_get_cache_directory``: ``$LLAMA_CACHE``, else
  ``$XDG_CACHE_HOME/llama.cpp`` or ``~/.cache/llama.cpp`` (``~/Library/Caches/llama.cpp`` on
  macOS, ``%LOCALAPPDATA%\\llama.cpp`` on Windows). Flat files land there: ``-mu URL`` keeps
  the URL's file name, ``-dr`` (Docker Hub) writes ``<owner>_<repo>_<tag>.gguf``, and builds
  before the Hugging Face layout wrote ``-hf`` files as ``<owner>_<repo>_<file>.gguf`` (with a
  ``.etag`` or ``.json`` beside them).
* ``common/hf-cache.cpp`` ``get_cache_directory``: ``-hf`` now writes the Hugging Face cache
  layout (``models--owner--repo/...``, see ``hub_layout``) into ``$LLAMA_CACHE`` when it is
  set, else into the Hugging Face cache itself, where ``hf://`` finds it already.

``find_hub_file`` looks in both for what an ``hf://`` spec names; nothing is copied or linked.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

from ...errors import ModelLoadError
from ..gguf_files import choose_model_file, is_mmproj, split_name
from ..hub import HubSpec
from .hub_layout import hub_snapshot

__all__ = ["LLAMA_CACHE_ENV", "find_hub_file", "llama_cache_dir", "llama_cache_flat_files"]

LLAMA_CACHE_ENV = "LLAMA_CACHE"


def llama_cache_dir() -> Path:
    """llama.cpp's cache folder, by ``fs_get_cache_directory``'s rules (see module doc)."""
    env = os.environ.get(LLAMA_CACHE_ENV)
    if env:
        return Path(env).expanduser()
    if sys.platform == "win32":
        return Path(os.environ.get("LOCALAPPDATA", Path.home())) / "llama.cpp"
    if sys.platform == "darwin":
        return Path.home() / "Library" / "Caches" / "llama.cpp"
    xdg = os.environ.get("XDG_CACHE_HOME")
    return (Path(xdg).expanduser() if xdg else Path.home() / ".cache") / "llama.cpp"


def llama_cache_flat_files(root: Path | None = None) -> list[Path]:
    """The ``*.gguf`` files lying directly in the cache folder (``-mu``, ``-dr``, older
    ``-hf``), projectors and the later parts of split models left out."""
    folder = llama_cache_dir() if root is None else root
    if not folder.is_dir():
        return []
    found = []
    for path in sorted(folder.iterdir()):
        if path.suffix.lower() != ".gguf" or not path.is_file() or is_mmproj(path.name):
            continue
        split = split_name(path.name)
        if split is None or split.index == 1:
            found.append(path)
    return found


def _complete(folder: Path, name: str) -> bool:
    """Whether ``name`` (and every other part, when it is split) is in ``folder``."""
    split = split_name(name)
    parts = [name] if split is None else split.parts
    return all((folder / part).is_file() for part in parts)


def _from_snapshot(root: Path, spec: HubSpec) -> Path | None:
    snapshot = hub_snapshot(root, spec.repo_id, spec.revision)
    if snapshot is None:
        return None
    name = spec.filename
    if name is None:
        try:
            name = choose_model_file(snapshot.files, spec.tag, label=str(spec))
        except ModelLoadError:  # not decidable from what is cached: let the Hub answer
            return None
    if name not in snapshot.files or not _complete(snapshot.path(name).parent, Path(name).name):
        return None
    return snapshot.path(name)


def _from_flat(root: Path, spec: HubSpec) -> Path | None:
    """An older ``-hf`` download: ``<owner>_<repo>_<file name>`` in the cache folder."""
    if spec.revision is not None or not root.is_dir():
        return None  # flat files keep no revision: only an unpinned spec may take one
    prefix = spec.repo_id.replace("/", "_") + "_"
    if spec.filename is not None:
        name = prefix + spec.filename.rsplit("/", 1)[-1]
        return root / name if _complete(root, name) else None
    names = [p.name[len(prefix) :] for p in root.iterdir() if p.name.startswith(prefix)]
    try:
        chosen = choose_model_file(names, spec.tag, label=str(spec))
    except ModelLoadError:  # none, or no single choice: let the Hub answer
        return None
    return root / (prefix + chosen) if _complete(root, prefix + chosen) else None


def find_hub_file(spec: HubSpec) -> Path | None:
    """The file ``spec`` names if llama.cpp already downloaded it, else ``None``.

    Looked for in ``$LLAMA_CACHE`` (or llama.cpp's default cache folder) in both layouts; the
    Hugging Face cache is ``huggingface_hub``'s to search.
    """
    root = llama_cache_dir()
    return _from_snapshot(root, spec) or _from_flat(root, spec)
