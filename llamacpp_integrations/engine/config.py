"""Engine configuration: which weights to load, and how to serve them.

``EngineConfig`` is frozen and hashable. Two groups of its fields play different roles:

* the *weights* (``WeightsKey``: model file, GPU offload, mmap, repacking) identify what is
  loaded into memory. Every engine of a process over the same weights shares one loaded copy;
* everything else says how requests are *served* (sequences, context per sequence, batch size,
  threads, queue, embedding context, projector, chat template). The registry shares one engine
  per whole configuration, so adapters asking for the same settings batch together.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, replace
from typing import Literal

from ..errors import InvalidRequestError
from ..models import resolve_mmproj_path, resolve_model_path

Pooling = Literal["mean", "cls", "last", "model"]

__all__ = ["WEIGHTS_FIELDS", "EngineConfig", "Pooling", "WeightsKey"]

WEIGHTS_FIELDS = ("model", "n_gpu_layers", "use_mmap", "weight_repacking")
"""The ``EngineConfig`` fields that identify loaded weights; the others only shape serving."""


@dataclass(frozen=True)
class WeightsKey:
    """What identifies a loaded copy of a model's weights (``model`` is a resolved path)."""

    model: str
    n_gpu_layers: int | None
    use_mmap: bool
    weight_repacking: bool | None


@dataclass(frozen=True, kw_only=True)
class EngineConfig:
    """How to load a model and how to serve it.

    Engines whose configurations differ only in serving settings share one copy of the
    weights and one worker thread; each keeps its own contexts (see ``engine/host.py``).

    Attributes:
        model: A local ``.gguf`` path, a known short name (``smollm2-135m``, ``gemma3-270m``),
            an ``hf://`` spec (needs the ``hub`` extra): ``hf://owner/repo[@revision]/file.gguf``,
            ``hf://owner/repo[@revision]:Q4_K_M`` (the file by quantization tag) or
            ``hf://owner/repo`` (its only model, else its Q4_K_M); or ``None`` for the
            ``LLAMACPP_MODEL`` environment variable. Split GGUFs are fetched whole. Hub files
            land in the Hugging Face cache; with ``HF_HUB_OFFLINE=1`` only the cache is read.
        mmproj: The model's multimodal projector (a ``mmproj`` GGUF, as a path or ``hf://``
            spec), which lets requests carry images; ``"auto"`` takes the ``mmproj*.gguf`` of the
            model's Hub repository or of its local directory (with several, the one of the
            model's precision, else F16); ``None`` for a text-only engine. Loaded once beside
            the weights, whichever engines use it.
        n_seq_max: How many sequences are decoded together; more requests wait in the queue.
        n_ctx_per_seq: Context (prompt + generated tokens) of one sequence. ``None`` (the
            default) takes the model's training context, reduced only as far as needed for
            ``n_seq_max`` sequences' KV cache to fit ``kv_memory_budget``; ``0`` takes the
            training context whatever it costs; a number is used as given.
        n_batch: Most tokens put into one ``llama_decode`` step (running sequences + prompt chunks).
        n_threads: CPU threads for decoding; ``None`` uses every core.
        n_gpu_layers: Layers offloaded to a GPU build of llama.cpp (``-1`` for all, ``0`` for
            none). ``None`` (the default): every layer when llama.cpp was built with a GPU
            backend and the weights fit in the GPU's free memory, as many as fit when they do
            not, none on a CPU build.
        kv_memory_budget: Bytes this engine's KV cache may take when ``n_ctx_per_seq`` is
            chosen for you. ``None``: half of the memory left after the weights, on the GPU
            when layers are offloaded, else in RAM.
        flash_attention: Flash attention on or off. ``None`` leaves it off on the CPU (there it
            slowed a single stream as its context grew, measured on 2 cores) and to llama.cpp's
            choice when layers are offloaded to a GPU.
        kv_unified: One KV buffer for all sequences instead of one per sequence. Unified shares
            a cached prefix between sequences without copying, but every decoded token then
            attends over every cached cell, idle slots' included, which slowed single streams
            by a third here; split copies a shared prefix's stream instead.
        use_mmap: Map the weights instead of reading them into memory.
        weight_repacking: Let ggml repack weights into CPU-specific layouts (its "extra buffer
            types", AMX included). ``None`` turns it off on CPUs that advertise AMX, where ggml's
            AMX kernels crash on some virtual machines, and on everywhere else.
        max_queued: Requests allowed to wait for a free sequence before ``submit`` reports overload.
        chat_template: A Jinja chat template that replaces the one stored in the GGUF.
        embedding_pooling: How token vectors become one text vector (``model`` keeps the GGUF's
            own pooling, falling back to ``mean`` when the model declares none).
        embedding_n_ctx: Token budget of one embedding batch; also the longest text embedded.
        embedding_n_seq_max: Most texts embedded in one decode.
    """

    model: str | None = None
    mmproj: str | None = None
    n_seq_max: int = 8
    n_ctx_per_seq: int | None = None
    n_batch: int = 512
    n_threads: int | None = None
    n_gpu_layers: int | None = None
    kv_memory_budget: int | None = None
    flash_attention: bool | None = None
    kv_unified: bool = False
    use_mmap: bool = True
    weight_repacking: bool | None = None
    max_queued: int = 256
    chat_template: str | None = None
    embedding_pooling: Pooling = "model"
    embedding_n_ctx: int = 2048
    embedding_n_seq_max: int = 16

    def __post_init__(self) -> None:
        checks = {
            "n_seq_max": self.n_seq_max >= 1,
            "n_ctx_per_seq": self.n_ctx_per_seq is None or self.n_ctx_per_seq >= 0,
            "n_gpu_layers": self.n_gpu_layers is None or self.n_gpu_layers >= -1,
            "kv_memory_budget": self.kv_memory_budget is None or self.kv_memory_budget >= 0,
            "n_batch": self.n_batch >= 8,
            "max_queued": self.max_queued >= 1,  # 0 would leave no room for any request
            "embedding_n_ctx": self.embedding_n_ctx >= 8,
            "embedding_n_seq_max": self.embedding_n_seq_max >= 1,
            "n_threads": self.n_threads is None or self.n_threads >= 1,
        }
        bad = [name for name, ok in checks.items() if not ok]
        if bad:
            raise InvalidRequestError(f"invalid EngineConfig values: {', '.join(bad)}")

    def flash_attention_for(self, n_gpu_layers: int) -> bool | None:
        """``flash_attention`` resolved for weights with ``n_gpu_layers`` offloaded: a bool, or
        ``None`` for llama.cpp's own choice."""
        if self.flash_attention is None and n_gpu_layers == 0:
            return False
        return self.flash_attention

    @property
    def weights(self) -> WeightsKey:
        """The weights this configuration loads (call on a ``resolved()`` configuration)."""
        assert self.model is not None, "resolve the configuration first"
        return WeightsKey(self.model, self.n_gpu_layers, self.use_mmap, self.weight_repacking)

    @property
    def threads(self) -> int:
        """``n_threads`` resolved: every core when it is ``None``."""
        return self.n_threads or os.cpu_count() or 1

    def resolved(self) -> EngineConfig:
        """The same settings with ``model`` and ``mmproj`` as absolute local paths.

        Downloads ``hf://`` files not cached yet; raises ``InvalidRequestError`` or
        ``ModelLoadError`` for what cannot be found.
        """
        path = resolve_model_path(self.model)
        mmproj = (
            None
            if self.mmproj is None
            else str(resolve_mmproj_path(self.mmproj, model=self.model, model_path=path))
        )
        return replace(self, model=str(path), mmproj=mmproj)
