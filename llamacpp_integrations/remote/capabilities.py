"""What a llama-server can do, as it reports itself (pure: no I/O).

Read once from ``/props`` (and, for a router, ``/models``), never from the build string: a
release built from its source tarball names itself ``b0-unknown``, and features come and go
with the options a server was started with, not only with its build. Each feature the engine
relies on is decided here from the field that reports it:

* router mode: ``/props`` says ``"role": "router"`` (a server started without ``-m`` over
  ``--models-dir`` or ``--models-preset``); its own ``/props`` describes no model, so the routed
  model's ``/props`` (``?model=``) is read for the rest;
* images and audio: ``modalities`` (a projector loaded with ``--mmproj``), sent in the
  ``media_marker`` the server names (older builds, which name none, use the fixed marker);
* token probabilities: ``n_probs`` and ``post_sampling_probs`` among the sampling settings the
  server reports, the two fields our logprobs path sends;
* ``/slots`` and ``/metrics``: ``endpoint_slots`` and ``endpoint_metrics``;
* the chat template the engine renders with: ``chat_template``.

``/props`` does not report embeddings (``--embeddings``) or reranking (``--reranking``): the
server answers 501 ``not_supported_error`` for them, which becomes ``ServerFeatureError`` in
the transport. The ``/completion`` fields, the ``grammar_triggers`` encoding and the stream's
last event are the same in both builds compared (llama-cpp-python 0.3.36's vendored llama.cpp
and release b11434; see docs/guides/remote.md).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

__all__ = ["DEFAULT_MEDIA_MARKER", "RouterModel", "ServerCapabilities", "detect", "router_models"]

# What llama.cpp's multimodal helper calls an image in a prompt when a build names no marker.
DEFAULT_MEDIA_MARKER = "<__media__>"


@dataclass(frozen=True)
class RouterModel:
    """One model a router serves, as ``/models`` lists it."""

    id: str
    status: str  # "loaded", "loading", "unloaded", ... as the router says
    aliases: tuple[str, ...] = ()


@dataclass(frozen=True)
class ServerCapabilities:
    """What one llama-server (or the model a router routes to) offers, read once.

    Attributes:
        build: ``build_info`` as the server names it.
        tested: Whether the build is one this package's suites ran against.
        router: Whether the server is a router over several models.
        model: The model the engine's requests go to: a router's routed model, else the
            server's own (its ``model_alias``).
        models: A router's models (empty for a single-model server).
        vision: A projector takes images.
        audio: A projector takes audio.
        media_marker: The text an image stands as in a prompt (``None``: no projector).
        token_probs: ``/completion`` reports token probabilities as our logprobs path asks.
        slots_endpoint: ``/slots`` answers (not ``--no-slots``).
        metrics_endpoint: ``/metrics`` answers (``--metrics``).
        chat_template: The server reports a chat template (chats are rendered with it here).
        n_slots: Parallel slots of the model's server.
        n_ctx: One slot's context.
    """

    build: str
    tested: bool
    router: bool
    model: str | None
    models: tuple[RouterModel, ...]
    vision: bool
    audio: bool
    media_marker: str | None
    token_probs: bool
    slots_endpoint: bool
    metrics_endpoint: bool
    chat_template: bool
    n_slots: int
    n_ctx: int

    def summary(self) -> str:
        """One line naming what was detected, for the log."""
        offered = [
            name
            for name, present in (
                ("router", self.router),
                ("images", self.vision),
                ("audio", self.audio),
                ("logprobs", self.token_probs),
                ("/slots", self.slots_endpoint),
                ("/metrics", self.metrics_endpoint),
                ("chat template", self.chat_template),
            )
            if present
        ]
        model = f"model {self.model!r}, " if self.model else ""
        return f"{model}{self.n_slots} slots of {self.n_ctx} tokens; " + (
            ", ".join(offered) or "no optional features"
        )


def is_router(props: Mapping[str, Any]) -> bool:
    """Whether ``/props`` (asked without ``?model=``) is a router's."""
    return props.get("role") == "router"


def router_models(listing: object) -> tuple[RouterModel, ...]:
    """A router's ``/models`` (``{"data": [{"id", "aliases", "status": {"value"}}]}``)."""
    data = listing.get("data") if isinstance(listing, Mapping) else None
    rows = [row for row in data if isinstance(row, Mapping)] if isinstance(data, list) else []
    models = []
    for row in rows:
        status = row.get("status")
        value = status.get("value") if isinstance(status, Mapping) else status
        aliases = row.get("aliases")
        models.append(
            RouterModel(
                id=str(row.get("id", "")),
                status=str(value or ""),
                aliases=tuple(str(a) for a in aliases) if isinstance(aliases, Sequence) else (),
            )
        )
    return tuple(models)


def detect(
    props: Mapping[str, Any],
    *,
    tested_builds: frozenset[str],
    router_props: Mapping[str, Any] | None = None,
    models: tuple[RouterModel, ...] = (),
    model: str | None = None,
) -> ServerCapabilities:
    """The capabilities ``props`` reports: a single server's ``/props``, or, behind a router
    (``router_props``, with its ``models``), the routed ``model``'s own ``/props``."""
    settings = props.get("default_generation_settings") or {}
    params = settings.get("params") if isinstance(settings, Mapping) else None
    params = params if isinstance(params, Mapping) else {}
    modalities = props.get("modalities")
    modalities = modalities if isinstance(modalities, Mapping) else {}
    vision = bool(modalities.get("vision"))
    audio = bool(modalities.get("audio"))
    marker = props.get("media_marker")
    build = str((router_props or props).get("build_info") or "")
    return ServerCapabilities(
        build=build,
        tested=build in tested_builds,
        router=router_props is not None,
        model=model or (str(props.get("model_alias")) if props.get("model_alias") else None),
        models=models,
        vision=vision,
        audio=audio,
        media_marker=(str(marker) if marker else DEFAULT_MEDIA_MARKER) if vision or audio else None,
        token_probs="n_probs" in params and "post_sampling_probs" in params,
        # Builds before these fields answered both endpoints unconditionally.
        slots_endpoint=bool(props.get("endpoint_slots", True)),
        metrics_endpoint=bool(props.get("endpoint_metrics", True)),
        chat_template=bool(props.get("chat_template")),
        n_slots=int(props.get("total_slots") or 0),
        n_ctx=int(settings.get("n_ctx") or 0) if isinstance(settings, Mapping) else 0,
    )
