"""Flash attention on the CPU, off against on, as the context fills.

Run by ``make bench-flash-attention``.

The engine leaves flash attention off on the CPU (``EngineConfig.flash_attention=None`` with no
layer offloaded and a stream per sequence); llama-server's own default turns it on wherever the
device supports it. This measures what that choice costs or saves, with llama-bench (built from
the sources the installed llama-cpp-python compiled, so the same kernels the engine runs): one
sequence's decode (tg64) and a 512-token prompt read (pp512), each after ``--depths`` tokens
already in the cache, with ``-fa 0`` and ``-fa 1`` in turn.

Each round runs both settings for each model, in the opposite order from the round before (the
machine's speed drifts); the figures are medians over ``--rounds`` rounds, and the ratio is the
median of each round's on / off, so that a slow round moves both sides of it.

Run from the repository root, with ``LLAMACPP_INTEGRATIONS_MODELS`` pointing at the models::

    python benchmarks/flash_attention_cpu.py \\
        --llama-bench .cache/llama-server/build/bin/llama-bench \\
        [--models smollm2-135m,gemma3-270m] [--depths 0,1024,4096] [--rounds 3] [--json out.json]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
from pathlib import Path
from typing import Any

import llamabench
import results

from llamacpp_integrations.models import resolve_model_path

SETTINGS = {"off": "0", "on": "1"}
"""llama-bench's ``-fa`` value for each side."""


def bench_flags(threads: int, depths: list[int], fa: str) -> list[str]:
    depth = ",".join(map(str, depths))
    return ["-p", "512", "-n", "64", "-d", depth, "-r", "1", "-t", str(threads), "-fa", fa,
            *llamabench.repack_off()]  # fmt: skip


def rates(binary: str, model: str, flags: list[str]) -> dict[str, float]:
    """Tokens/s by test, ``"tg64 @ d1024"`` style, from one llama-bench process."""
    found: dict[str, float] = {}
    for test in llamabench.run(binary, model, flags):
        name = f"pp{test['n_prompt']}" if test["n_prompt"] else f"tg{test['n_gen']}"
        found[f"{name} @ d{test['n_depth']}"] = float(test["avg_ts"])
    return found


def measure_model(args: argparse.Namespace, name: str, depths: list[int]) -> dict[str, Any]:
    model = str(resolve_model_path(name))
    runs: dict[str, dict[str, list[float]]] = {side: {} for side in SETTINGS}
    for r in range(args.rounds):
        order = list(SETTINGS) if r % 2 == 0 else list(reversed(SETTINGS))
        for side in order:
            flags = bench_flags(args.threads, depths, SETTINGS[side])
            for test, rate in rates(args.llama_bench, model, flags).items():
                runs[side].setdefault(test, []).append(rate)
        print(f"  {Path(model).name}: round {r + 1} of {args.rounds}", file=sys.stderr)
    tests = list(runs["off"])
    on, off = runs["on"], runs["off"]
    return {
        "model": Path(model).name,
        "tok_s": {side: {t: statistics.median(runs[side][t]) for t in tests} for side in SETTINGS},
        "on_over_off": {
            t: statistics.median(a / b for a, b in zip(on[t], off[t], strict=True)) for t in tests
        },
        "runs": runs,
    }


def report(rows: list[dict[str, Any]]) -> None:
    print("\n| model | test | off tok/s | on tok/s | on / off |")
    print("|---|---|---:|---:|---:|")
    for row in rows:
        for test, ratio in row["on_over_off"].items():
            off, on = row["tok_s"]["off"][test], row["tok_s"]["on"][test]
            print(f"| {row['model']} | {test} | {off:.1f} | {on:.1f} | {ratio:.2f}x |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--models", default="smollm2-135m,gemma3-270m")
    parser.add_argument("--depths", default="0,1024,4096")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--threads", type=int, default=os.cpu_count() or 1)
    parser.add_argument("--llama-bench", required=True, help="a llama-bench binary")
    parser.add_argument("--json", default=None, help="also write the results to this file")
    args = parser.parse_args()
    if not Path(args.llama_bench).exists():
        sys.exit(f"no llama-bench at {args.llama_bench}: run `make llama-bench` first")
    depths = [int(d) for d in args.depths.split(",")]
    rows = [measure_model(args, name, depths) for name in args.models.split(",")]
    report(rows)
    settings = {
        "threads": args.threads,
        "depths": depths,
        "rounds": args.rounds,
        "llama_bench_flags": bench_flags(args.threads, depths, "<0 or 1>"),
        "order": "both settings each round, in turn, the order reversed every other round",
        "figures": "tok_s: medians over the rounds; on_over_off: median of each round's ratio",
    }
    results.write(args.json, "flash_attention_cpu", settings, models=rows)


if __name__ == "__main__":
    main()
