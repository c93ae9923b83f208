"""What the commands take from a model's store: an ``ollama://`` model's manifest keeps engine
settings (its projector as ``mmproj``, ``num_ctx``, LoRA adapters) and call options (``stop``,
``temperature``, ``top_k``, ``num_predict`` as ``max_tokens``...), as the adapters take them
(``models.stores.store_defaults``).

They are the model's defaults, and what the user passes (a flag, a request's field) goes over
them. A command's own engine settings, chosen for what it does (``chat``'s one sequence,
``doctor``'s 4096-token context), go over the manifest's too; its fallback call options
(``chat``'s 200-token answers) do not: the manifest's ``num_predict`` is the model's own. Other
specs have none.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from .client import CallOptions
from .models.resolve import model_spec
from .models.stores import store_defaults

__all__ = ["command_call_options", "store_call_defaults", "store_engine_defaults"]


def store_engine_defaults(model: str | None, own: Mapping[str, Any]) -> dict[str, Any]:
    """The engine settings a command starts from: the store's for ``model`` (``None``: the
    ``LLAMACPP_MODEL`` variable's), under the command's ``own``."""
    return {**store_defaults(model_spec(model)).engine, **own}


def store_call_defaults(model: str | None) -> dict[str, Any]:
    """The call options the store keeps with ``model`` (empty for other specs)."""
    return dict(store_defaults(model_spec(model)).sampling)


def command_call_options(
    model: str | None, own: Mapping[str, Any], given: Mapping[str, Any], *, owner: str
) -> CallOptions:
    """A command's call options: ``given`` (the user's flags) over the store's over the
    command's ``own`` fallbacks."""
    return CallOptions.merge({**own, **store_call_defaults(model)}, given, owner=owner)
