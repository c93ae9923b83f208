"""Shared fixtures: the real test models, fetched by `make models` into .cache/models."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

ROOT = Path(__file__).resolve().parents[1]
os.environ.setdefault("LLAMACPP_INTEGRATIONS_MODELS", str(ROOT / ".cache" / "models"))

from llamacpp_integrations.engine import EngineConfig  # noqa: E402
from llamacpp_integrations.models import models_dir  # noqa: E402

if TYPE_CHECKING:
    from llamacpp_integrations.engine.engine import Engine

SMOLLM = "SmolLM2-135M-Instruct.Q4_1.gguf"
GEMMA = "gemma-3-270m-q4_k_m.gguf"


def _model_file(name: str) -> Path:
    path = models_dir() / name
    if not path.exists():
        pytest.fail(f"{path} is missing: run `make models` first")
    return path


@pytest.fixture(scope="session")
def smollm_path() -> Path:
    return _model_file(SMOLLM)


@pytest.fixture(scope="session")
def gemma_path() -> Path:
    return _model_file(GEMMA)


@pytest.fixture(scope="session")
def engine(smollm_path: Path) -> Iterator[Engine]:
    """One engine for the read-only tests: 8 sequences of 1024 tokens."""
    from llamacpp_integrations.engine.engine import Engine

    with Engine(EngineConfig(model=str(smollm_path), n_seq_max=8, n_ctx_per_seq=1024)) as e:
        yield e


@pytest.fixture(scope="session")
def projector() -> Path:
    """A tiny random-weight image projector for SmolLM2 (width 576), in llava 1.5's layout:
    the one family that adds no special tokens of its own around an image (see the fixture)."""
    from tests.fixtures.tiny_projector import cached_tiny_projector

    return cached_tiny_projector("mlp", 576)
