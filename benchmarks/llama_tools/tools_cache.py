"""What build.py and release.py share: the cache folder outside the checkout, the key of a
build's inputs, and the links the Makefile and the tests look for."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path


def cache_root(kind: str) -> Path:
    """``$XDG_CACHE_HOME/llamacpp-integrations/<kind>`` (``~/.cache`` by default): kept across
    clones, so a new checkout on the same machine links programs without compiling them."""
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "llamacpp-integrations" / kind


def digest(paths: list[Path]) -> str:
    """A short hash of the files' names and bytes: a build's inputs, as the cache's key."""
    h = hashlib.sha256()
    for path in paths:
        h.update(path.name.encode())
        h.update(path.read_bytes())
    return h.hexdigest()[:20]


def link_programs(programs: tuple[str, ...], target: Path, out: Path) -> None:
    """Point ``out/<program>`` at each program built in ``target``."""
    out.mkdir(parents=True, exist_ok=True)
    for name in programs:
        link = out / name
        link.unlink(missing_ok=True)
        link.symlink_to(target / name)
