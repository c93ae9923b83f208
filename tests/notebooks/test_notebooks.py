"""The example notebooks: stored without outputs, and each runs top to bottom on the test model.

Each run writes the executed notebook to ``docs/notebooks/`` (not committed), where the docs
site shows it with its outputs; the docs build never runs a model itself. The time limit per
notebook is a guard against a hang, not a speed check.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import nbformat
import pytest
from nbclient import NotebookClient

ROOT = Path(__file__).resolve().parents[2]
NOTEBOOKS = sorted((ROOT / "examples" / "notebooks").glob("*.ipynb"))
EXECUTED = ROOT / "docs" / "notebooks"
# Hang guards, far above a quiet run (the slowest notebook takes under 40 s on 2 cores): a
# machine busy with other work (a compile beside the suite) slows llama.cpp's spinning thread
# team many times over, and the throughput notebook's one-request-at-a-time cell took 300 s so.
CELL_TIMEOUT_S = 900
NOTEBOOK_TIMEOUT_S = 1800


def _names(path: Path) -> str:
    return path.stem


def test_there_are_notebooks() -> None:
    assert NOTEBOOKS, "examples/notebooks/ holds no notebook"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=_names)
def test_notebook_is_stored_without_outputs(path: Path) -> None:
    notebook = nbformat.read(path, as_version=4)
    nbformat.validate(notebook)
    dirty = [
        index
        for index, cell in enumerate(notebook.cells)
        if cell.cell_type == "code" and (cell.outputs or cell.execution_count is not None)
    ]
    assert not dirty, f"cells {dirty} keep outputs: clear them before committing"


@pytest.mark.timeout(NOTEBOOK_TIMEOUT_S)
@pytest.mark.parametrize("path", NOTEBOOKS, ids=_names)
def test_notebook_runs_top_to_bottom(path: Path) -> None:
    notebook = nbformat.read(path, as_version=4)
    client = NotebookClient(
        notebook,
        timeout=CELL_TIMEOUT_S,
        kernel_name="python3",
        resources={"metadata": {"path": str(path.parent)}},
    )
    start = time.monotonic()
    client.execute()
    elapsed = time.monotonic() - start
    EXECUTED.mkdir(parents=True, exist_ok=True)
    notebook.metadata["executed_in_s"] = round(elapsed, 1)
    nbformat.write(notebook, EXECUTED / path.name)
    times = EXECUTED / "run_times.json"
    recorded = json.loads(times.read_text()) if times.exists() else {}
    recorded[path.name] = round(elapsed, 1)
    times.write_text(json.dumps(recorded, indent=1, sort_keys=True) + "\n")
