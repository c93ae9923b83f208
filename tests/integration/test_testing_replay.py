"""Agents recorded on the real model replay identically without it: a LangChain
``create_agent`` run and a LlamaIndex ``FunctionAgent`` run, streamed, are recorded by a
RecordingEngine over the tiny model, then replayed by a ReplayEngine in a process where
llama_cpp cannot be imported, and give the same streamed pieces, tool calls and answer."""

from __future__ import annotations

import textwrap
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from llamacpp_integrations.errors import UnmatchedRequestError
from llamacpp_integrations.testing import RecordingEngine, ReplayEngine
from tests.builders.python_json import run_python_json
from tests.integration.agent_replays import RUNS

if TYPE_CHECKING:
    from llamacpp_integrations.engine.engine import Engine

# Installed before anything else is imported: no module of the replay can load llama.cpp.
NO_NATIVE = textwrap.dedent(
    """
    import sys
    from importlib.abc import MetaPathFinder

    class NoNative(MetaPathFinder):
        def find_spec(self, name, path, target=None):
            if name == "llama_cpp" or name.startswith("llama_cpp."):
                raise ImportError(f"{name} is blocked: a replay needs no model")
            return None

    sys.meta_path.insert(0, NoNative())
    from tests.integration.agent_replays import main
    main(sys.argv[1], sys.argv[2])
    """
)


def _replay_without_native(framework: str, cassette: Path) -> dict[str, Any]:
    return run_python_json("-c", NO_NATIVE, framework, str(cassette))


Recorded = Callable[[str], tuple[Path, dict[str, Any]]]


@pytest.fixture(scope="module")
def recorded(engine: Engine, tmp_path_factory: pytest.TempPathFactory) -> Recorded:
    """A framework's run on the real model, and the cassette it was recorded into (each
    recorded on first use)."""
    where = tmp_path_factory.mktemp("cassettes")
    runs: dict[str, tuple[Path, dict[str, Any]]] = {}

    def record(framework: str) -> tuple[Path, dict[str, Any]]:
        if framework not in runs:
            path = where / f"{framework}.llamacpp.jsonl"
            runs[framework] = (path, RUNS[framework](RecordingEngine(engine, path)))
        return runs[framework]

    return record


@pytest.mark.parametrize("framework", sorted(RUNS))
def test_an_agent_run_replays_identically_without_llama_cpp(
    framework: str, recorded: Recorded
) -> None:
    path, run = recorded(framework)
    assert run["calls"] and run["calls"][0][0] == "multiply"  # the run did call the tool
    assert len(run["pieces"]) > 3  # and streamed its answer in pieces
    replayed = _replay_without_native(framework, path)
    assert replayed["llama_cpp_imported"] is False
    assert replayed["pieces"] == run["pieces"]
    assert replayed["calls"] == run["calls"]
    assert replayed["answer"] == run["answer"]


def test_an_unrecorded_request_names_the_nearest_recorded_one(recorded: Recorded) -> None:
    path, _ = recorded("langchain")
    with pytest.raises(UnmatchedRequestError) as caught:
        RUNS["langchain"](ReplayEngine(path), "What is 6 times 8? Use the multiply tool.")
    message = str(caught.value)
    assert "The nearest recorded request" in message and "differs in 1 field" in message
    assert "6 times 7?" in message and "6 times 8?" in message
