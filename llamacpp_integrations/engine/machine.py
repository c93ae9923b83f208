"""What the machine is and where one engine put its model: devices, offload, KV cache, flash
attention, and the settings that would suit the machine better.

Pure: the devices come in as ``DeviceInfo`` values (``engine/native/devices.py`` reads them from
ggml's backend registry), so every rule here runs on made-up machines in the unit tests.

* ``Placement`` is decided once, when an engine loads (``placement_of``), and travels in the
  engine's ``ModelInfo``: ``doctor`` prints it and the adapters read it from there, so all of
  them tell the same facts.
* ``advice.recommend`` turns devices, settings and placement into ``Recommendation`` s, each
  with its reason.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from .config import EngineConfig
from .sizing import ContextChoice, OffloadChoice

__all__ = [
    "DeviceInfo",
    "DeviceKind",
    "KVLocation",
    "MachineReport",
    "Placement",
    "Recommendation",
    "gib",
    "placement_of",
]

DeviceKind = Literal["cpu", "gpu", "igpu", "accel"]
"""ggml's device types: the CPU, a discrete GPU, an integrated GPU sharing the host's memory
(Apple chips report theirs as a GPU on unified memory), an accelerator such as BLAS."""

KVLocation = Literal["host", "device", "split"]

_OFFLOAD_KINDS = frozenset({"gpu", "igpu"})
_UNIFIED_BACKENDS = frozenset({"metal"})
"""Backends whose GPU memory is the machine's RAM (Apple silicon)."""


def gib(n_bytes: int | None) -> str:
    """Bytes as GiB (MiB under one GiB) for a report line; ``unknown`` for ``None``."""
    if n_bytes is None:
        return "unknown"
    if n_bytes < 1024**3:
        return f"{n_bytes / 1024**2:.0f} MiB"
    return f"{n_bytes / 1024**3:.1f} GiB"


@dataclass(frozen=True)
class DeviceInfo:
    """One device llama.cpp can compute on, as its backend registry reports it."""

    name: str
    """The backend's name for it (``CPU``, ``CUDA0``, ``Metal``, ``Vulkan0``...)."""
    description: str
    """What it is (the CPU's or the card's model name)."""
    kind: DeviceKind
    backend: str
    """The backend it belongs to (``CPU``, ``CUDA``, ``Metal``, ``Vulkan``, ``ROCm``...)."""
    free_bytes: int | None
    total_bytes: int | None

    @property
    def takes_layers(self) -> bool:
        """Whether llama.cpp offloads layers to it (GPUs, integrated or not)."""
        return self.kind in _OFFLOAD_KINDS

    @property
    def unified(self) -> bool:
        """Whether its memory is the host's (an integrated GPU, Apple's Metal)."""
        return self.kind == "igpu" or self.backend.lower() in _UNIFIED_BACKENDS

    def describe(self) -> str:
        memory = f"{gib(self.free_bytes)} free of {gib(self.total_bytes)}"
        shared = ", unified memory" if self.takes_layers and self.unified else ""
        return f"{self.name} ({self.kind}{shared}): {self.description}, {memory}"


@dataclass(frozen=True)
class Placement:
    """Where one engine's weights and KV cache live, and its attention kernel.

    ``n_gpu_layers`` is the setting as decided (``-1``: all), ``layers_offloaded`` the repeating
    layers actually on a GPU (``0`` on a build without a GPU backend, whatever the setting).
    The KV cache of an offloaded layer lives on its device when ``offload_kqv`` is on
    (llama.cpp's default, which the engine keeps); ``kv_bytes`` is the whole cache at its
    largest (the engine's ``ContextChoice.kv_bytes``). ``flash_attention`` is what the engine
    passes to llama.cpp: on, off, or ``None`` for llama.cpp's own choice (``auto``: on where
    the KV cache's device runs it). ``backend`` is the backend computing the offloaded layers
    (``CUDA``, ``Metal``, ``Vulkan``...), ``CPU`` when none are. ``n_threads`` is how many
    threads the CPU's share of a decode runs on (``EngineConfig.threads``).
    """

    n_layer: int | None
    n_gpu_layers: int
    offload_reason: str
    layers_offloaded: int
    kv_location: KVLocation
    kv_cells: int
    kv_bytes: int | None
    type_k: str
    type_v: str
    flash_attention_set: bool | None
    flash_attention: bool | None
    backend: str = "CPU"
    n_threads: int | None = None

    def describe_offload(self) -> str:
        total = "?" if self.n_layer is None else str(self.n_layer)
        return f"{self.layers_offloaded} of {total} layers on a GPU ({self.offload_reason})"

    def describe_kv(self) -> str:
        where = {
            "host": "in RAM (host)",
            "device": "on the GPU",
            "split": "split: offloaded layers' on the GPU, the rest in RAM",
        }[self.kv_location]
        return (
            f"{where}, {gib(self.kv_bytes)} for {self.kv_cells} cells "
            f"(K {self.type_k}, V {self.type_v})"
        )

    def describe_flash_attention(self) -> str:
        state = {True: "on", False: "off", None: "auto (llama.cpp decides per device)"}
        asked = {True: "set on", False: "set off", None: "not set: the engine's default"}
        return f"{state[self.flash_attention]} ({asked[self.flash_attention_set]})"


