"""How long the asyncio event loop stalls while concurrent ``ainvoke`` calls run.

A heartbeat task sleeps 1 ms at a time and records how late each wake-up is; the longest gap
is the longest stretch in which the loop could not run anything else (a web server could not
answer, a UI could not repaint). N ``ChatLlamaCpp.ainvoke`` calls, each on its own prompt, start
at once, for N in ``--levels``. Prompts differ so no request is served from another's cache:
each has its template rendered and its prompt tokenized.

Reported per level: the longest gap, the 99th percentile gap and the wall time, median over
``--repeat`` runs. Nothing is asserted; this is a report (timings are not tested).

Run from the repository root, with ``LLAMACPP_INTEGRATIONS_MODELS`` pointing at the models::

    python benchmarks/loop_stall.py [--model smollm2-135m] [--levels 8,16] [--repeat 3]
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import time

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


async def one_level(llm: ChatLlamaCpp, n: int, round_index: int) -> tuple[float, float, float]:
    """Longest gap, p99 gap and wall time (seconds) for ``n`` concurrent calls."""
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
    ordered = sorted(gaps)
    p99 = ordered[int(0.99 * (len(ordered) - 1))]
    return max(gaps), p99, wall


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
    print(f"{'concurrent':>10} {'max gap ms':>11} {'p99 gap ms':>11} {'wall s':>7}")
    round_index = 0
    rows: list[dict[str, float]] = []
    for n in levels:
        runs = []
        for _ in range(args.repeat):
            round_index += 1
            runs.append(await one_level(llm, n, round_index))
        worst = statistics.median(r[0] for r in runs)
        p99 = statistics.median(r[1] for r in runs)
        wall = statistics.median(r[2] for r in runs)
        print(f"{n:>10} {worst * 1000:>11.1f} {p99 * 1000:>11.1f} {wall:>7.2f}")
        rows.append({"concurrent": n, "max_gap_ms": worst * 1000, "p99_gap_ms": p99 * 1000})
    results.write(
        args.json,
        "loop_stall",
        {"model": args.model, "max_tokens": args.max_tokens, "repeat": args.repeat},
        levels=rows,
    )


if __name__ == "__main__":
    asyncio.run(main())
