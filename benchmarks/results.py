"""Benchmark results as data: each benchmark can write what it measured, with the machine it
ran on, as JSON under ``benchmarks/results/`` for ``report.py`` to render."""

from __future__ import annotations

import datetime
import json
import os
import platform
import subprocess
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import Any

RESULTS_DIR = Path(__file__).resolve().parent / "results"
# Where `make llama-server` builds llama.cpp's server, unless the environment names another.
LLAMA_SERVER = os.environ.get(
    "LLAMACPP_INTEGRATIONS_LLAMA_SERVER", ".cache/llama-server/build/bin/llama-server"
)


def cpu_name() -> str:
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as cpuinfo:
            for line in cpuinfo:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def commit() -> str:
    """The commit measured: ``git rev-parse HEAD``, with ``+dirty`` when the tree has changes
    (then the figure is of code no commit holds), or ``unknown`` outside a git checkout."""
    root = RESULTS_DIR.parents[1]
    try:
        head = subprocess.run(
            ["git", "rev-parse", "HEAD"], cwd=root, capture_output=True, text=True, check=True
        ).stdout.strip()
        changes = subprocess.run(
            ["git", "status", "--porcelain", "--untracked-files=no"],
            cwd=root,
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"
    return head + ("+dirty" if changes else "")


def machine() -> dict[str, Any]:
    """What a figure must say about where it was measured (benchmarks/figures.py checks that
    every results file carries date, cpu, cores and commit)."""
    try:
        binding = version("llama-cpp-python")
    except PackageNotFoundError:  # a benchmark of pure code runs without it
        binding = "not installed"
    return {
        "cpu": cpu_name(),
        "cores": os.cpu_count() or 1,
        "python": platform.python_version(),
        "llama_cpp_python": binding,
        "date": datetime.date.today().isoformat(),
        "commit": commit(),
    }


def server_flags(command: list[str], model: str | None = None) -> list[str]:
    """A server's command line as a results file keeps it (its side's settings): the flags,
    without the program, with the model (after ``-m``/``--model``, or the word equal to
    ``model``) as its file name and without the port chosen per run."""
    flags: list[str] = []
    words = iter(command[1:])
    for word in words:
        if word in ("-m", "--model"):
            flags += [word, Path(next(words, "")).name]
        elif word == "--port":
            next(words, None)
        else:
            flags.append(Path(word).name if model is not None and word == model else word)
    return flags


def write(path: str | Path | None, benchmark: str, settings: dict[str, Any], **data: Any) -> None:
    """Write one benchmark's results (nothing when ``path`` is None): the machine, the
    ``settings`` of every side measured (ours and each peer's), then the figures."""
    if path is None:
        return
    out = Path(path)
    out.parent.mkdir(parents=True, exist_ok=True)
    document = {"benchmark": benchmark, "machine": machine(), "settings": settings, **data}
    out.write_text(json.dumps(document, indent=1) + "\n")
