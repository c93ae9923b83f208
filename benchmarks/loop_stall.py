"""How long the asyncio event loop stalls while concurrent ``ainvoke`` calls run.

A heartbeat task sleeps 1 ms at a time and records how late each wake-up is; the longest gap
is the longest stretch in which the loop could not run anything else (a web server could not
answer, a UI could not repaint). N ``ChatLlamaCpp.ainvoke`` calls, each on its own prompt, start
at once, for N in ``--levels``. Prompts differ so no request is served from another's cache:
each has its template rendered and its prompt tokenized.

Reported per level, over ``--repeat`` runs: the longest gap of any run and the 99th percentile
of every run's gaps together (what a page may call the maximum and the P99), the median over
the runs of each run's longest gap and of its P99 (the figures of the first results), the
median wall time, and each run's own figures. Nothing is asserted; this is a report (timings
are not tested).

Run from the repository root, with ``LLAMACPP_INTEGRATIONS_MODELS`` pointing at the models::

    python benchmarks/loop_stall.py [--model smollm2-135m] [--levels 8,16] [--repeat 3]
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import time
from typing import Any

import results
from langchain_core.messages import HumanMessage, SystemMessage

from llamacpp_integrations.langchain import ChatLlamaCpp

SYSTEM = (
    "You are a concise assistant. Answer in one short sentence. "
    "If you do not know the answer, say so plainly."
)
TOPICS = [
    "rivers", "mountains", "owls", "bread", "glass", "copper", "tides", "comets",
    "maple trees", "lighthouses", "violins", "bees", "deserts", "glaciers", "kites", "salt",
]  # fmt: skip


async def _heartbeat(gaps: list[float], stop: asyncio.Event) -> None:
    last = time.perf_counter()
    while not stop.is_set():
        await asyncio.sleep(0.001)
        now = time.perf_counter()
        gaps.append(now - last - 0.001)
        last = now


def percentile(ordered: list[float], fraction: float) -> float:
    return ordered[int(fraction * (len(ordered) - 1))]


async def one_level(llm: ChatLlamaCpp, n: int, round_index: int) -> tuple[list[float], float]:
    """Every heartbeat gap and the wall time (seconds) for ``n`` concurrent calls."""
    gaps: list[float] = []
    stop = asyncio.Event()
    ticker = asyncio.create_task(_heartbeat(gaps, stop))
    await asyncio.sleep(0.05)  # let the heartbeat settle
    gaps.clear()
    start = time.perf_counter()
    prompts = [
        [SystemMessage(SYSTEM), HumanMessage(f"Round {round_index}: tell me about {topic}.")]
        for topic in TOPICS[:n]
    ]
    await asyncio.gather(*(llm.ainvoke(p) for p in prompts))
    wall = time.perf_counter() - start
    stop.set()
    await ticker
    return gaps, wall


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--model", default="smollm2-135m")
    parser.add_argument("--levels", default="8,16")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--max-tokens", type=int, default=32)
    parser.add_argument("--json", default=None, help="also write the results to this file")
    args = parser.parse_args()
    levels = [int(x) for x in args.levels.split(",")]
    llm = ChatLlamaCpp(
        model=args.model, temperature=0.0, max_tokens=args.max_tokens, n_seq_max=max(levels)
    )
    await llm.ainvoke("warm up")  # loads the model; not measured
    print(f"{'concurrent':>10} {'longest ms':>11} {'p99 ms':>7} {'wall s':>7}")
    round_index = 0
    rows: list[dict[str, Any]] = []
    for n in levels:
        runs = []
        every_gap: list[float] = []
        for _ in range(args.repeat):
            round_index += 1
            gaps, wall = await one_level(llm, n, round_index)
            every_gap += gaps
            runs.append(
                {
                    "max_gap_ms": max(gaps) * 1000,
                    "p99_gap_ms": percentile(sorted(gaps), 0.99) * 1000,
                    "wall_s": wall,
                }
            )
        row = {
            "concurrent": n,
            "longest_gap_ms": max(every_gap) * 1000,
            "p99_all_gaps_ms": percentile(sorted(every_gap), 0.99) * 1000,
            # The first results' figures, kept under their names: medians over the runs.
            "max_gap_ms": statistics.median(r["max_gap_ms"] for r in runs),
            "p99_gap_ms": statistics.median(r["p99_gap_ms"] for r in runs),
            "wall_s": statistics.median(r["wall_s"] for r in runs),
            "runs": runs,
        }
        print(
            f"{n:>10} {row['longest_gap_ms']:>11.1f} {row['p99_all_gaps_ms']:>7.1f} "
            f"{row['wall_s']:>7.2f}"
        )
        rows.append(row)
    settings = {
        "model": args.model,
        "adapter": "ChatLlamaCpp.ainvoke, temperature 0",
        "n_seq_max": max(levels),
        "levels": levels,
        "max_tokens": args.max_tokens,
        "repeat": args.repeat,
        "heartbeat_ms": 1,
    }
    results.write(args.json, "loop_stall", settings, levels=rows)


if __name__ == "__main__":
    asyncio.run(main())
