"""The llama.cpp boundary: every module of the engine that imports ``llama_cpp`` lives here.

``runner`` (weights, the generation context, one batched decode), ``sampler`` (sampler chains),
``embedder`` (the embedding context), ``vision`` (libmtmd projectors and image prompts),
``devices`` (backends and offload) and ``llama_log`` (llama.cpp's log, routed to ``logging``).
llama.cpp's return codes become this package's errors here. Nothing outside this folder imports
``llama_cpp``. Importing this package checks llama-cpp-python (the ``local`` extra) is there
before any of its modules runs: without it, asking for a local model raises
``MissingDependencyError`` naming the extra (adapters over a remote engine, and replaying
cassettes, never come here).
"""

from __future__ import annotations

from ...optional import requires
from ..openmp_env import openmp_spin_settings

# libgomp reads its spin settings as llama.cpp loads it, which is now (``openmp_env.py``).
with requires("local"), openmp_spin_settings():
    import llama_cpp  # noqa: F401  (every module here imports it next anyway)
