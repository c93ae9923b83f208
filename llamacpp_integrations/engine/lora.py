"""LoRA adapters chosen per request: the engine's table of adapters, and what a request's
choice becomes.

llama.cpp applies adapters to a whole context at each decode (``llama_set_adapters_lora``),
never to one sequence. So an engine keeps a table of the adapters it has loaded (by name and
by id, their position, as llama-server numbers them), and a request's choice
(``GenerationRequest.lora``) becomes a ``LoraKey``: the adapter files and scales its tokens
are decoded with. The scheduler groups each step's rows by key and the worker decodes one
group after another, setting the context's adapters before each (as llama-server does with
its slots' adapters). Cells made under one key are never shared with a request of another:
the key is part of what a slot's cells hold, of what a request may follow, and of what the
prompt cache on disk may restore.

A request that names no adapters takes the table's default scales (an adapter's
``LoraAdapter.scale``, changed by ``set_scales``, llama-server's ``POST /lora-adapters``);
one that names some takes exactly those, every other adapter at scale 0, as llama-server's
``lora`` field does. Pure: no llama.cpp here.
"""

from __future__ import annotations

import concurrent.futures
import math
import threading
from collections.abc import Hashable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from ..errors import InvalidRequestError, UnknownAdapterError
from ..models import resolve_model_path
from .config_values import LoraAdapter

if TYPE_CHECKING:
    from .worker.inbox import Inbox

__all__ = [
    "LoraInfo",
    "LoraKey",
    "LoraServing",
    "LoraTable",
    "by_adapters",
    "lora_key",
    "only_under",
]

K = TypeVar("K", bound=Hashable)

LoraKey = tuple[tuple[str, float], ...]
"""The adapters a row is decoded with: ``(file, scale)`` pairs by file, no zero scales."""


def lora_key(pairs: Iterable[tuple[str, float]]) -> LoraKey:
    """The canonical key of ``(file, scale)`` pairs: zero scales dropped, sorted by file, one
    pair per file (the first, as ``llama_set_adapters_lora`` keeps the first of a file)."""
    scales: dict[str, float] = {}
    for path, scale in pairs:
        if scale != 0.0:
            scales.setdefault(path, float(scale))
    return tuple(sorted(scales.items()))


def only_under(
    shared: Mapping[K, int], lora: LoraKey, made_with: Mapping[K, LoraKey], others: LoraKey
) -> dict[K, int]:
    """A prefix index's lookup (``shared``: tokens in common, by key) with the keys whose
    cells were made with other adapters than ``lora`` sharing nothing; ``made_with``: the
    adapters of the keys, ``others`` those of any key it does not name (saved prompts)."""
    return {key: n if made_with.get(key, others) == lora else 0 for key, n in shared.items()}


def by_adapters(loras: Sequence[LoraKey]) -> list[list[int]]:
    """The positions of ``loras`` grouped by adapter set, each group and set in order."""
    groups: dict[LoraKey, list[int]] = {}
    for index, lora in enumerate(loras):
        groups.setdefault(lora, []).append(index)
    return list(groups.values())


@dataclass(frozen=True)
class LoraInfo:
    """One adapter an engine has loaded, as ``Engine.lora_adapters`` lists it.

    Attributes:
        id: Its position in the engine's table (llama-server's ``id``).
        name: What requests call it by.
        path: The adapter file.
        scale: Its scale for requests that name no adapters of their own.
    """

    id: int
    name: str
    path: str
    scale: float


def _scale(value: object, what: str, request_id: str | None) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise InvalidRequestError(
            f"the scale of LoRA adapter {what} must be a finite number, not {value!r}",
            request_id=request_id,
        )
    return float(value)


