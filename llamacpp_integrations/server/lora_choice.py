"""llama-server's per-request ``lora`` entry, which every API family's body may carry."""

from __future__ import annotations

from pydantic import BaseModel

__all__ = ["LoraChoice"]


class LoraChoice(BaseModel):
    """One entry of llama-server's per-request ``lora`` list: an adapter (its id, or here
    also its name) and its scale (adapters left out of the list get 0)."""

    id: int | str
    scale: float = 0.0
