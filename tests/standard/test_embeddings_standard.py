"""LangChain's standard embeddings tests, run against the real SmolLM2 135M model."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from langchain_tests.integration_tests import EmbeddingsIntegrationTests
from langchain_tests.unit_tests import EmbeddingsUnitTests

from llamacpp_integrations.engine import Engine, engine_for
from llamacpp_integrations.langchain import LlamaCppEmbeddings

# A short name resolves through $LLAMACPP_INTEGRATIONS_MODELS (tests/conftest.py points it at
# .cache/models); the standard tests read their parameters from properties, not fixtures.
MODEL = "smollm2-135m"


@pytest.fixture(scope="module", autouse=True)
def shared_smollm() -> Iterator[Engine]:
    """Hold the registry's engine for the whole module.

    Each standard test builds its own ``LlamaCppEmbeddings``; the registry keeps engines only
    while someone holds them, so without this every test would load the weights again.
    """
    engine = engine_for(None, MODEL, {})
    yield engine
    del engine


class _Params:
    """What both standard suites construct the embeddings with (not collected: no Test prefix)."""

    @property
    def embeddings_class(self) -> type[LlamaCppEmbeddings]:
        return LlamaCppEmbeddings

    @property
    def embedding_model_params(self) -> dict[str, Any]:
        return {"model": MODEL}


# langchain_tests refuses a class deriving from both suites ("multiple standard test base
# classes"), so each suite gets its own class over the same parameters.
class TestLlamaCppEmbeddingsUnit(_Params, EmbeddingsUnitTests):
    pass


class TestLlamaCppEmbeddingsIntegration(_Params, EmbeddingsIntegrationTests):
    pass
