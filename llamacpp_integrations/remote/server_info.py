"""What a llama-server says about itself, in our types (pure: no I/O).

``/props`` gives the build, the chat template and its BOS/EOS text, the slots' context and the
media marker; ``/v1/models`` the model's sizes; ``/slots`` and ``/metrics`` what is running.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import PurePath
from typing import Any

from ..engine.results import EngineStats, ModelInfo, SlotStats
from .capabilities import ServerCapabilities, detect

__all__ = ["ServerDescription", "describe_server", "parse_metrics", "stats_from"]

# Images are downscaled on the client to this side before they are sent (the local engine's
# floor for a projector's own tiling); the server's projector resizes them again.
IMAGE_MAX_SIDE = 1024


@dataclass(frozen=True)
class ServerDescription:
    """One server, as read once when the engine first needs it."""

    info: ModelInfo
    build_info: str
    media_marker: str | None
    bos_token: str
    eos_token: str
    n_slots: int
    capabilities: ServerCapabilities


def _meta(models: object) -> Mapping[str, Any]:
    data = models.get("data") if isinstance(models, Mapping) else None
    if isinstance(data, Sequence) and data and isinstance(data[0], Mapping):
        meta = data[0].get("meta")
        return meta if isinstance(meta, Mapping) else {}
    return {}


def describe_server(
    url: str,
    props: Mapping[str, Any],
    models: object,
    capabilities: ServerCapabilities | None = None,
) -> ServerDescription:
    """``/props`` and ``/v1/models`` as a description with its ``ModelInfo`` (``capabilities``:
    as detected from the same ``/props``, unless given)."""
    caps = capabilities or detect(props, tested_builds=frozenset())
    meta = _meta(models)
    settings = props.get("default_generation_settings") or {}
    model_path = str(props.get("model_path") or "")
    vision = caps.vision
    projector = caps.vision or caps.audio
    n_ctx = int(settings.get("n_ctx") or meta.get("n_ctx") or 0)
    info = ModelInfo(
        path=url,
        name=PurePath(model_path).stem or None,
        architecture="",  # /props does not say; the GGUF header is on the server
        description=f"llama-server at {url}: {PurePath(model_path).name} {meta.get('ftype', '')}",
        n_ctx_train=int(meta.get("n_ctx_train") or 0),
        n_ctx_per_seq=n_ctx,
        n_embd=int(meta.get("n_embd") or 0),
        n_vocab=int(meta.get("n_vocab") or 0),
        n_params=int(meta.get("n_params") or 0),
        size_bytes=int(meta.get("size") or 0),
        chat_template=props.get("chat_template") or None,
        # The projector's file is on the server; its presence is what ``supports_images`` asks.
        mmproj=f"{url} (server projector)" if projector else None,
        image_max_side=IMAGE_MAX_SIDE if vision else None,
        vision_encoder=vision,
        # /props does not say the rate; llama.cpp's audio encoders all read 16 kHz, and the
        # server resamples every clip to its projector's rate itself.
        audio_sample_rate=16000 if caps.audio else None,
        context_reason="the server's slot context (-c divided by -np)",
    )
    return ServerDescription(
        info=info,
        build_info=str(props.get("build_info", "")),
        media_marker=caps.media_marker if projector else None,
        bos_token=str(props.get("bos_token") or ""),
        eos_token=str(props.get("eos_token") or ""),
        n_slots=int(props.get("total_slots") or 0),
        capabilities=caps,
    )


def parse_metrics(text: str) -> dict[str, float]:
    """Prometheus text (``/metrics``) as a name -> value map, comments skipped."""
    values: dict[str, float] = {}
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        name, _, value = line.rpartition(" ")
        try:
            values[name.strip()] = float(value)
        except ValueError:
            continue
    return values


def stats_from(slots: object, metrics: Mapping[str, float]) -> EngineStats:
    """``/slots`` (and ``/metrics`` when the server exposes it) as ``EngineStats``.

    The server does not report a slot's cached tokens or KV cells: those read 0.
    """
    rows = [s for s in slots if isinstance(s, Mapping)] if isinstance(slots, list) else []
    slot_stats = tuple(
        SlotStats(
            seq_id=int(s.get("id", i)),
            busy=bool(s.get("is_processing")),
            cached_tokens=0,
            kv_cells=0,
        )
        for i, s in enumerate(rows)
    )
    return EngineStats(
        running=sum(s.busy for s in slot_stats),
        waiting=int(metrics.get("llamacpp:requests_deferred", 0)),
        steps=int(metrics.get("llamacpp:n_decode_total", 0)),
        slots=slot_stats,
    )
