"""Readers of the engine flags' values, spelled as llama-server takes them:
each turns the text given into the value ``EngineConfig`` takes, or raises
``argparse.ArgumentTypeError``, which argparse reports as a usage error naming the flag."""

from __future__ import annotations

import argparse
import re
from pathlib import Path

from ..engine.config_values import LoraAdapter

__all__ = [
    "UNITS",
    "count",
    "gpu_layers",
    "loras",
    "on_off_auto",
    "scaled_loras",
    "size",
    "template_file",
    "tensor_split",
]


def count(text: str) -> int:
    """A count: a whole number, not negative."""
    value = int(text)
    if value < 0:
        raise argparse.ArgumentTypeError(f"{text} is negative")
    return value


def gpu_layers(text: str) -> int | None:
    """llama-server's spelling: a number, ``all`` or ``auto`` (its ``-1`` means auto, ours all:
    a negative number is refused rather than read either way)."""
    if text in ("auto", "all"):
        return None if text == "auto" else -1
    try:
        return count(text)
    except (ValueError, argparse.ArgumentTypeError):
        raise argparse.ArgumentTypeError(f"{text!r}: a number of layers, 'all' or 'auto'") from None


def on_off_auto(text: str) -> bool | None:
    """llama-server's ``on``, ``off`` or ``auto`` (``None``: the engine's own choice)."""
    values = {"on": True, "true": True, "1": True, "off": False, "false": False, "0": False}
    if text.lower() == "auto":
        return None
    if text.lower() not in values:
        raise argparse.ArgumentTypeError(f"{text!r}: on, off or auto")
    return values[text.lower()]


def tensor_split(text: str) -> tuple[float, ...]:
    """``3,1`` (or ``3/1``, as llama-server also reads it): each GPU's share."""
    try:
        return tuple(float(part) for part in re.split(r"[,/]+", text.strip(",/")))
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r}: shares like 3,1, one per GPU") from None


UNITS = {"": 1, "K": 2**10, "M": 2**20, "G": 2**30, "T": 2**40}


def size(text: str) -> int:
    """Bytes: a number, or one with K, M, G or T (binary: ``2G`` is 2 GiB)."""
    match = re.fullmatch(r"(\d+(?:\.\d+)?)\s*([KMGT]?)(?:i?B)?", text.strip(), re.IGNORECASE)
    if match is None:
        raise argparse.ArgumentTypeError(f"{text!r}: a size in bytes, like 512M or 2G")
    return int(float(match.group(1)) * UNITS[match.group(2).upper()])


def template_file(text: str) -> str:
    """The text of the template file named."""
    try:
        return Path(text).expanduser().read_text(encoding="utf-8")
    except OSError as error:
        raise argparse.ArgumentTypeError(f"cannot read {text}: {error.strerror}") from None


_ADAPTER_NAME = re.compile(r"[A-Za-z0-9_.-]+")


def _named(part: str) -> tuple[str | None, str]:
    """``NAME=FILE`` as ``(NAME, FILE)``, a plain ``FILE`` as ``(None, FILE)``."""
    name, equals, path = part.partition("=")
    if equals and path and _ADAPTER_NAME.fullmatch(name):
        return name, path
    return None, part


def loras(text: str) -> list[LoraAdapter]:
    """Adapter files, comma-separated as llama-server's ``--lora`` takes them; each may be
    named ``NAME=FILE`` (requests choose adapters by name)."""
    return [
        LoraAdapter(path, 1.0, name) for name, path in map(_named, filter(None, text.split(",")))
    ]


def scaled_loras(text: str) -> list[LoraAdapter]:
    """``FILE:SCALE`` pairs (or ``NAME=FILE:SCALE``), comma-separated as llama-server's
    ``--lora-scaled`` takes them."""
    adapters = []
    for part in filter(None, text.split(",")):
        name, spec = _named(part)
        path, _, scale = spec.rpartition(":")
        try:
            adapters.append(LoraAdapter(path, float(scale), name))
        except ValueError:
            raise argparse.ArgumentTypeError(f"{part!r}: FILE:SCALE") from None
        if not path:
            raise argparse.ArgumentTypeError(f"{part!r}: FILE:SCALE")
    return adapters
