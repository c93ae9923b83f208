"""Tables of the docs built wholly from one results file, for ``<!--table NAME-->`` blocks.

Each public function takes the results (``results[stem]`` is ``benchmarks/results/STEM.json``
read) and returns the block's markdown; ``figures.py --check`` fails when a page's block
differs from what its function renders now, and ``--write`` (``make figures``) replaces it.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

Results = Mapping[str, Any]


def _ratio(ours: float, theirs: float) -> str:
    return f"{ours / theirs:.2f}x" if theirs else "n/a"


def _load(row: Mapping[str, Any]) -> str:
    if row["mode"] == "closed":
        return f"{row['load']} client{'s' if row['load'] != 1 else ''}"
    return f"{row['load']:g} req/s Poisson"


def serve_latency(results: Results) -> str:
    """docs/guides/server.md: ours / llama-server at each load of serve.json (below 1: ours is
    faster or its latency lower), with the requests each side answered 429."""
    document = results["serve"]
    peers = {
        (row["mode"], row["load"]): row
        for row in document["levels"]
        if row["server"] == "llama-server"
    }
    lines = [
        "| load | tok/s | TTFT P50 / P99 | inter-token P50 / P99 "
        "| answered 429 (ours / llama-server) |",
        "|---|---:|---:|---:|---:|",
    ]
    for row in document["levels"]:
        peer = peers.get((row["mode"], row["load"]))
        if row["server"] != "ours" or peer is None:
            continue
        ttft, itl = row["ttft_ms"], row["itl_ms"]
        lines.append(
            f"| {_load(row)} | {_ratio(row['tok_s'], peer['tok_s'])} "
            f"| {_ratio(ttft['p50'], peer['ttft_ms']['p50'])} / "
            f"{_ratio(ttft['p99'], peer['ttft_ms']['p99'])} "
            f"| {_ratio(itl['p50'], peer['itl_ms']['p50'])} / "
            f"{_ratio(itl['p99'], peer['itl_ms']['p99'])} "
            f"| {row['rejected_429']} of {row['requests']} / "
            f"{peer['rejected_429']} of {peer['requests']} |"
        )
    return "\n".join(lines)
