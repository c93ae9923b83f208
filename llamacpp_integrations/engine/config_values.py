"""Settings given as loose values (paths, pairs, lists) in the checked, hashable form
``EngineConfig`` stores."""

from __future__ import annotations

from dataclasses import dataclass

from ..errors import InvalidRequestError

__all__ = ["LoraAdapter", "lora_adapters", "tensor_split"]


@dataclass(frozen=True)
class LoraAdapter:
    """A LoRA adapter GGUF applied on top of the weights.

    Attributes:
        path: The adapter's ``.gguf`` file (made for the same base model, e.g. by llama.cpp's
            ``convert_lora_to_gguf.py``).
        scale: How strongly it applies to requests that name no adapters of their own
            (``GenerationRequest.lora``); ``0`` loads it for the requests that ask for it only.
        name: What requests call it by (``lora={"sql": 1.0}``); ``None`` takes the file's
            name without ``.gguf`` (an adapter is also known by its position, its id).
    """

    path: str
    scale: float = 1.0
    name: str | None = None


def lora_adapters(value: object) -> tuple[LoraAdapter, ...]:
    """``lora_adapters`` as a tuple of ``LoraAdapter`` (from adapters, paths or pairs)."""
    problem = (
        "lora_adapters must be a sequence of LoraAdapter(path, scale), (path, scale) pairs or paths"
    )
    if isinstance(value, str | bytes) or not isinstance(value, tuple | list):
        raise InvalidRequestError(problem)
    out: list[LoraAdapter] = []
    for item in value:
        if isinstance(item, LoraAdapter):
            adapter = item
        elif isinstance(item, str):
            adapter = LoraAdapter(item)
        elif isinstance(item, tuple | list) and len(item) == 2:
            adapter = LoraAdapter(item[0], item[1])
        elif isinstance(item, dict) and "path" in item:
            adapter = LoraAdapter(item["path"], item.get("scale", 1.0), item.get("name"))
        else:
            raise InvalidRequestError(f"{problem}; got {item!r}")
        if not isinstance(adapter.path, str) or not adapter.path:
            raise InvalidRequestError(f"a LoRA adapter's path must be a string; got {item!r}")
        if isinstance(adapter.scale, bool) or not isinstance(adapter.scale, int | float):
            raise InvalidRequestError(f"a LoRA adapter's scale must be a number; got {item!r}")
        if adapter.name is not None and (not isinstance(adapter.name, str) or not adapter.name):
            raise InvalidRequestError(f"a LoRA adapter's name must be a string; got {item!r}")
        out.append(LoraAdapter(adapter.path, float(adapter.scale), adapter.name))
    return tuple(out)


def tensor_split(value: object) -> tuple[float, ...]:
    """``tensor_split`` as a tuple of non-negative floats, at least one of them positive."""
    if isinstance(value, str | bytes) or not isinstance(value, tuple | list):
        raise InvalidRequestError("tensor_split must be a sequence of numbers, one per GPU")
    if not all(isinstance(v, int | float) and not isinstance(v, bool) for v in value):
        raise InvalidRequestError("tensor_split must be a sequence of numbers, one per GPU")
    split = tuple(float(v) for v in value)
    if not split or any(v < 0 for v in split) or sum(split) <= 0:
        raise InvalidRequestError(
            "tensor_split needs non-negative shares, at least one of them positive"
        )
    return split
