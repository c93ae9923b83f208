"""llama-bench as the benchmarks run it: one process, its results as JSON records."""

from __future__ import annotations

import json
import subprocess
from collections.abc import Sequence
from typing import Any

from llamacpp_integrations.engine.native.tuning import cpu_advertises_amx


def repack_off() -> list[str]:
    """The flag that turns weight repacking off where the engine's default does (CPUs that
    advertise AMX, whose repacked kernels crash on some virtual machines), else none."""
    return ["--repack", "0"] if cpu_advertises_amx() else []


def run(binary: str, model: str, flags: Sequence[str]) -> list[dict[str, Any]]:
    """llama-bench's record of each test it ran on ``model`` with ``flags`` (one process;
    ``n_prompt``, ``n_gen``, ``n_depth`` and ``avg_ts``, tokens/s, among each record's fields).

    Raises:
        subprocess.CalledProcessError: llama-bench failed.
    """
    done = subprocess.run(
        [binary, "-m", model, *flags, "-o", "json"],
        capture_output=True, text=True, timeout=1800, check=True,
    )  # fmt: skip
    records: list[dict[str, Any]] = json.loads(done.stdout)
    return records
