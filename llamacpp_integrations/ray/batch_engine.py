"""The one engine a batch actor holds, made from the same settings the adapters take.

Ray Data builds each actor of a ``map_batches`` actor pool from the class and its
``fn_constructor_kwargs``; the batch classes turn those keywords into a ``BatchJobSettings``
(the adapters' ``EngineSettings`` fields, ``model`` as the adapters read it: a path, a known
short name, ``hf://`` or ``ollama://``) and load the engine in the constructor, through the
registry as every adapter does, so the weights are read once per actor, before its first batch.

An actor that leaves ``n_threads`` unset decodes on as many threads as the CPUs Ray reserved
for it (``num_cpus``): the engine's default, the node's cores, would have two actors on
one node spin against each other.
"""

from __future__ import annotations

from typing import Any

from pydantic import ConfigDict, Field, PrivateAttr

from ..client import EngineSettings, engine_settings_of
from ..engine import InferenceEngine
from .reservation import with_actor_threads

__all__ = ["BatchJobSettings"]


class BatchJobSettings(EngineSettings):
    """What every batch class takes: the model, the engine settings, and how rows run."""

    model_config = ConfigDict(arbitrary_types_allowed=True, extra="forbid")

    model: str | None = Field(
        default=None,
        description="A .gguf path, a known short name such as 'smollm2-135m', "
        "hf://owner/repo/file.gguf, ollama://name:tag, or None for the LLAMACPP_MODEL "
        "environment variable.",
    )
    in_flight: int = Field(
        default=64,
        ge=1,
        description="Rows of a batch submitted to the engine at once (the engine decodes "
        "n_seq_max of them together, the rest wait in its queue); keep it at most the "
        "engine's max_queued.",
    )
    error_column: str = Field(
        default="error",
        description="The column that says why a row failed ('ClassName: message'), None where "
        "it succeeded.",
    )

    _engine: InferenceEngine | None = PrivateAttr(default=None)

    def _supplied_engine(self) -> InferenceEngine | None:
        return self._engine

    def _engine_settings(self) -> dict[str, Any]:
        return with_actor_threads(engine_settings_of(self))

    def load(self, engine: InferenceEngine | None = None) -> InferenceEngine:
        """The engine, loaded now (``engine``: one to use instead, in-process only; an engine
        cannot travel to a Ray actor)."""
        if engine is not None:
            self._engine = engine
        return self.binding.get()
