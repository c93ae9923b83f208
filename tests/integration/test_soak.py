"""One minute of the soak (``benchmarks/soak.py``; ``make soak-test``, not in ``make test``, which
keeps CI under 30 minutes): mixed traffic, cancellations, timeouts and
overload from threads and asyncio at once, then its checks (every request ended once with a
result or a typed error, idle KV, no thread or fd leak, bounded RSS growth, fixed greedy
prompts unchanged). It runs in a process of its own, so its leak checks see only its engine."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.soak


def test_soak_one_minute(tmp_path: Path, smollm_path: Path) -> None:
    report = tmp_path / "soak.json"
    env = dict(os.environ, LLAMACPP_INTEGRATIONS_MODELS=str(smollm_path.parent))
    run = subprocess.run(
        [
            sys.executable,
            str(ROOT / "benchmarks" / "soak.py"),
            "--minutes",
            "1",
            "--json",
            str(report),
        ],
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert run.returncode == 0, run.stdout[-4000:] + run.stderr[-4000:]
    result = json.loads(report.read_text())
    assert all(result["checks"].values())
    assert result["requests"] > 0
    assert not result["untyped"] and not result["never_ended"]
