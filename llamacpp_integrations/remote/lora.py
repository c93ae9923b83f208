"""A llama-server's LoRA adapters, for requests that choose them (pure translation over a
transport).

llama-server loads its adapters at start (``--lora``), numbers them by position and lists them
at ``GET /lora-adapters`` (``[{id, path, scale}]``); a request's ``lora`` field is a list of
``{id, scale}``, every adapter left out at scale 0, and an empty list means "the server's
scales". So a request's ``lora`` mapping (names or ids) becomes the whole list, each adapter
with its scale or 0, and ``{}`` (no adapter) is sent as every adapter at 0. An adapter's name
here is its file's name without ``.gguf``, as the local engine names an unnamed adapter.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping
from typing import Any

from ..engine.config_values import LoraAdapter
from ..engine.lora import LoraInfo, LoraTable
from ..errors import InvalidRequestError, ServerFeatureError
from .transport import Transport

__all__ = ["RemoteLoras", "refused"]

PATH = "/lora-adapters"


def _table(listing: object) -> LoraTable:
    if not isinstance(listing, list):
        raise InvalidRequestError(f"the server's {PATH} is not a list: {listing!r}")
    entries = sorted(
        (e for e in listing if isinstance(e, dict) and isinstance(e.get("id"), int)),
        key=lambda e: int(e["id"]),
    )
    return LoraTable(
        LoraAdapter(str(e.get("path") or f"adapter-{e['id']}"), float(e.get("scale") or 0.0))
        for e in entries
    )


class RemoteLoras:
    """The adapters of the server behind ``transport``; their ids and names are read once (a
    server cannot load adapters while it runs), their scales whenever they are listed."""

    def __init__(self, transport: Transport) -> None:
        self._transport = transport
        self._lock = threading.Lock()
        self._known: LoraTable | None = None

    def list(self) -> list[LoraInfo]:
        """The server's adapters now, by id (``GET /lora-adapters``)."""
        table = _table(self._transport.get_json(PATH))
        with self._lock:
            self._known = table
        return table.list()

    def field(
        self, lora: Mapping[str | int, float] | None, request_id: str | None = None
    ) -> dict[str, Any]:
        """The ``lora`` field of a ``/completion`` body for a request's choice (nothing for
        ``None``: the server's scales apply).

        Raises:
            UnknownAdapterError: it names an adapter the server does not have.
        """
        if lora is None:
            return {}
        with self._lock:
            table = self._known
        if table is None:
            self.list()
            with self._lock:
                table = self._known
            assert table is not None
        table.key(lora, request_id)  # names and scales checked
        chosen = {table.find(name, request_id).id: scale for name, scale in lora.items()}
        return {"lora": [{"id": a.id, "scale": chosen.get(a.id, 0.0)} for a in table.list()]}


def refused(feature: str, url: str, build: str) -> ServerFeatureError:
    """What a remote engine raises for the LoRA calls llama-server takes at start only."""
    return ServerFeatureError(
        "llama-server loads LoRA adapters at start (--lora) and takes default scales at its "
        "own POST /lora-adapters; a request's lora field chooses among them",
        feature=feature,
        url=url,
        build=build,
    )
