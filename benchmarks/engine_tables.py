"""docs/performance.md's tables of the engine's own cost (``figure_tables`` re-exports them):
one stream's time per token by phase (step_profile.json), and a step's cost apart from the
kernels (overhead.json)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

Results = Mapping[str, Any]

_MODELS = {"smollm2-135m": "SmolLM2", "gemma3-270m": "Gemma 3"}


def step_profile_phases(results: Results) -> str:
    """docs/performance.md: microseconds per token in each phase, one stream, each model and
    mode (step_profile.json)."""
    runs = results["step_profile"]["runs"]
    heads = [f"{_MODELS.get(r['model'], r['model'])}, {r['mode']}" for r in runs]
    lines = [
        "| us per token | " + " | ".join(heads) + " |",
        "|---|" + "---:|" * len(runs),
    ]
    for name in runs[0]["phases_us"]:
        cells = []
        for run in runs:
            us = run["phases_us"][name]
            cells.append(f"{us:,.1f} ({us / run['token_us']:.1%})")
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    lines.append(
        "| **whole token** | " + " | ".join(f"**{r['token_us']:,.0f}**" for r in runs) + " |"
    )
    lines.append(
        "| not llama_decode | "
        + " | ".join(f"{1 - r['phases_us']['llama_decode'] / r['token_us']:.1%}" for r in runs)
        + " |"
    )
    lines.append(
        "| chunk to the caller (median lag) | "
        + " | ".join(
            "-" if r["delivery_lag_us"] is None else f"{r['delivery_lag_us']:,.0f}" for r in runs
        )
        + " |"
    )
    return "\n".join(lines)


def engine_overhead(results: Results) -> str:
    """docs/performance.md: a step with the no-op decode at each number of sequences, then
    real steps and their share outside ``llama_decode`` (overhead.json)."""
    data = results["overhead"]
    model = _MODELS.get(data["settings"]["ours"]["noop_model"], "")
    lines = [
        "| decode | sequences | steps/s | us per step, median (mean) | us per sequence "
        "| not llama_decode |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    for row in data["noop"]:
        lines.append(
            f"| no-op ({model} vocabulary) | {row['sequences']} | {row['steps_per_s']:,.0f} "
            f"| {row['us_per_step']:,.0f} ({row['us_per_step_mean']:,.0f}) "
            f"| {row['us_per_sequence']:,.1f} | 100% |"
        )
    for row in data["real"]:
        lines.append(
            f"| {_MODELS.get(row['model'], row['model'])} | {row['sequences']} "
            f"| {row['steps_per_s']:,.1f} | {row['us_per_step']:,.0f} "
            f"({row['us_per_step_mean']:,.0f}) | {row['us_per_sequence']:,.1f} "
            f"| {row['not_decode_share']:.1%} |"
        )
    return "\n".join(lines)