def placement_of(
    config: EngineConfig,
    *,
    n_layer: int | None,
    offload: OffloadChoice,
    gpu_offload: bool,
    kv: ContextChoice,
    offload_kqv: bool = True,
    gpu_backend: str | None = None,
) -> Placement:
    """The placement of an engine with ``config`` whose weights took ``offload`` on a build
    that can (``gpu_offload``) or cannot offload, with the KV cache ``kv``; ``gpu_backend``
    names the backend of the build's GPUs (the placement's ``backend`` when layers go there)."""
    decided, reason = offload.n_gpu_layers, offload.reason
    if not gpu_offload and decided != 0:
        reason += "; this build of llama.cpp has no GPU backend, so none"
    if not gpu_offload or decided == 0:
        layers = 0
    elif decided < 0 or n_layer is None:
        layers = n_layer or 0  # llama.cpp takes -1 (or more than there are) as every layer
    else:
        layers = min(decided, n_layer)
    location: KVLocation = "host"
    if offload_kqv and layers and n_layer:
        location = "device" if layers >= n_layer else "split"
    return Placement(
        n_layer=n_layer,
        n_gpu_layers=decided,
        offload_reason=reason,
        layers_offloaded=layers,
        kv_location=location,
        kv_cells=kv.n_cells,
        kv_bytes=kv.kv_bytes,
        type_k=config.type_k,
        type_v=config.type_v,
        flash_attention_set=config.flash_attention,
        # What the engine passes: resolved against the setting, as its contexts resolve it.
        flash_attention=config.flash_attention_for(decided),
        backend=(gpu_backend or "GPU") if layers else "CPU",
        n_threads=config.threads,
    )


@dataclass(frozen=True)
class Recommendation:
    """A setting (an ``EngineConfig`` field) this machine suits, its value now, and why."""

    setting: str
    value: int | bool | str | None
    current: int | bool | str | None
    why: str

    @property
    def is_change(self) -> bool:
        return self.value != self.current

    def describe(self) -> str:
        now = "as now" if not self.is_change else f"now {self.current!r}"
        return f"{self.setting}={self.value!r} ({now}): {self.why}"


@dataclass(frozen=True)
class MachineReport:
    """The machine as one engine sees it: llama.cpp's backends and devices, the cores, where
    the engine put its model (``None`` for an engine that does not say, e.g. a remote one),
    and the settings recommended for this machine."""

    backends: tuple[str, ...]
    devices: tuple[DeviceInfo, ...]
    physical_cores: int | None
    placement: Placement | None
    recommendations: tuple[Recommendation, ...]
    cpu_quota: float | None = None
    """The CPUs' worth of time the process's cgroup allows per period; ``None``: no limit."""

    @property
    def gpus(self) -> tuple[DeviceInfo, ...]:
        return tuple(d for d in self.devices if d.takes_layers)

    def rows(self) -> list[tuple[str, str]]:
        """(label, text) lines for a report: one per device and per recommendation."""
        rows = [("backends", ", ".join(self.backends) or "none registered")]
        rows += [("device", d.describe()) for d in self.devices]
        cores = "unknown" if self.physical_cores is None else str(self.physical_cores)
        rows.append(("physical cores", cores))
        if self.cpu_quota is not None:
            rows.append(("CPU limit", f"{self.cpu_quota:g} CPUs (the cgroup's quota)"))
        if self.placement is not None:
            rows.append(("offload", self.placement.describe_offload()))
            rows.append(("KV cache", self.placement.describe_kv()))
            rows.append(("flash attention", self.placement.describe_flash_attention()))
        rows += [("recommended", r.describe()) for r in self.recommendations]
        return rows
