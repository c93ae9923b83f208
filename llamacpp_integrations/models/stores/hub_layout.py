"""Reading a Hugging Face cache folder (the "hub layout") without ``huggingface_hub``.

Both the Hugging Face cache and llama.cpp's ``-hf`` downloads (release b11434 and later write
that layout too: ``common/hf-cache.cpp``) keep a repository as::

    <root>/models--<owner>--<repo>/
        blobs/<hash>                       the contents
        refs/<revision>                    a text file holding a commit hash (``main``...)
        snapshots/<commit>/<path in repo>  links to the blobs (or the files themselves where
                                           links cannot be made)

This module only reads that tree; it never writes, so it needs no optional dependency.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

__all__ = ["HubSnapshot", "hf_cache_dir", "hub_snapshot", "hub_snapshots"]

_PREFIX = "models--"


def hf_cache_dir() -> Path:
    """The Hugging Face cache ``hf://`` reads: ``huggingface_hub``'s when it is installed, else
    found by its rules: ``$HF_HUB_CACHE`` (or the older ``$HUGGINGFACE_HUB_CACHE``), else
    ``$HF_HOME/hub``, else ``$XDG_CACHE_HOME/huggingface/hub``, else
    ``~/.cache/huggingface/hub``."""
    try:
        from huggingface_hub import constants
    except ImportError:
        pass
    else:
        return Path(constants.HF_HUB_CACHE)
    for name in ("HF_HUB_CACHE", "HUGGINGFACE_HUB_CACHE"):
        value = os.environ.get(name)
        if value:
            return Path(value).expanduser()
    home = os.environ.get("HF_HOME")
    if home:
        return Path(home).expanduser() / "hub"
    xdg = os.environ.get("XDG_CACHE_HOME")
    base = Path(xdg).expanduser() if xdg else Path.home() / ".cache"
    return base / "huggingface" / "hub"


@dataclass(frozen=True)
class HubSnapshot:
    """One cached revision of a repository: its files, by path in the repository."""

    repo_id: str
    revision: str | None
    """The ref the snapshot was found by (``None``: ``main``)."""
    folder: Path
    files: tuple[str, ...]

    def path(self, name: str) -> Path:
        """Where file ``name`` of the repository is (its link, not the blob it points to:
        a split model's parts must stay side by side under their names)."""
        return self.folder / name


def _repo_folder(root: Path, repo_id: str) -> Path:
    return root / (_PREFIX + repo_id.replace("/", "--"))


def _files(folder: Path) -> tuple[str, ...]:
    # A dangling link (a blob deleted by hand) is not a file of the snapshot.
    return tuple(sorted(p.relative_to(folder).as_posix() for p in folder.rglob("*") if p.is_file()))


def hub_snapshot(root: Path, repo_id: str, revision: str | None = None) -> HubSnapshot | None:
    """The snapshot of ``repo_id`` at ``revision`` (a ref or a commit; ``None``: ``main``,
    else any ref, as llama.cpp's ``get_cached_ref`` takes) under ``root``, or ``None``."""
    repo = _repo_folder(root, repo_id)
    refs = repo / "refs"
    wanted = [revision] if revision else ["main"]
    if revision is None and refs.is_dir():
        wanted += sorted(p.name for p in refs.iterdir() if p.is_file() and p.name != "main")
    for ref in wanted:
        ref_file = refs / ref
        try:
            commit = ref_file.read_text(encoding="utf-8").strip() if ref_file.is_file() else ref
        except OSError:
            continue
        folder = repo / "snapshots" / commit
        if commit and folder.is_dir():
            return HubSnapshot(repo_id, None if ref == "main" else ref, folder, _files(folder))
    return None


def hub_snapshots(root: Path) -> list[HubSnapshot]:
    """One snapshot per cached model repository under ``root`` (see :func:`hub_snapshot`)."""
    if not root.is_dir():
        return []
    found = []
    for repo in sorted(root.iterdir()):
        if not repo.name.startswith(_PREFIX) or not repo.is_dir():
            continue
        owner_repo = repo.name[len(_PREFIX) :].split("--", 1)
        if len(owner_repo) != 2 or not all(owner_repo):
            continue
        snapshot = hub_snapshot(root, "/".join(owner_repo))
        if snapshot is not None:
            found.append(snapshot)
    return found
