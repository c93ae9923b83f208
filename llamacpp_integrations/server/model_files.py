"""Which GGUF files a server of several models serves, and under which names.

``serve a.gguf b.gguf`` names the files; ``serve ./models`` names a folder, whose ``*.gguf``
files are taken (not its subfolders) except what is not a model of its own: image projectors
(``mmproj*.gguf``) and the parts after the first of a split GGUF (llama.cpp is given the first
part and finds the others beside it). Each model is served under its display name
(``client.model_display_name``: the file name without ``.gguf``), so two files of one name
cannot both be served: that is an error at start, not a model hiding another.

Everything here is checked before the server starts and loads nothing: a file that is not a
GGUF is found out when it is first loaded (see ``on_demand``).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from ..client import model_display_name
from ..errors import ModelLoadError
from ..models import resolve_model_path
from ..models.gguf_files import is_mmproj, split_name

__all__ = ["folder_models", "served_model_files"]


def folder_models(folder: Path) -> list[Path]:
    """The models in ``folder``, by file name: its ``*.gguf`` files but projectors and the
    later parts of split models."""
    found = []
    # The folder resolved but not the file names, as ``resolve_model_path`` does: a link's
    # name is the model's.
    for path in sorted(folder.resolve().iterdir()):
        if path.suffix.lower() != ".gguf" or not path.is_file() or is_mmproj(path.name):
            continue
        split = split_name(path.name)
        if split is not None and split.index != 1:
            continue
        found.append(path)
    return found


def _model_file(spec: str) -> Path:
    """The file one model argument names (a path, a known short name or an ``hf://`` spec),
    refused if it is a projector or a later part of a split model."""
    path = resolve_model_path(spec)
    if is_mmproj(path.name):
        raise ModelLoadError(str(path), "is an image projector, not a model (see --mmproj)")
    split = split_name(path.name)
    if split is not None and split.index != 1:
        raise ModelLoadError(
            str(path), f"is part {split.index} of a split model: name its first part"
        )
    return path


def served_model_files(specs: Sequence[str]) -> dict[str, str]:
    """The models ``specs`` name, as ``{name: path}`` in the order given: each spec a model
    (path, known short name or ``hf://`` spec) or a folder of GGUFs.

    Raises:
        ModelLoadError: A file that is not there, a folder without models, a projector or a
            later split part named as a model, or two models with one name.
    """
    served: dict[str, str] = {}
    for spec in specs:
        folder = Path(spec).expanduser()
        if folder.is_dir():
            paths = folder_models(folder)
            if not paths:
                raise ModelLoadError(spec, "the folder holds no .gguf model")
        else:
            paths = [_model_file(spec)]
        for path in paths:
            name, where = model_display_name(path), str(path)
            other = served.get(name)
            if other is not None and other != where:
                raise ModelLoadError(
                    where,
                    f"another model is served as {name!r} ({other}); the name is the file "
                    "name, so give one of them another (a symbolic link will do)",
                )
            served[name] = where  # the same file named twice is served once
    return served