class LoraTable:
    """An engine's adapters, by id and name; safe to use from any thread.

    Raises:
        InvalidRequestError: two adapters given the same name.
    """

    def __init__(self, adapters: Iterable[LoraAdapter] = ()) -> None:
        self._lock = threading.Lock()
        self._adapters: list[LoraInfo] = []
        for adapter in adapters:
            self.add(adapter)

    def add(self, adapter: LoraAdapter) -> LoraInfo:
        """Register ``adapter`` (its file already loaded) under its name, or its file's stem
        (with ``-ID`` after it when another adapter has that name already)."""
        with self._lock:
            names = {a.name for a in self._adapters}
            new_id = len(self._adapters)
            name = adapter.name
            if name is None:
                name = Path(adapter.path).name.removesuffix(".gguf")
                name = name if name not in names else f"{name}-{new_id}"
            elif name in names:
                raise InvalidRequestError(f"there is a LoRA adapter named {name!r} already")
            info = LoraInfo(new_id, name, adapter.path, _scale(adapter.scale, name, None))
            self._adapters.append(info)
            return info

    def list(self) -> list[LoraInfo]:
        """Every adapter, by id."""
        with self._lock:
            return list(self._adapters)

    def find(self, adapter: str | int, request_id: str | None = None) -> LoraInfo:
        """The adapter named ``adapter`` (a name, or an id).

        Raises:
            UnknownAdapterError: no adapter has that name or id.
        """
        with self._lock:
            for info in self._adapters:
                if adapter == (info.id if isinstance(adapter, int) else info.name):
                    return info
            known = tuple(info.name for info in self._adapters)
        listing = ", ".join(known) if known else "none is loaded"
        raise UnknownAdapterError(
            f"no LoRA adapter {adapter!r} on this engine (known: {listing})",
            adapter=adapter,
            known=known,
            request_id=request_id,
        )

    def set_scales(self, scales: Mapping[str | int, float]) -> None:
        """New default scales, llama-server's ``POST /lora-adapters``: the adapters named get
        their scale, every other one 0.

        Raises:
            UnknownAdapterError: a name or id the table does not have (nothing changes).
        """
        chosen = {self.find(a).id: _scale(s, repr(a), None) for a, s in scales.items()}
        with self._lock:
            self._adapters = [
                LoraInfo(a.id, a.name, a.path, chosen.get(a.id, 0.0)) for a in self._adapters
            ]

    def key(
        self, chosen: Mapping[str | int, float] | None, request_id: str | None = None
    ) -> LoraKey:
        """What a request's ``lora`` becomes: the default scales for ``None``, else exactly
        the adapters named (by name or id) with their scales.

        Raises:
            UnknownAdapterError: it names an adapter the table does not have.
            InvalidRequestError: it is no mapping, or a scale is no finite number.
        """
        if chosen is None:
            return lora_key((a.path, a.scale) for a in self.list())
        if not isinstance(chosen, Mapping):
            raise InvalidRequestError(
                "lora must map adapter names (or ids) to scales, as {'name': 1.0}",
                request_id=request_id,
            )
        return lora_key(
            (self.find(a, request_id).path, _scale(s, repr(a), request_id))
            for a, s in chosen.items()
        )


class LoraServing:
    """The LoRA side of ``Engine`` (``LoraEngine``): its table, and loading while serving."""

    _loras: LoraTable
    _inbox: Inbox

    @property
    def lora_adapters(self) -> list[LoraInfo]:
        """The adapters requests may choose, by id, with their default scales."""
        return self._loras.list()

    def load_lora(
        self, name: str, path: str, *, scale: float = 0.0, timeout: float | None = 60
    ) -> LoraInfo:
        """Load a LoRA adapter file beside the weights (they are not loaded again) and let
        requests choose it as ``name``. ``scale``: its scale for requests that name no
        adapters (``0``, the default: only the requests that ask for it get it).

        Raises:
            InvalidRequestError: ``name`` is taken, or is no name.
            ModelLoadError: llama.cpp refused the file (made for another model, not a LoRA).
        """
        if not isinstance(name, str) or not name:
            raise InvalidRequestError(f"a LoRA adapter's name must be a string; got {name!r}")
        if any(info.name == name for info in self._loras.list()):
            raise InvalidRequestError(f"there is a LoRA adapter named {name!r} already")
        adapter = LoraAdapter(str(resolve_model_path(path)), _scale(scale, name, None), name)
        done: concurrent.futures.Future[None] = concurrent.futures.Future()

        def load(core: Any) -> None:  # on the worker, which owns the weights
            try:
                core.model.lora(adapter.path)
            except BaseException as error:  # handed to the caller
                done.set_exception(error)
            else:
                done.set_result(None)

        self._inbox.call(load)
        done.result(timeout)
        return self._loras.add(adapter)

    def set_lora_scales(self, scales: Mapping[str | int, float]) -> None:
        """New default scales (llama-server's ``POST /lora-adapters``): the adapters named get
        theirs, every other one 0. Requests already admitted keep the adapters they began with.

        Raises:
            UnknownAdapterError: a name or id no adapter has (nothing changes).
        """
        self._loras.set_scales(scales)
