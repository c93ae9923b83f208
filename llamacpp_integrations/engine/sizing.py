"""How big a context and how many GPU layers a model gets by default, from its GGUF header.

Pure arithmetic, no llama.cpp: the engine feeds it the header, the memory it measured and the
backend's answer to "can layers be offloaded", and logs what came out.

* **Context.** A sequence gets the model's training context, reduced only as far as needed for
  ``n_seq_max`` sequences' KV cache to fit a memory budget. The KV cache takes, per cell (one
  token of one sequence), ``n_layer * n_head_kv * (head_dim_k * bytes(type_k) + head_dim_v *
  bytes(type_v))``. For sliding-window and latent-attention models this is an upper bound:
  llama.cpp allocates less for their windowed or compressed layers.
* **Offload.** On a build with a GPU backend, every layer, unless the weights and a reserve do
  not fit in the device's free memory; then as many layers as fit. CPU builds: none.

An explicit setting always wins over both.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass

from ..errors import InvalidRequestError
from ..models import GGUFInfo
from ..models.gguf import GGML_TYPE_SIZES
from .config import EngineConfig

__all__ = [
    "KV_MEMORY_SHARE",
    "ContextChoice",
    "KVShape",
    "OffloadChoice",
    "cache_type_bytes",
    "choose_context",
    "choose_offload",
    "context_for",
    "estimated_context",
    "host_available_memory",
    "kv_budget",
    "stream_start_cells",
]

KV_MEMORY_SHARE = 0.5
"""Share of the memory left after the weights that one engine's KV cache may take by default:
the rest stays for compute buffers, other engines and the rest of the program."""

CONTEXT_STEP = 256
"""Chosen contexts are multiples of this (llama.cpp pads the KV cache to 256 cells anyway)."""

MIN_START_CELLS = 512
"""The fewest cells a sequence's KV stream starts with by default (it grows when needed)."""

MIN_CONTEXT = 512
"""The smallest context chosen by default, even when the budget is smaller: a model that
cannot hold a short conversation is of no use, and the log says the budget was exceeded."""

UNKNOWN_TRAINING_CONTEXT = 4096
"""The context assumed for a header that does not say what the model was trained on."""

GPU_RESERVE_SHARE = 0.10
GPU_RESERVE_MIN = 512 * 1024**2
"""Device memory kept free when deciding offload: compute buffers and a first KV cache."""

_CACHE_TYPES = {
    name.lower(): (block, size)
    for name, block, size in GGML_TYPE_SIZES.values()
    if name in {"F32", "F16", "BF16", "Q8_0", "Q4_0", "Q4_1", "Q5_0", "Q5_1", "IQ4_NL"}
}


def cache_type_bytes(type_name: str) -> float:
    """Bytes one element of the KV cache takes as ``type_name`` (``f16``, ``q8_0``...)."""
    block_size = _CACHE_TYPES.get(type_name.lower())
    if block_size is None:
        raise InvalidRequestError(
            f"unknown KV cache type {type_name!r}; one of: {', '.join(sorted(_CACHE_TYPES))}"
        )
    block, size = block_size
    return size / block


@dataclass(frozen=True)
class KVShape:
    """What the KV cache of a model looks like, per layer (read from its GGUF header)."""

    n_ctx_train: int | None
    head_counts_kv: tuple[int, ...]
    """KV heads of each layer (0 for a layer without attention)."""
    head_dim_k: int
    head_dim_v: int

    @property
    def n_layer(self) -> int:
        return len(self.head_counts_kv)

    @classmethod
    def from_gguf(cls, info: GGUFInfo) -> KVShape | None:
        """The shape the header describes, or ``None`` where it lacks the attention keys."""
        meta, arch = info.metadata, info.architecture
        n_layer = info.block_count
        n_embd = info.embedding_length
        heads = _per_layer(meta.get(f"{arch}.attention.head_count"), n_layer)
        if n_layer is None or n_layer <= 0 or heads is None or not any(heads):
            return None
        heads_kv = _per_layer(meta.get(f"{arch}.attention.head_count_kv"), n_layer) or heads
        widest = max(heads)
        default_dim = n_embd // widest if n_embd else None
        dim_k = _positive(meta.get(f"{arch}.attention.key_length")) or default_dim
        dim_v = _positive(meta.get(f"{arch}.attention.value_length")) or default_dim
        if dim_k is None or dim_v is None:
            return None
        return cls(info.context_length, heads_kv, dim_k, dim_v)

    def kv_bytes_per_cell(self, type_k: str = "f16", type_v: str = "f16") -> int:
        """Bytes of K and V over every layer for one token of one sequence."""
        heads = sum(self.head_counts_kv)
        per_cell = heads * (
            self.head_dim_k * cache_type_bytes(type_k) + self.head_dim_v * cache_type_bytes(type_v)
        )
        return math.ceil(per_cell)


def _positive(value: object) -> int | None:
    if isinstance(value, int) and not isinstance(value, bool) and value > 0:
        return value
    return None


