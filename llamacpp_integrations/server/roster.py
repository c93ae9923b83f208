"""Which engine answers a request's ``model``: the roster of served models.

Every endpoint asks the roster for a ``ModelLease`` by the name the request gives and gives it
back when its answer ends (a stream: when its last event is sent or its client leaves), so a
roster that loads models on demand knows which are in use and never unloads one mid-answer.

``OneModel`` serves one engine under every name, as llama-server does with one model: clients
send whatever their configuration says (``gpt-4o``, ``smollm``), and all of them get the one
model. A roster of several models answers an unknown name with 404 ``model_not_found``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

from ..client import EngineBinding, TemplateFacts
from ..engine import InferenceEngine, ModelInfo

__all__ = ["ModelCard", "ModelLease", "ModelRoster", "OneModel", "model_card"]


@dataclass
class ModelLease:
    """One request's use of a served model: its name, engine and template facts (probed once
    per template and model). ``release`` must be called once the answer ended."""

    name: str
    engine: InferenceEngine
    facts: TemplateFacts
    on_release: Callable[[], None] = field(default=lambda: None)
    released: bool = False

    def release(self) -> None:
        """Give the model back (idempotent)."""
        if not self.released:
            self.released = True
            self.on_release()


@dataclass(frozen=True)
class ModelCard:
    """A model as ``/v1/models`` lists it: its id, its facts when it is loaded, and for a
    roster that loads models on demand whether it is (``loaded``, ``loading``, ``unloaded``)."""

    name: str
    info: ModelInfo | None
    status: str | None = None


class ModelRoster(Protocol):
    """The served models: listed, leased per request, closed with the server."""

    def cards(self) -> list[ModelCard]:
        """Every served model, loaded or not."""
        ...

    async def lease(self, name: str | None) -> ModelLease:
        """The model a request names, loading it if needed.

        Raises:
            ApiError: 404 ``model_not_found`` for a name the roster does not serve.
        """
        ...

    def loaded(self) -> list[ModelLease]:
        """The models loaded now, for health and metrics (nothing is leased or loaded)."""
        ...

    def close(self) -> None:
        """Close what the roster loaded (a given engine is closed only if it owns it)."""
        ...


def model_card(card: ModelCard) -> dict[str, Any]:
    """A model's entry in ``/v1/models``, OpenAI's shape with the engine's facts in ``meta``."""
    body: dict[str, Any] = {
        "id": card.name,
        "object": "model",
        "created": 0,
        "owned_by": "llamacpp-integrations",
    }
    info = card.info
    if info is not None:
        body["meta"] = {
            "n_ctx_per_seq": info.n_ctx_per_seq,
            "n_ctx_train": info.n_ctx_train,
            "n_embd": info.n_embd,
            "n_vocab": info.n_vocab,
            "n_params": info.n_params,
            "supports_images": info.supports_images,
        }
    if card.status is not None:  # the shape llama-server's router mode lists models in
        body["status"] = {"value": card.status}
    return body


class OneModel:
    """One engine, served under every model name (its own listed as ``name``)."""

    def __init__(self, engine: InferenceEngine, name: str, *, owns_engine: bool = False) -> None:
        self.engine = engine
        self.name = name
        self.owns_engine = owns_engine
        # Probing a template for tools and reasoning renders it a few times: once per template.
        self.facts = EngineBinding(model=None, settings={}, engine=engine)

    def cards(self) -> list[ModelCard]:
        return [ModelCard(self.name, self.engine.info)]

    async def lease(self, name: str | None) -> ModelLease:
        return ModelLease(self.name, self.engine, self.facts)

    def loaded(self) -> list[ModelLease]:
        return [ModelLease(self.name, self.engine, self.facts)]

    def close(self) -> None:
        if self.owns_engine:
            self.engine.close()  # in-flight requests were finished or cancelled by now
