"""Every model already on this machine, for ``llamacpp-integrations list``.

Five places are searched, only read: the models folder (``LLAMACPP_INTEGRATIONS_MODELS``), the
Hugging Face cache, llama.cpp's cache (``LLAMA_CACHE``), Ollama's store and LM Studio's folder.
Each model is described from its GGUF header alone (never its weights): size, quantization,
context length and what it can do, with the spec that loads it.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import asdict, dataclass
from pathlib import Path

from ..errors import ModelLoadError
from .gguf import GGUFInfo, read_gguf_info
from .gguf_files import is_mmproj, split_name
from .hub import HF_PREFIX
from .resolve import KNOWN_MODELS, models_dir
from .stores.hub_layout import HubSnapshot, hf_cache_dir, hub_snapshots
from .stores.llama_cache import llama_cache_dir, llama_cache_flat_files
from .stores.lmstudio import lmstudio_models, lmstudio_models_dir
from .stores.ollama import ollama_models_dir, ollama_names, read_ollama_model

__all__ = ["FILE_TYPES", "CatalogEntry", "catalog_json", "catalog_table", "find_models", "places"]

# llama.h's llama_ftype (release b11434): the quantization a file was made with.
FILE_TYPES = {
    0: "F32", 1: "F16", 2: "Q4_0", 3: "Q4_1", 7: "Q8_0", 8: "Q5_0", 9: "Q5_1", 10: "Q2_K",
    11: "Q3_K_S", 12: "Q3_K_M", 13: "Q3_K_L", 14: "Q4_K_S", 15: "Q4_K_M", 16: "Q5_K_S",
    17: "Q5_K_M", 18: "Q6_K", 19: "IQ2_XXS", 20: "IQ2_XS", 21: "Q2_K_S", 22: "IQ3_XS",
    23: "IQ3_XXS", 24: "IQ1_S", 25: "IQ4_NL", 26: "IQ3_S", 27: "IQ3_M", 28: "IQ2_S",
    29: "IQ2_M", 30: "IQ4_XS", 31: "IQ1_M", 32: "BF16", 36: "TQ1_0", 37: "TQ2_0",
    38: "MXFP4_MOE", 39: "NVFP4", 40: "Q1_0", 41: "Q2_0",
}  # fmt: skip

# Encoder-only architectures: they embed text and cannot generate it.
_ENCODERS = frozenset(
    {"bert", "nomic-bert", "nomic-bert-moe", "jina-bert-v2", "jina-bert-v3", "modern-bert",
     "neo-bert", "t5encoder"}
)  # fmt: skip


@dataclass(frozen=True)
class CatalogEntry:
    """One model found on disk."""

    source: str
    """Where it was found: ``models``, ``huggingface``, ``llama.cpp``, ``ollama``, ``lmstudio``."""
    spec: str
    """What to pass as ``model`` to load it."""
    path: str
    size_bytes: int
    quantization: str | None
    context_length: int | None
    architecture: str | None
    capabilities: tuple[str, ...]
    """``chat`` (a chat template), ``tools`` (the template takes tools), ``reasoning``,
    ``vision`` (a projector goes with it), ``embeddings`` (pooling set) or ``embeddings-only``
    (an encoder)."""
    error: str | None = None
    """Why the header could not be read (the other fields then say less)."""


def _capabilities(info: GGUFInfo, has_projector: bool) -> tuple[str, ...]:
    template = info.chat_template or ""
    found = []
    if info.architecture in _ENCODERS:
        found.append("embeddings-only")
    elif info.pooling_type is not None:
        found.append("embeddings")
    if template:
        found.append("chat")
    if "tools" in template:
        found.append("tools")
    if any(mark in template for mark in ("<think>", "enable_thinking", "reasoning_content")):
        found.append("reasoning")
    if has_projector:
        found.append("vision")
    return tuple(found)


def _size(path: Path) -> int:
    """The bytes of the model, every part of a split one."""
    split = split_name(path.name)
    parts = [path] if split is None else [path.parent / p for p in split.parts]
    return sum(p.stat().st_size for p in parts if p.is_file())


def _entry(source: str, spec: str, path: Path, has_projector: bool) -> CatalogEntry:
    try:
        info = read_gguf_info(path)
    except ModelLoadError as exc:
        size = path.stat().st_size if path.is_file() else 0
        return CatalogEntry(source, spec, str(path), size, None, None, None, (), exc.reason)
    return CatalogEntry(
        source=source,
        spec=spec,
        path=str(path),
        size_bytes=_size(path),
        quantization=FILE_TYPES.get(info.file_type) if info.file_type is not None else None,
        context_length=info.context_length,
        architecture=info.architecture,
        capabilities=_capabilities(info, has_projector),
    )


def _is_model(name: str) -> bool:
    split = split_name(name.rsplit("/", 1)[-1])
    return (
        name.lower().endswith(".gguf")
        and not is_mmproj(name)
        and (split is None or split.index == 1)
    )


def _has_projector_beside(path: Path) -> bool:
    return any(is_mmproj(p.name) for p in path.parent.iterdir())


def _folder(source: str, folder: Path, short_names: bool) -> Iterator[CatalogEntry]:
    by_file = {m.filename: m.name for m in KNOWN_MODELS.values()} if short_names else {}
    if not folder.is_dir():
        return
    for path in sorted(folder.iterdir()):
        if path.is_file() and _is_model(path.name):
            spec = by_file.get(path.name, str(path))
            yield _entry(source, spec, path, _has_projector_beside(path))


def _snapshots(source: str, snapshots: list[HubSnapshot]) -> Iterator[CatalogEntry]:
    for snap in snapshots:
        projector = any(is_mmproj(f) for f in snap.files)
        revision = f"@{snap.revision}" if snap.revision else ""
        for name in snap.files:
            if _is_model(name):
                spec = f"{HF_PREFIX}{snap.repo_id}{revision}/{name}"
                yield _entry(source, spec, snap.path(name), projector)


def _ollama() -> Iterator[CatalogEntry]:
    root = ollama_models_dir()
    for name in ollama_names(root):
        try:
            model = read_ollama_model(str(name), root)
        except ModelLoadError as exc:
            yield CatalogEntry("ollama", str(name), exc.path, 0, None, None, None, (), exc.reason)
            continue
        yield _entry("ollama", str(name), model.model, model.projector is not None)


def _lmstudio() -> Iterator[CatalogEntry]:
    root = lmstudio_models_dir()
    for spec in lmstudio_models(root):
        path = root / spec.publisher / spec.repo / (spec.filename or "")
        yield _entry("lmstudio", str(spec), path, _has_projector_beside(path))


def places() -> dict[str, Path]:
    """The folder searched for each source, as the environment names it now."""
    return {
        "models": models_dir(),
        "huggingface": hf_cache_dir(),
        "llama.cpp": llama_cache_dir(),
        "ollama": ollama_models_dir(),
        "lmstudio": lmstudio_models_dir(),
    }


def find_models() -> list[CatalogEntry]:
    """Every model in the five places (see the module doc), each read from its header only.

    A folder is searched once even when two places are one (``LLAMA_CACHE`` set to the
    Hugging Face cache); a file whose header is bad is listed with the reason.
    """
    entries = [*_folder("models", models_dir(), short_names=True)]
    hf_root = hf_cache_dir()
    entries += _snapshots("huggingface", hub_snapshots(hf_root))
    llama_root = llama_cache_dir()
    if llama_root.expanduser().resolve() != hf_root.expanduser().resolve():
        entries += _snapshots("llama.cpp", hub_snapshots(llama_root))
    entries += [
        _entry("llama.cpp", str(p), p, _has_projector_beside(p))
        for p in llama_cache_flat_files(llama_root)
    ]
    entries += _ollama()
    entries += _lmstudio()
    return entries


def _size_text(size: int) -> str:
    return f"{size / 2**30:.1f} GiB" if size >= 2**30 else f"{size / 2**20:.0f} MiB"


def catalog_table(entries: list[CatalogEntry]) -> str:
    """The entries as a text table (the ``list`` command's output)."""
    if not entries:
        where = "\n".join(f"  {source}: {path}" for source, path in places().items())
        return f"no models found; searched:\n{where}"
    header = ("SOURCE", "SPEC", "SIZE", "QUANT", "CONTEXT", "CAPABILITIES")
    rows = [
        (
            e.source,
            e.spec,
            _size_text(e.size_bytes),
            e.quantization or "?",
            str(e.context_length or "?"),
            f"unreadable: {e.error}" if e.error else ", ".join(e.capabilities) or "-",
        )
        for e in entries
    ]
    widths = [max(len(r[i]) for r in [header, *rows]) for i in range(len(header) - 1)]
    lines = ["  ".join(c.ljust(w) for c, w in zip(r, widths, strict=False)) + "  " + r[-1]
             for r in [header, *rows]]  # fmt: skip
    return "\n".join(line.rstrip() for line in lines)


def catalog_json(entries: list[CatalogEntry]) -> str:
    """The entries as a JSON array (``list --json``)."""
    return json.dumps([asdict(e) for e in entries], indent=2)
