"""What the adapters report of their model beyond the window: whether requests may carry images
(``image_inputs``) or audio (``audio_inputs``), and where it runs (``placement_facts``): the
facts ``doctor`` prints in its machine section (backend, layers offloaded of all, the KV
cache's place and size, flash attention), read from the engine's ``ModelInfo.placement``, the
one the engine decided when it loaded. Nothing is loaded to answer: before the engine is there,
there is no placement to read.

LangChain's ``ModelProfile`` has no key for any of these (langchain-core warns on keys it does
not declare), so ``ChatLlamaCpp.placement`` carries them; LlamaIndex's ``metadata`` carries
them as its ``placement`` field. Both are this module's ``PlacementFacts``.

A remote engine's server does not report its offload, KV cache or attention kernel (llama-server's
``/props`` has no such fields): its facts say where it is and leave those ``None``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

from typing_extensions import TypedDict  # pydantic (LlamaIndex's metadata) needs this one on 3.11

from ..engine import InferenceEngine, ModelInfo
from ..engine.machine import KVLocation
from ..errors import LlamaCppIntegrationError
from ..models import MMPROJ_AUTO, read_gguf_info, resolve_mmproj_path

__all__ = ["PlacementFacts", "audio_inputs", "image_inputs", "placement_facts"]


class PlacementFacts(TypedDict):
    """Where one engine put its model (``None``: not known, e.g. a remote server's).

    The same values as ``doctor``'s machine section and ``engine.machine.Placement``:
    ``n_gpu_layers`` is the setting as decided (``-1``: all), ``layers_offloaded`` of
    ``n_layer`` the layers a GPU computes; ``kv_location`` is ``host`` (RAM), ``device`` (the GPU)
    or ``split``, ``kv_bytes`` the whole cache at its largest, for ``kv_cells`` cells;
    ``flash_attention`` what the engine passes llama.cpp (``None`` on a local engine: ``auto``,
    llama.cpp decides per device).
    """

    runs: Literal["local", "remote"]
    """``local``: llama.cpp in this process; ``remote``: a llama-server."""
    server: str | None
    """The server's URL (a remote engine), else ``None``."""
    backend: str | None
    """The backend computing the offloaded layers (``CUDA``, ``Metal``...), ``CPU`` if none."""
    n_layer: int | None
    n_gpu_layers: int | None
    layers_offloaded: int | None
    offload_reason: str | None
    kv_location: KVLocation | None
    kv_bytes: int | None
    kv_cells: int | None
    type_k: str | None
    type_v: str | None
    flash_attention: bool | None
    n_threads: int | None
    """The CPU threads a decode runs on (``EngineConfig.threads``)."""


def _is_remote(info: ModelInfo) -> bool:
    # A remote engine's info names the server's URL where a local one names the file.
    return info.path.startswith(("http://", "https://"))


def placement_facts(engine: InferenceEngine | None) -> PlacementFacts | None:
    """The facts of ``engine`` (``None``: no engine loaded yet, so no placement decided; or an
    engine that reports none and is not a server, such as a scripted one)."""
    if engine is None:
        return None
    info = engine.info
    placement = info.placement
    if placement is None:
        if not _is_remote(info):
            return None
        return PlacementFacts(
            runs="remote", server=info.path, backend=None, n_layer=None, n_gpu_layers=None,
            layers_offloaded=None, offload_reason=None, kv_location=None, kv_bytes=None,
            kv_cells=None, type_k=None, type_v=None, flash_attention=None, n_threads=None,
        )  # fmt: skip
    return PlacementFacts(
        runs="local",
        server=None,
        backend=placement.backend,
        n_layer=placement.n_layer,
        n_gpu_layers=placement.n_gpu_layers,
        layers_offloaded=placement.layers_offloaded,
        offload_reason=placement.offload_reason,
        kv_location=placement.kv_location,
        kv_bytes=placement.kv_bytes,
        kv_cells=placement.kv_cells,
        type_k=placement.type_k,
        type_v=placement.type_v,
        flash_attention=placement.flash_attention,
        n_threads=placement.n_threads,
    )


def image_inputs(
    engine: InferenceEngine | None, mmproj: Any, *, model: str | None, model_path: Path | None
) -> bool | None:
    """Whether requests may carry images, loading nothing: a loaded ``engine``'s answer, else
    what the projector setting says (``mmproj``: the engine settings' value, which holds an
    ``ollama://`` vision model's projector from its manifest). ``None``: not known before the
    first use (``mmproj='auto'`` and no projector on disk yet, or the model's file not read)."""
    if engine is not None:
        return engine.info.supports_images
    if not isinstance(mmproj, str) or not mmproj.strip():
        return False
    if mmproj.strip().lower() != MMPROJ_AUTO:
        return True
    if model_path is None:
        return None
    try:
        resolve_mmproj_path(mmproj, model=model, model_path=model_path, download=False)
    except LlamaCppIntegrationError:
        return None  # no projector on disk yet, or none at all: the first use tells
    return True


def audio_inputs(engine: InferenceEngine | None, mmproj: Any) -> bool | None:
    """Whether requests may carry audio, loading nothing: a loaded ``engine``'s answer, else
    what the projector file's header says (``clip.has_audio_encoder``). ``None``: not known
    before the first use (``mmproj='auto'``, or a projector not readable yet)."""
    if engine is not None:
        return engine.info.supports_audio
    if not isinstance(mmproj, str) or not mmproj.strip():
        return False
    if mmproj.strip().lower() == MMPROJ_AUTO:
        return None
    try:
        header = read_gguf_info(mmproj)
    except (LlamaCppIntegrationError, OSError):
        return None
    return header.metadata.get("clip.has_audio_encoder") is True
