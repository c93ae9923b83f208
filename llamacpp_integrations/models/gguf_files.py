"""Choosing GGUF files among a repository's files: quantization tags, split parts, projectors.

Pure name logic (no I/O), shared by the Hugging Face fetcher and the local ``mmproj="auto"``
lookup. The rules:

* a *tag* (``Q4_K_M``, ``IQ4_XS``, ``F16``...) matches a file when it appears in the file's
  path as a whole token, case-insensitively: delimited by characters other than letters and
  digits, and not followed by ``_`` and more of a longer tag (``Q4_K`` is not ``Q4_K_M``);
* a *split* GGUF is ``name-00001-of-00003.gguf``...; its parts count as one model;
* a *projector* is a ``.gguf`` whose file name starts with ``mmproj``; projectors are never
  chosen as the model.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from ..errors import ModelLoadError

__all__ = [
    "DEFAULT_TAG",
    "SplitName",
    "choose_mmproj",
    "choose_model_file",
    "is_mmproj",
    "quant_tag",
    "split_name",
]

DEFAULT_TAG = "Q4_K_M"
"""The tag chosen when a repository holds several models and the spec names none."""

_GGUF = ".gguf"
_SPLIT = re.compile(r"^(?P<stem>.+)-(?P<index>\d+)-of-(?P<count>\d+)\.gguf$", re.IGNORECASE)
# Known quantization names, longest forms first by the regex's greediness on ``_`` parts.
_TAG = re.compile(
    r"(?<![A-Za-z0-9])(?P<tag>(?:I?Q\d+(?:_[0-9A-Z]+)*|TQ\d_\d|B?F16|F32|BF16|MXFP4(?:_MOE)?))"
    r"(?![A-Za-z0-9]|_[A-Za-z0-9])",
    re.IGNORECASE,
)


@dataclass(frozen=True)
class SplitName:
    """A part of a split GGUF: ``stem-{index}-of-{count}.gguf``, numbers ``width`` digits."""

    stem: str
    index: int
    count: int
    width: int

    def part(self, index: int) -> str:
        """The name of part ``index`` (from 1)."""
        return f"{self.stem}-{index:0{self.width}d}-of-{self.count:0{self.width}d}{_GGUF}"

    @property
    def parts(self) -> list[str]:
        """All part names, the first (the one llama.cpp is given) first."""
        return [self.part(i) for i in range(1, self.count + 1)]


def split_name(path: str) -> SplitName | None:
    """``path`` as a part of a split GGUF, or ``None`` for a whole file."""
    found = _SPLIT.match(path)
    if found is None:
        return None
    index, count = int(found["index"]), int(found["count"])
    if not 1 <= index <= count:
        return None
    return SplitName(found["stem"], index, count, len(found["index"]))


def _basename(path: str) -> str:
    return path.rsplit("/", 1)[-1]


def is_mmproj(path: str) -> bool:
    """Whether ``path`` names a multimodal projector GGUF (``mmproj*.gguf``)."""
    name = _basename(path).lower()
    return name.startswith("mmproj") and name.endswith(_GGUF)


def _model_key(path: str) -> str:
    """One key per model: a split's parts share their first part's name."""
    split = split_name(path)
    return split.part(1) if split is not None else path


def quant_tag(path: str) -> str | None:
    """The quantization tag in ``path`` (upper case), the last one when there are several."""
    stem = path[: -len(_GGUF)] if path.lower().endswith(_GGUF) else path
    split = split_name(path)
    if split is not None:
        stem = split.stem
    tags = [m["tag"].upper() for m in _TAG.finditer(stem)]
    return tags[-1] if tags else None


def _has_token(path: str, tag: str) -> bool:
    pattern = rf"(?<![A-Za-z0-9]){re.escape(tag)}(?![A-Za-z0-9]|_[A-Za-z0-9])"
    return re.search(pattern, path, re.IGNORECASE) is not None


def _describe(models: Iterable[str]) -> str:
    """``Q4_K_M (model-Q4_K_M.gguf), ...`` for an error message."""
    items = [f"{quant_tag(m) or '?'} ({m})" for m in sorted(models)]
    return ", ".join(items) if items else "none"


def choose_model_file(files: Sequence[str], tag: str | None, *, label: str) -> str:
    """The model file of ``files`` (paths in a repository) that ``tag`` names.

    Without a tag: the only model, else the one tagged ``DEFAULT_TAG``. A split model is
    returned as its first part. Raises ``ModelLoadError`` listing the models (with their tags)
    when nothing or more than one model matches.
    """
    models = sorted(
        {_model_key(f) for f in files if f.lower().endswith(_GGUF) and not is_mmproj(f)}
    )
    if not models:
        raise ModelLoadError(label, "the repository has no .gguf model file")
    if tag is None:
        if len(models) == 1:
            return models[0]
        matches = [m for m in models if _has_token(m, DEFAULT_TAG)]
        if len(matches) == 1:
            return matches[0]
        raise ModelLoadError(
            label,
            f"the repository holds {len(models)} models and none is the default {DEFAULT_TAG}; "
            f"name one with hf://owner/repo:TAG. Available: {_describe(models)}",
        )
    matches = [m for m in models if _has_token(m, tag.strip())]
    if len(matches) == 1:
        return matches[0]
    if not matches:
        raise ModelLoadError(
            label, f"no model file with quantization {tag!r}. Available: {_describe(models)}"
        )
    raise ModelLoadError(
        label,
        f"quantization {tag!r} matches {len(matches)} models; name the file instead "
        f"(hf://owner/repo/path/file.gguf). Matches: {_describe(matches)}",
    )


def choose_mmproj(files: Sequence[str], model_file: str, *, label: str) -> str:
    """The projector of ``files`` that goes with ``model_file``.

    The only ``mmproj*.gguf``; with several, the one whose precision tag is the model's, else
    the F16 one. Raises ``ModelLoadError`` listing the projectors when that leaves none or more
    than one.
    """
    projectors = sorted(f for f in files if is_mmproj(f))
    if not projectors:
        raise ModelLoadError(
            label,
            "mmproj='auto' found no mmproj*.gguf projector beside the model; pass its path, "
            "or mmproj=None for a text-only engine",
        )
    if len(projectors) == 1:
        return projectors[0]
    for wanted in (quant_tag(model_file), "F16"):
        if wanted is None:
            continue
        matches = [p for p in projectors if quant_tag(p) == wanted]
        if len(matches) == 1:
            return matches[0]
    raise ModelLoadError(
        label,
        "mmproj='auto' found several projectors and cannot tell which goes with the model; "
        f"pass one as mmproj. Found: {', '.join(projectors)}",
    )
