"""The model most of the adapters' unit tests serve, as the public ``ScriptedEngine``.

``tiny_engine`` answers every request with "ok" in two chunks (three prompt tokens, two
completion tokens) and keeps each request it gets, so a test can check what an adapter asked
of the engine (``max_tokens``, ``stop``, sampling...). Its model, ``INFO``, is named by its file
``tiny-Q8_0`` and has a 256-token window, 100 tokens and 3-number vectors.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from llamacpp_integrations.testing import SCRIPTED_INFO, ScriptedEngine

INFO = replace(
    SCRIPTED_INFO,
    path="/models/tiny-Q8_0.gguf",
    name="Tiny Test Model",
    description="",
    n_ctx_train=512,
    n_ctx_per_seq=256,
    n_embd=3,
    n_vocab=100,
    n_params=1,
    size_bytes=1,
)


def tiny_engine(**fields: Any) -> ScriptedEngine:
    """A ``ScriptedEngine`` serving ``INFO`` that answers "ok"; ``fields`` replace any of its
    settings."""
    return ScriptedEngine(**{"info": INFO, "script": ("o", "k"), "prompt_tokens": 3, **fields})


def by_length(query: str, document: str) -> float:
    """A reranking score: the document's length."""
    return float(len(document))
