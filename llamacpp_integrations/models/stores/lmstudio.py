"""LM Studio's models folder, read in place: ``lmstudio://publisher/repo[/file.gguf | :TAG]``.

LM Studio downloads a Hugging Face repository's file to ``<models>/<publisher>/<repo>/<file>``
(its "My Models" folder; the publisher and repo are the Hugging Face owner and repository), with
the repository's ``mmproj*.gguf`` beside a vision model. ``<models>`` is ``~/.lmstudio/models``
(LM Studio 0.3 and later), or ``~/.cache/lm-studio/models`` (earlier versions); LM Studio lets
the user move it, so ``$LMSTUDIO_MODELS`` (this package's, not LM Studio's) names it then.

A spec picks the file as ``hf://`` does (``gguf_files``): the file named, the one of a
quantization tag, or the folder's only model (else its ``Q4_K_M``); ``mmproj="auto"`` takes the
projector beside it, as for any local file.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path

from ...errors import ModelLoadError
from ..gguf_files import choose_model_file, is_mmproj, split_name

__all__ = [
    "LMSTUDIO_MODELS_ENV",
    "LMSTUDIO_PREFIX",
    "LMStudioSpec",
    "lmstudio_models",
    "lmstudio_models_dir",
    "parse_lmstudio_spec",
    "resolve_lmstudio_spec",
]

LMSTUDIO_PREFIX = "lmstudio://"
LMSTUDIO_MODELS_ENV = "LMSTUDIO_MODELS"
_PART = re.compile(r"^[^/\\:]+$")


@dataclass(frozen=True)
class LMStudioSpec:
    """A parsed ``lmstudio://`` spec: a folder, and a file in it or a tag (``None``: default)."""

    publisher: str
    repo: str
    filename: str | None = None
    tag: str | None = None

    def __str__(self) -> str:
        text = f"{LMSTUDIO_PREFIX}{self.publisher}/{self.repo}"
        if self.filename is not None:
            return f"{text}/{self.filename}"
        return text + (f":{self.tag}" if self.tag else "")


def parse_lmstudio_spec(spec: str) -> LMStudioSpec:
    """Parse ``lmstudio://publisher/repo[/file.gguf | :TAG]``."""
    text = spec.strip()
    publisher, _, rest = text.removeprefix(LMSTUDIO_PREFIX).partition("/")
    repo, _, filename = rest.partition("/")
    tag: str | None = None
    if not filename and ":" in repo:
        repo, tag = repo.rsplit(":", 1)
    names = [publisher, repo, *([tag] if tag is not None else [])]
    parts = filename.split("/") if filename else []
    valid = all(_PART.match(n) for n in [*names, *parts]) and ".." not in [repo, *parts]
    if not text.startswith(LMSTUDIO_PREFIX) or not valid or publisher == "..":
        raise ModelLoadError(
            spec,
            "malformed lmstudio:// spec; expected lmstudio://publisher/repo/file.gguf, "
            "lmstudio://publisher/repo:QUANT or lmstudio://publisher/repo",
        )
    return LMStudioSpec(publisher, repo, filename or None, tag)


def lmstudio_models_dir() -> Path:
    """LM Studio's models folder: ``$LMSTUDIO_MODELS``, else ``~/.lmstudio/models``, else
    the older ``~/.cache/lm-studio/models`` when only that one exists."""
    env = os.environ.get(LMSTUDIO_MODELS_ENV)
    if env:
        return Path(env).expanduser()
    current = Path.home() / ".lmstudio" / "models"
    older = Path.home() / ".cache" / "lm-studio" / "models"
    return older if not current.is_dir() and older.is_dir() else current


def _models_in(folder: Path) -> list[str]:
    """The model files of a repo folder (paths under it), projectors and later split parts
    left out."""
    found = []
    for path in sorted(folder.rglob("*.gguf")):
        name = path.relative_to(folder).as_posix()
        split = split_name(path.name)
        if path.is_file() and not is_mmproj(name) and (split is None or split.index == 1):
            found.append(name)
    return found


def lmstudio_models(root: Path | None = None) -> list[LMStudioSpec]:
    """Every model file in LM Studio's folder, as the spec that names it."""
    root = lmstudio_models_dir() if root is None else root
    if not root.is_dir():
        return []
    specs = []
    for folder in sorted(p for p in root.glob("*/*") if p.is_dir()):
        for name in _models_in(folder):
            specs.append(LMStudioSpec(folder.parent.name, folder.name, name))
    return specs


def resolve_lmstudio_spec(spec: str, root: Path | None = None) -> Path:
    """The file an ``lmstudio://`` spec names, in place (``root``: :func:`lmstudio_models_dir`).

    Raises:
        ModelLoadError: A malformed spec, a folder or file LM Studio does not have (listing
            what it has), or no single file for the tag.
    """
    parsed = parse_lmstudio_spec(spec)
    root = lmstudio_models_dir() if root is None else root
    folder = root / parsed.publisher / parsed.repo
    if not folder.is_dir():
        have = ", ".join(str(LMStudioSpec(s.publisher, s.repo)) for s in lmstudio_models(root))
        raise ModelLoadError(
            spec, f"no such folder in LM Studio's models ({root}); it has: {have or 'none'}"
        )
    files = _models_in(folder)
    name = parsed.filename
    if name is None:
        name = choose_model_file(files, parsed.tag, label=spec)
    elif not (folder / name).is_file():
        raise ModelLoadError(
            spec, f"no such file in {folder}; it has: {', '.join(files) or 'none'}"
        )
    return folder / name
