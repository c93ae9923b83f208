"""Adapters let go of their engines: ``close()`` and ``with`` unload a model and give its memory
back, ``keep_alive`` keeps it loaded for a while for the next adapter, ``-1`` until asked."""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from llamacpp_integrations.engine import live_engines
from llamacpp_integrations.engine.registry import unload_kept_engines
from llamacpp_integrations.langchain import ChatLlamaCpp, LlamaCppEmbeddings
from llamacpp_integrations.llama_index import LlamaCpp, LlamaCppEmbedding

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "benchmarks"))

import lifecycle_rss  # noqa: E402

# Small serving settings of their own, so no other test's engine is the one held here.
SMALL = {"n_seq_max": 1, "n_ctx_per_seq": 256}


@pytest.mark.parametrize("model", ["smollm2-135m", "gemma3-270m"])
def test_closing_the_last_adapter_unloads_the_model_and_frees_its_memory(model: str) -> None:
    row = lifecycle_rss.run_child(model)
    assert row["mapped_while_loaded"] > 0
    assert row["engine_closed"] and row["live_engines_after_close"] == 0
    assert row["mapped_after_close"] == 0  # the weights are unmapped
    grown = row["rss_loaded"] - row["rss_before"]
    assert grown > 0
    # Memory comes back: at most a quarter of what loading took stays (allocator caches).
    assert row["rss_after_close"] - row["rss_before"] < grown / 4, row


def test_close_and_with_blocks_on_every_adapter(smollm_path: Path) -> None:
    model = str(smollm_path)
    adapters = [
        ChatLlamaCpp(model=model, max_tokens=2, **SMALL),
        LlamaCppEmbeddings(model=model, **SMALL),
        LlamaCpp(model=model, max_tokens=2, **SMALL),
        LlamaCppEmbedding(model=model, **SMALL),
    ]
    engines = [adapter.binding.get() for adapter in adapters]
    engine = engines[0]
    assert all(other is engine for other in engines)  # the same settings: one engine, held 4x
    adapters[0].close()
    adapters[1].close()
    assert not engine.closed  # the LlamaIndex adapters still hold it
    with adapters[2]:
        pass
    assert not engine.closed
    with adapters[3]:
        pass
    assert engine.closed
    # A closed adapter loads again when called again.
    assert adapters[0].invoke("Hi").content is not None
    adapters[0].close()


async def test_async_with_closes(smollm_path: Path) -> None:
    async with LlamaCpp(model=str(smollm_path), max_tokens=2, **SMALL) as llm:
        await llm.acomplete("Hi")
        engine = llm.binding.get()
    assert engine.closed


def test_keep_alive_keeps_the_engine_for_the_next_adapter(smollm_path: Path) -> None:
    model = str(smollm_path)
    first = ChatLlamaCpp(model=model, max_tokens=2, keep_alive=60, **SMALL)
    engine = first.binding.get()
    first.close()
    assert not engine.closed
    second = ChatLlamaCpp(model=model, max_tokens=2, **SMALL)
    assert second.binding.get() is engine  # taken again: nothing loaded
    second.close()  # keep_alive None: the last holder unloads at once
    assert engine.closed


def test_keep_alive_expires(smollm_path: Path) -> None:
    llm = ChatLlamaCpp(model=str(smollm_path), max_tokens=2, keep_alive=0.2, **SMALL)
    engine = llm.binding.get()
    llm.close()
    assert engine in live_engines()
    assert _wait_until(lambda: engine.closed)


def test_keep_alive_forever_until_asked(smollm_path: Path) -> None:
    llm = ChatLlamaCpp(model=str(smollm_path), max_tokens=2, keep_alive=-1, **SMALL)
    engine = llm.binding.get()
    llm.close()
    assert not engine.closed
    assert unload_kept_engines() == 1
    assert engine.closed


def test_an_engine_passed_in_stays_open(smollm_path: Path) -> None:
    from llamacpp_integrations.engine import Engine, EngineConfig

    with Engine(EngineConfig(model=str(smollm_path), **SMALL)) as engine:
        with ChatLlamaCpp(engine=engine, max_tokens=2) as llm:
            llm.invoke("Hi")
        assert not engine.closed


def _wait_until(predicate: Callable[[], bool], timeout: float = 30.0) -> bool:
    """Poll ``predicate`` (a bound on waiting, not a timing check)."""
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if predicate():
            return True
        time.sleep(0.05)
    return False
