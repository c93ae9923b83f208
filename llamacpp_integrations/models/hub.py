"""Fetch GGUF files from the Hugging Face Hub into its cache (the optional ``hub`` extra).

Specs:

* ``hf://owner/repo[@revision]/path/file.gguf``: that file;
* ``hf://owner/repo[@revision]:TAG``: the model quantized as ``TAG`` (``Q4_K_M``...);
* ``hf://owner/repo[@revision]``: the repository's only model, else its ``Q4_K_M``.

The choice rules are in ``gguf_files``. A split model is fetched whole and named by its first
part, which llama.cpp loads with the others beside it. Downloads go through
``huggingface_hub`` (its cache, token, ``HF_ENDPOINT`` and ``HF_HUB_OFFLINE``); offline, or with
``download=False``, only the cache is read. Every failure is raised as ``ModelLoadError``, but
a missing ``huggingface_hub``: ``MissingDependencyError``, naming the extra.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..errors import ModelLoadError
from ..optional import require
from .gguf_files import choose_mmproj, choose_model_file, is_mmproj, split_name

__all__ = [
    "HF_PREFIX",
    "HubSpec",
    "ProgressCallback",
    "hub_offline",
    "parse_hub_spec",
    "resolve_hub_mmproj",
    "resolve_hub_model",
    "resolve_hub_spec",
]

HF_PREFIX = "hf://"
_OFFLINE_ENV = "HF_HUB_OFFLINE"

ProgressCallback = Callable[[str, int, int | None], None]
"""Called as a download goes: ``(filename in the repo, bytes done, bytes in all or None)``."""


@dataclass(frozen=True)
class HubSpec:
    """A parsed ``hf://`` spec: a file by path, or by quantization tag (``None``: default)."""

    repo_id: str
    revision: str | None = None
    filename: str | None = None
    tag: str | None = None

    def __str__(self) -> str:
        text = HF_PREFIX + self.repo_id + (f"@{self.revision}" if self.revision else "")
        if self.filename is not None:
            return f"{text}/{self.filename}"
        return text + (f":{self.tag}" if self.tag else "")


def parse_hub_spec(spec: str) -> HubSpec:
    """Parse ``hf://owner/repo[@revision][/path/file.gguf | :TAG]``."""
    body = spec.strip()[len(HF_PREFIX) :] if spec.strip().startswith(HF_PREFIX) else ""
    owner, _, rest = body.partition("/")
    repo, _, filename = rest.partition("/")
    tag: str | None = None
    if not filename and ":" in repo:
        repo, tag = repo.rsplit(":", 1)
    revision: str | None = None
    if "@" in repo:
        repo, revision = repo.split("@", 1)
    valid = (
        bool(owner and repo) and ":" not in repo and revision != "" and tag != ""
    ) and filename.strip("/") == filename
    if not valid or (filename == "" and "/" in rest):
        raise ModelLoadError(
            spec,
            "malformed hf:// spec; expected hf://owner/repo[@revision]/path/file.gguf, "
            "hf://owner/repo[@revision]:QUANT (e.g. :Q4_K_M) or hf://owner/repo",
        )
    return HubSpec(f"{owner}/{repo}", revision, filename or None, tag)


def hub_offline() -> bool:
    """Whether ``HF_HUB_OFFLINE`` is on, read now (``huggingface_hub`` reads it at import)."""
    if os.environ.get(_OFFLINE_ENV, "").strip().lower() in {"1", "true", "yes", "on"}:
        return True
    try:
        from huggingface_hub import constants
    except ImportError:
        return False
    return bool(constants.is_offline_mode())


def _hub() -> Any:
    # Imported here so the hub stays an optional dependency.
    return require("huggingface_hub", "hub")


def _progress_class(callback: ProgressCallback, filename: str) -> type[Any]:
    """A silent tqdm class that reports each update to ``callback``.

    ``hf_hub_download`` only takes a progress *class*, so one is made per file to carry the
    callback. ``update_transfer`` makes huggingface_hub's Xet downloads use a single bar.
    """
    tqdm: type[Any] = require("tqdm", "hub").tqdm

    class CallbackBar(tqdm):  # type: ignore[misc]
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            kwargs["disable"] = True
            kwargs.pop("name", None)
            super().__init__(*args, **kwargs)
            callback(filename, int(self.n), self.total)

        def update(self, n: float | None = 1) -> bool | None:
            self.n += n or 0
            callback(filename, int(self.n), self.total)
            return True

        def update_transfer(self, n: int) -> None:
            """Network bytes (Xet); the written bytes reach ``update`` already."""

    return CallbackBar


def _not_cached(label: str, what: str, offline: bool) -> ModelLoadError:
    why = f"{_OFFLINE_ENV} is set" if offline else "download=False"
    return ModelLoadError(
        label,
        f"{what} is not in the Hugging Face cache and downloads are off ({why}); fetch it once "
        "with downloads on (unset HF_HUB_OFFLINE / pass download=True), or with "
        "`hf download owner/repo file.gguf`",
    )


