"""Optional dependencies: which extra installs each, and one way to say one is missing.

The base install is pure Python plus small binary wheels; every heavier dependency comes with an
extra (``local`` compiles llama.cpp, so a remote-only user or a CI job replaying cassettes can
skip it). A package or module that needs an extra imports it under ``requires(extra)``: a
``ModuleNotFoundError`` for one of that extra's modules becomes a ``MissingDependencyError``
naming the extra and the pip command, and any other import error passes through untouched (a
broken install should say what is broken, not that an extra is missing).
"""

from __future__ import annotations

import importlib
import importlib.util
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from types import ModuleType

from .errors import MissingDependencyError

__all__ = ["EXTRAS", "Extra", "ensure_installed", "require", "requires"]


@dataclass(frozen=True)
class Extra:
    """One extra of ``pyproject.toml``: what it is for and the modules it brings."""

    needed_for: str
    """What needs it, as the error's message starts (``"a local model"``)."""
    modules: Mapping[str, str]
    """Each top-level module (or package path) it provides, and the distribution that does."""


# Kept beside pyproject.toml's [project.optional-dependencies]; test_optional_extras.py
# checks that every distribution named here is declared in its extra.
EXTRAS: Mapping[str, Extra] = {
    "local": Extra(
        "a local model (the in-process llama.cpp engine)", {"llama_cpp": "llama-cpp-python"}
    ),
    "langchain": Extra("a LangChain adapter", {"langchain_core": "langchain-core", "tqdm": "tqdm"}),
    "llama-index": Extra("a LlamaIndex adapter", {"llama_index.core": "llama-index-core"}),
    "hub": Extra(
        "a Hugging Face model (hf://)", {"huggingface_hub": "huggingface_hub", "tqdm": "tqdm"}
    ),
    "remote": Extra("a remote engine (llama-server over HTTP)", {"httpx": "httpx"}),
    "server": Extra(
        "the OpenAI-compatible server",
        {"starlette": "starlette", "uvicorn": "uvicorn", "prometheus_client": "prometheus-client"},
    ),
    "ray": Extra("scaling out on Ray (Ray Data, Ray Serve, RayEngine)", {"ray": "ray"}),
}


def _provided(missing: str | None, modules: Mapping[str, str]) -> str | None:
    """The extra's module that the missing one is (or contains), if any."""
    if missing is None:  # a finder that gave no name: it cannot be told apart, so pass it on
        return None
    for module in modules:
        if missing == module or module.startswith(missing + "."):
            return module
    return None


@contextmanager
def requires(extra: str) -> Iterator[None]:
    """Imports inside the block that find one of ``extra``'s modules missing raise
    ``MissingDependencyError`` (from the original error) instead."""
    wanted = EXTRAS[extra]
    try:
        yield
    except ModuleNotFoundError as error:
        module = _provided(error.name, wanted.modules)
        if module is None or isinstance(error, MissingDependencyError):
            raise
        raise MissingDependencyError(
            module, package=wanted.modules[module], extra=extra, needed_for=wanted.needed_for
        ) from error


def require(module: str, extra: str) -> ModuleType:
    """``module``, imported now; ``MissingDependencyError`` naming ``extra`` if it is missing."""
    with requires(extra):
        return importlib.import_module(module)


def ensure_installed(extra: str) -> None:
    """``MissingDependencyError`` now if one of ``extra``'s modules cannot be found, without
    importing it: for work that would be wasted first (downloading a model that could never be
    loaded). A finder that refuses to answer leaves the import to say so later."""
    wanted = EXTRAS[extra]
    for module, package in wanted.modules.items():
        try:
            found = importlib.util.find_spec(module)
        except (ImportError, ValueError):
            continue
        if found is None:
            raise MissingDependencyError(
                module, package=package, extra=extra, needed_for=wanted.needed_for
            )
