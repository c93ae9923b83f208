"""Admission's prefix lookup: the scheduler's prefix index against comparing every slot.

A prompt of 2,000 tokens is admitted against ``n`` slots of 2,000 cached tokens each that share
its first 1,500 (one system prompt, different chats after it). The index walks the prompt's
blocks once; the scan it replaced compared the prompt with every slot, token by token. Also
timed: what the index costs to keep up while every slot grows a token per step.

Pure Python (no model): ``python benchmarks/prefix_lookup.py``.
"""

from __future__ import annotations

import argparse
import random
import time
from collections.abc import Callable

import results

from llamacpp_integrations.engine.batch import common_prefix
from llamacpp_integrations.engine.worker.scheduler import Scheduler


def _best_ms(run: Callable[[], object], repeat: int) -> float:
    best = float("inf")
    for _ in range(repeat):
        start = time.perf_counter()
        run()
        best = min(best, time.perf_counter() - start)
    return best * 1000


def measure(n_slots: int, *, length: int = 2000, shared: int = 1500, repeat: int = 20) -> dict:
    rng = random.Random(n_slots)
    system = [rng.randrange(50_000) for _ in range(shared)]
    scheduler = Scheduler(n_seq_max=n_slots, n_batch=512)
    for slot in scheduler.slots:
        slot.hold([*system, *(rng.randrange(50_000) for _ in range(length - shared))])
    prompt = [*system, *(rng.randrange(50_000) for _ in range(length - shared))]

    def scan() -> dict[int, int]:
        return {slot.seq_id: common_prefix(slot.cached, prompt) for slot in scheduler.slots}

    assert scheduler.index.shared(prompt) == scan()
    index_ms = _best_ms(lambda: scheduler.index.shared(prompt), repeat)
    scan_ms = _best_ms(scan, repeat)
    steps = 256

    def grow() -> None:
        for _ in range(steps):
            for slot in scheduler.slots:
                slot.extend((7,))
        for slot in scheduler.slots:
            slot.cut(length)

    upkeep_us = _best_ms(grow, 3) * 1000 / steps / n_slots
    return {
        "slots": n_slots,
        "index_ms": round(index_ms, 3),
        "scan_ms": round(scan_ms, 3),
        "index_over_scan": round(index_ms / scan_ms, 3),
        "upkeep_us_per_token": round(upkeep_us, 2),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--json", help="also write the rows to this file")
    args = parser.parse_args()
    rows = [measure(n) for n in (8, 16, 64)]
    print("slots  index ms  scan ms  index/scan  upkeep us/token")
    for row in rows:
        print(
            f"{row['slots']:>5}  {row['index_ms']:>8.3f}  {row['scan_ms']:>7.3f}"
            f"  {row['index_over_scan']:>9.3f}x  {row['upkeep_us_per_token']:>15.2f}"
        )
    settings = {"length": 2000, "shared": 1500, "model": "none (bookkeeping only)", "threads": 1}
    results.write(args.json, "prefix_lookup", settings, rows=rows)


if __name__ == "__main__":
    main()
