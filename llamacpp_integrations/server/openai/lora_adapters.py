"""llama-server's ``/lora-adapters``: the LoRA adapters requests may choose, and their default
scales.

* ``GET /lora-adapters`` -> ``[{id, path, scale, name}]``, llama-server's list (``name``, what a
  request's ``lora`` may call the adapter by, is ours); an engine without adapters lists none;
* ``POST /lora-adapters`` ``[{id, scale}]`` -> ``{success: true}``: new default scales, for
  requests that name no adapters (every adapter left out gets 0, as llama-server does). An
  ``id`` may be a name here too. A request's own ``lora`` field wins over them.

Both take ``?model=`` to pick a model of a roster (the default model otherwise).
"""

from __future__ import annotations

import asyncio
import json

from pydantic import TypeAdapter, ValidationError
from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from ...engine import LoraEngine
from ..errors import invalid_request
from ..exchange import Exchange, Leases
from ..lora_choice import LoraChoice

__all__ = ["LORA_ADAPTERS", "LoraAdapters"]

LORA_ADAPTERS = "/lora-adapters"

_CHOICES = TypeAdapter(list[LoraChoice])


class LoraAdapters:
    """The handlers of ``GET`` and ``POST /lora-adapters``."""

    def __init__(self, exchange: Exchange) -> None:
        self.exchange = exchange

    async def list(self, request: Request) -> Response:
        """``GET /lora-adapters``."""
        return await self.exchange.run(LORA_ADAPTERS, lambda leases: self._list(request, leases))

    async def _list(self, request: Request, leases: Leases) -> Response:
        engine = (await leases.take(request.query_params.get("model"))).engine
        if not isinstance(engine, LoraEngine):
            return JSONResponse([])
        adapters = await asyncio.to_thread(lambda: engine.lora_adapters)
        return JSONResponse(
            [{"id": a.id, "path": a.path, "scale": a.scale, "name": a.name} for a in adapters]
        )

    async def set(self, request: Request) -> Response:
        """``POST /lora-adapters``."""
        return await self.exchange.run(LORA_ADAPTERS, lambda leases: self._set(request, leases))

    async def _set(self, request: Request, leases: Leases) -> Response:
        try:
            choices = _CHOICES.validate_python(json.loads(await request.body() or b"null"))
        except (json.JSONDecodeError, UnicodeDecodeError, ValidationError):
            raise invalid_request(
                'the body must be a list of {"id": ..., "scale": ...} objects'
            ) from None
        engine = (await leases.take(request.query_params.get("model"))).engine
        if not isinstance(engine, LoraEngine):
            raise invalid_request("this model has no LoRA adapters")
        scales = {choice.id: choice.scale for choice in choices}
        await asyncio.to_thread(engine.set_lora_scales, scales)
        return JSONResponse({"success": True})