def _per_layer(value: object, n_layer: int | None) -> tuple[int, ...] | None:
    """A per-layer count from a scalar or a per-layer array. Arrays too long for the header
    reader to keep come back as a summary string: unknown, so ``None``."""
    if n_layer is None or n_layer <= 0:
        return None
    if isinstance(value, int) and not isinstance(value, bool) and value >= 0:
        return (value,) * n_layer
    counts = value if isinstance(value, list) and len(value) == n_layer else []
    if counts and all(isinstance(v, int) and not isinstance(v, bool) and v >= 0 for v in counts):
        return tuple(counts)
    return None


def host_available_memory() -> int | None:
    """Bytes the kernel says can be allocated without swapping (``MemAvailable``), or the free
    physical memory where ``/proc/meminfo`` is missing; ``None`` when neither is known."""
    try:
        with open("/proc/meminfo", encoding="ascii") as meminfo:
            for line in meminfo:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    try:
        return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, AttributeError):
        return None


def kv_budget(
    available: int | None, weights_there: int, share: float = KV_MEMORY_SHARE
) -> int | None:
    """The default KV budget: ``share`` of what is left of ``available`` bytes once the weights
    placed in that memory are counted (``None`` when the memory is unknown)."""
    if available is None:
        return None
    return max(0, int((available - weights_there) * share))


@dataclass(frozen=True)
class ContextChoice:
    """The KV cache layout and the context of one sequence, and why.

    Unified, ``n_cells`` cells are shared by ``n_seq_max`` sequences, each using at most
    ``n_ctx_per_seq``; split, every sequence has a stream of its own that starts with
    ``start_cells`` cells and grows up to ``n_ctx_per_seq`` (``n_cells`` in all at most).
    """

    n_ctx_per_seq: int
    n_seq_max: int
    kv_bytes_per_cell: int | None
    budget_bytes: int | None
    reason: str
    unified: bool
    n_cells: int
    start_cells: int = 0
    """Cells of each stream at first (split only; ``0``: ``n_ctx_per_seq`` from the start)."""

    @property
    def first_stream_cells(self) -> int:
        """Cells of each sequence's stream when the context is first made (split layout)."""
        return self.start_cells or self.n_ctx_per_seq

    @property
    def kv_bytes(self) -> int | None:
        """The KV cache of all sequences, at its largest."""
        if self.kv_bytes_per_cell is None:
            return None
        return self.kv_bytes_per_cell * self.n_cells

    def describe(self) -> str:
        kv = "unknown" if self.kv_bytes is None else _mib(self.kv_bytes)
        if self.unified:
            return (
                f"one KV cache of {self.n_cells} cells ({kv}) shared by {self.n_seq_max} "
                f"sequences, up to {self.n_ctx_per_seq} tokens each ({self.reason})"
            )
        start = self.first_stream_cells
        if start >= self.n_ctx_per_seq:
            return (
                f"context {self.n_ctx_per_seq} tokens x {self.n_seq_max} sequences, KV cache "
                f"{kv} ({self.reason})"
            )
        first = (
            "unknown"
            if self.kv_bytes_per_cell is None
            else _mib(self.kv_bytes_per_cell * start * self.n_seq_max)
        )
        return (
            f"context {self.n_ctx_per_seq} tokens x {self.n_seq_max} sequences ({self.reason}); "
            f"KV streams start at {start} cells each ({first}) and grow as needed, up to {kv}"
        )


def _mib(n_bytes: int) -> str:
    return f"{n_bytes / 1024**2:.0f} MiB"


