"""Run Python code in a fresh interpreter and read back the JSON object it prints last: for
tests that must see what happens in a process where something (llama.cpp) cannot be imported."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]


def run_python_json(*args: str, timeout: float = 120) -> dict[str, Any]:
    """``python *args`` from the repository root; the last line of its output, as JSON."""
    done = subprocess.run(
        [sys.executable, *args],
        capture_output=True,
        text=True,
        check=False,
        timeout=timeout,
        cwd=ROOT,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return result