def resolve_hub_model(
    repo_id: str,
    filename: str,
    revision: str | None = None,
    *,
    local_files_only: bool = False,
    progress: ProgressCallback | None = None,
) -> Path:
    """Download (or find in the Hugging Face cache) one file of a Hub repo; return its path.

    ``progress`` replaces huggingface_hub's own bar. Every failure is ``ModelLoadError``.
    """
    hub = _hub()
    from huggingface_hub.errors import LocalEntryNotFoundError, RemoteEntryNotFoundError

    label = str(HubSpec(repo_id, revision, filename))
    offline = local_files_only or hub_offline()
    tqdm_class = None if progress is None else _progress_class(progress, filename)
    try:
        local = hub.hf_hub_download(
            repo_id=repo_id,
            filename=filename,
            revision=revision,
            local_files_only=offline,
            tqdm_class=tqdm_class,
        )
    except LocalEntryNotFoundError as exc:
        raise _not_cached(label, "the file", hub_offline()) from exc
    except RemoteEntryNotFoundError as exc:
        raise ModelLoadError(label, "the repository has no such file") from exc
    except Exception as exc:  # the hub raises many unrelated types; callers want one
        raise ModelLoadError(
            label, f"Hugging Face download failed: {type(exc).__name__}: {exc}"
        ) from exc
    return Path(local)


def _cached_files(spec: HubSpec) -> list[str]:
    """The files of the spec's revision found in the Hugging Face cache (paths in the repo)."""
    _hub()
    from huggingface_hub import constants
    from huggingface_hub.file_download import repo_folder_name

    cache = Path(constants.HF_HUB_CACHE) / repo_folder_name(repo_id=spec.repo_id, repo_type="model")
    revision = spec.revision or "main"
    ref = cache / "refs" / revision
    commit = ref.read_text().strip() if ref.is_file() else revision
    snapshot = cache / "snapshots" / commit
    if not snapshot.is_dir():
        return []
    return sorted(p.relative_to(snapshot).as_posix() for p in snapshot.rglob("*") if p.is_file())


def _repo_files(spec: HubSpec, offline: bool) -> list[str]:
    """The repository's files: listed by the Hub, or from the cache when offline."""
    label = str(spec)
    if offline:
        files = _cached_files(spec)
        if not files:
            raise _not_cached(label, "the repository", hub_offline())
        return files
    hub = _hub()
    try:
        return list(hub.HfApi().list_repo_files(spec.repo_id, revision=spec.revision))
    except Exception as exc:  # the hub raises many unrelated types; callers want one
        raise ModelLoadError(
            label, f"cannot list the repository: {type(exc).__name__}: {exc}"
        ) from exc


def _fetch_whole(
    spec: HubSpec, filename: str, *, offline: bool, progress: ProgressCallback | None
) -> Path:
    """Fetch ``filename``, all parts of it when it is split; return the (first) part's path."""
    split = split_name(filename)
    names = [filename] if split is None else split.parts
    paths = [
        resolve_hub_model(
            spec.repo_id, name, spec.revision, local_files_only=offline, progress=progress
        )
        for name in names
    ]
    # llama.cpp finds the other parts beside the first; a revision that moved between two
    # downloads would scatter them over two snapshots.
    if len({p.parent for p in paths}) > 1:
        raise ModelLoadError(
            str(spec), "the parts of the split model came from different revisions; retry"
        )
    return paths[0]


def resolve_hub_spec(
    spec: str | HubSpec, *, download: bool = True, progress: ProgressCallback | None = None
) -> Path:
    """The local path of the model an ``hf://`` spec names, fetched if needed (see module doc)."""
    parsed = spec if isinstance(spec, HubSpec) else parse_hub_spec(spec)
    offline = not download or hub_offline()
    filename = parsed.filename
    if filename is None:
        filename = choose_model_file(_repo_files(parsed, offline), parsed.tag, label=str(parsed))
    return _fetch_whole(parsed, filename, offline=offline, progress=progress)


def resolve_hub_mmproj(
    spec: str | HubSpec,
    model_path: Path,
    *,
    download: bool = True,
    progress: ProgressCallback | None = None,
) -> Path:
    """The projector for the model of ``spec`` (already at ``model_path``): the repo's
    ``mmproj*.gguf`` chosen by ``gguf_files.choose_mmproj``, fetched beside it."""
    parsed = spec if isinstance(spec, HubSpec) else parse_hub_spec(spec)
    offline = not download or hub_offline()
    files = _repo_files(parsed, offline)
    if offline and not any(is_mmproj(f) for f in files):
        raise _not_cached(str(parsed), "a projector (mmproj*.gguf)", hub_offline())
    name = choose_mmproj(files, model_path.name, label=str(parsed))
    return resolve_hub_model(
        parsed.repo_id, name, parsed.revision, local_files_only=offline, progress=progress
    )