def stream_start_cells(
    n_ctx_per_seq: int, n_seq_max: int, train: int | None, asked: int | None
) -> int:
    """Cells each stream of a split cache starts with: ``asked`` (``0``: the whole context),
    else the training context spread over the sequences, at least ``MIN_START_CELLS``;
    ``CONTEXT_STEP`` multiples, never above ``n_ctx_per_seq``."""
    if asked == 0:
        return n_ctx_per_seq
    if asked is None:
        share = (train or UNKNOWN_TRAINING_CONTEXT) // max(1, n_seq_max)
        asked = max(MIN_START_CELLS, share)
    stepped = -(-asked // CONTEXT_STEP) * CONTEXT_STEP
    return min(n_ctx_per_seq, stepped)


def choose_context(
    shape: KVShape | None,
    *,
    requested: int | None,
    n_seq_max: int,
    budget_bytes: int | None,
    type_k: str = "f16",
    type_v: str = "f16",
    n_ctx_train: int | None = None,
    unified: bool = False,
    cells: int | None = None,
    stream_start: int | None = None,
) -> ContextChoice:
    """The context per sequence: ``requested`` when given (``0``: the training context), else
    the training context (``n_ctx_train``, else the shape's) reduced to fit ``budget_bytes``.

    Split, the budget holds ``n_seq_max`` streams of that context, each starting at
    ``stream_start`` cells (see ``stream_start_cells``). Unified, it holds one cache of ``cells``
    cells when given, else of ``n_seq_max`` times a requested context, else of the training
    context (fitted to the budget), and a sequence may fill all of it.
    """
    train = n_ctx_train or (shape.n_ctx_train if shape is not None else None)
    per_cell = None if shape is None else shape.kv_bytes_per_cell(type_k, type_v)
    if requested is not None and requested < 0:
        raise InvalidRequestError(f"n_ctx_per_seq must be >= 0 or None, got {requested}")
    if unified:
        return _unified_choice(
            train,
            per_cell,
            requested=requested,
            n_seq_max=n_seq_max,
            budget=budget_bytes,
            cells=cells,
        )
    n_ctx, reason = _fitted(train, per_cell, requested, budget_bytes, n_seq_max)
    start = stream_start_cells(n_ctx, n_seq_max, train, stream_start)
    return ContextChoice(
        n_ctx, n_seq_max, per_cell, budget_bytes, reason, False, n_ctx * n_seq_max, start
    )


def _unified_choice(
    train: int | None,
    per_cell: int | None,
    *,
    requested: int | None,
    n_seq_max: int,
    budget: int | None,
    cells: int | None,
) -> ContextChoice:
    if cells is not None:
        n_cells, reason = cells, "kv_cells set explicitly"
        n_ctx = min(requested or train or UNKNOWN_TRAINING_CONTEXT, cells)
    elif requested:
        n_ctx, n_cells = requested, requested * n_seq_max
        reason = "set explicitly"
    else:
        n_cells, reason = _fitted(train, per_cell, requested, budget, 1)
        n_ctx = n_cells
    return ContextChoice(n_ctx, n_seq_max, per_cell, budget, reason, True, n_cells)


def _fitted(
    train: int | None,
    per_cell: int | None,
    requested: int | None,
    budget_bytes: int | None,
    n_streams: int,
) -> tuple[int, str]:
    """Cells of one of ``n_streams`` streams: ``requested``, or the training context fitted
    to ``budget_bytes``; and why."""
    if requested:
        return requested, "set explicitly"
    if train is None:
        return UNKNOWN_TRAINING_CONTEXT, "the header gives no training context"
    if requested == 0:
        return train, "the training context, asked for with 0"
    if per_cell is None or budget_bytes is None:
        return train, "the training context; the memory budget is unknown"
    fits = budget_bytes // (per_cell * n_streams)
    if fits >= train:
        return train, "the training context, within the memory budget"
    stepped = fits // CONTEXT_STEP * CONTEXT_STEP
    if stepped >= MIN_CONTEXT:
        return stepped, f"reduced from the training context {train} to fit the budget"
    floor = min(MIN_CONTEXT, train)
    return floor, f"the budget fits only {fits} tokens; using the smallest default"


def context_for(
    config: EngineConfig, info: GGUFInfo, *, free_memory: int | None, weights_there: int
) -> ContextChoice:
    """``config``'s KV layout and context per sequence for the model ``info`` describes, where
    the KV cache goes into memory with ``free_memory`` bytes free, ``weights_there`` of them
    still to be taken by the weights."""
    budget = config.kv_memory_budget
    if budget is None:
        budget = kv_budget(free_memory, weights_there)
    return choose_context(
        KVShape.from_gguf(info),
        requested=config.n_ctx_per_seq,
        n_seq_max=config.n_seq_max,
        budget_bytes=budget,
        type_k=config.type_k,
        type_v=config.type_v,
        n_ctx_train=info.context_length,
        unified=config.kv_unified,
        cells=config.kv_cells,
        stream_start=config.kv_start_cells,
    )


def estimated_context(config: EngineConfig, info: GGUFInfo) -> ContextChoice:
    """``context_for`` before anything is loaded, as if the KV cache went to RAM (an engine
    that offloads to a GPU decides again from the GPU's memory when it loads)."""
    return context_for(
        config, info, free_memory=host_available_memory(), weights_there=info.size_bytes
    )


@dataclass(frozen=True)
class OffloadChoice:
    """How many layers go to the GPU, and why (``-1``: all of them)."""

    n_gpu_layers: int
    reason: str


def choose_offload(
    *,
    requested: int | None,
    gpu_offload: bool,
    device_free: int | None,
    weights_bytes: int,
    n_layer: int | None,
) -> OffloadChoice:
    """Layers to offload: ``requested`` when given; else all on a GPU build when the weights
    and a reserve fit in ``device_free``, as many as fit when they do not, none on a CPU
    build."""
    if requested is not None:
        return OffloadChoice(requested, "set explicitly")
    if not gpu_offload:
        return OffloadChoice(0, "llama.cpp was built without a GPU backend")
    if device_free is None or not n_layer:
        return OffloadChoice(-1, "GPU build; its free memory is unknown, so every layer")
    usable = device_free - max(GPU_RESERVE_MIN, int(device_free * GPU_RESERVE_SHARE))
    if weights_bytes <= usable:
        return OffloadChoice(-1, "every layer fits in the GPU's free memory")
    per_layer = weights_bytes / n_layer
    layers = max(0, int(usable // per_layer))
    return OffloadChoice(layers, f"{layers} of {n_layer} layers fit in the GPU's free memory")
