"""How long the asyncio event loop stalls while concurrent calls run on a local model.

A heartbeat task sleeps 1 ms at a time and records how late each wake-up is; the longest gap
is the longest stretch in which the loop could not run anything else (a web server could not
answer, a UI could not repaint). N calls, each on its own prompt, start at once, for N in
``--levels``, through each of ``--adapters``: ``ainvoke`` (``ChatLlamaCpp.ainvoke``), ``astream``
(``ChatLlamaCpp.astream``, every chunk read on the loop) and ``llamaindex`` (LlamaIndex
``LlamaCpp.astream_chat``), one adapter after the other on one engine. Prompts differ so no
request is served from another's cache: each has its template rendered and its prompt tokenized.
The model is loaded before the heartbeat starts, by one call; the first measured run of each
adapter is its first concurrent one (the adapter's own first-use costs fall in it).

Each row also keeps the longest pass of Python's cyclic garbage collector per generation during
its runs (a pass holds the GIL throughout, so a long one is a loop gap whoever triggered it).

Reported per level, over ``--repeat`` runs: the longest gap of any run and the 99th percentile
of every run's gaps together (what a page may call the maximum and the P99), the median over
the runs of each run's longest gap and of its P99 (the figures of the first results), the
median wall time, and each run's own figures (with when its longest gap began, in seconds from
the start of the run's calls). Nothing is asserted; this is a report (timings
are not tested).

Run from the repository root, with ``LLAMACPP_INTEGRATIONS_MODELS`` pointing at the models::

    python benchmarks/loop_stall.py [--model smollm2-135m] [--levels 8,16] [--repeat 3] \
        [--adapters ainvoke,astream,llamaindex]

``--slow-callbacks`` also logs every callback that held the loop for 4 ms or more (asyncio's
debug mode, which slows the loop a little): what ran on the loop, as against a loop that waited
for the GIL or a CPU.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import logging
import statistics
import time
from collections.abc import Awaitable, Callable
from typing import Any

import results
from heartbeat import heartbeat
from langchain_core.messages import HumanMessage, SystemMessage
from llama_index.core.llms import ChatMessage
from loop_floor import DecodeThread, all_floor_calls

from llamacpp_integrations.engine import Engine, EngineConfig
from llamacpp_integrations.engine.worker.time_slice import DECODE_SLICE_NS
from llamacpp_integrations.langchain import ChatLlamaCpp
from llamacpp_integrations.llama_index import LlamaCpp
from llamacpp_integrations.models import resolve_model_path

SYSTEM = (
    "You are a concise assistant. Answer in one short sentence. "
    "If you do not know the answer, say so plainly."
)
TOPICS = [
    "rivers", "mountains", "owls", "bread", "glass", "copper", "tides", "comets",
    "maple trees", "lighthouses", "violins", "bees", "deserts", "glaciers", "kites", "salt",
]  # fmt: skip


def percentile(ordered: list[float], fraction: float) -> float:
    return ordered[int(fraction * (len(ordered) - 1))]


Call = Callable[[str], Awaitable[object]]


def adapters(engine: Engine, max_tokens: int) -> dict[str, Call]:
    """Each adapter's call of one question, on ``engine``."""
    chat = ChatLlamaCpp(engine=engine, temperature=0.0, max_tokens=max_tokens)
    index = LlamaCpp(engine=engine, temperature=0.0, max_tokens=max_tokens)

    def messages(question: str) -> list[SystemMessage | HumanMessage]:
        return [SystemMessage(SYSTEM), HumanMessage(question)]

    async def ainvoke(question: str) -> object:
        return await chat.ainvoke(messages(question))

    async def astream(question: str) -> object:
        return [chunk async for chunk in chat.astream(messages(question))]

    async def llamaindex(question: str) -> object:
        chats = [
            ChatMessage(role="system", content=SYSTEM),
            ChatMessage(role="user", content=question),
        ]
        return [response async for response in await index.astream_chat(chats)]

    return {"ainvoke": ainvoke, "astream": astream, "llamaindex": llamaindex}


class GcPasses:
    """How long each of the cyclic garbage collector's passes took (it holds the GIL for the
    whole pass, on whichever thread triggered it), by generation."""

    def __init__(self) -> None:
        self.seconds: dict[int, list[float]] = {0: [], 1: [], 2: []}
        self._start = 0.0
        gc.callbacks.append(self._on_pass)

    def _on_pass(self, phase: str, info: dict[str, int]) -> None:
        if phase == "start":
            self._start = time.perf_counter()
        else:
            self.seconds[info["generation"]].append(time.perf_counter() - self._start)

    def longest_ms(self) -> dict[str, float]:
        return {f"gen{g}": max(s, default=0.0) * 1000 for g, s in self.seconds.items()}

    def clear(self) -> None:
        for passes in self.seconds.values():
            passes.clear()


GC = GcPasses()


async def one_level(call: Call, n: int, round_index: int) -> tuple[list[float], float, float]:
    """Every heartbeat gap, the wall time (seconds) for ``n`` concurrent calls, and when the
    longest gap began (seconds from the calls' start)."""
    gaps: list[float] = []
    starts: list[float] = []
    stop = asyncio.Event()
    ticker = asyncio.create_task(heartbeat(gaps, stop, starts))
    await asyncio.sleep(0.05)  # let the heartbeat settle
    gaps.clear()
    starts.clear()
    start = time.perf_counter()
    questions = [f"Round {round_index}: tell me about {topic}." for topic in TOPICS[:n]]
    await asyncio.gather(*(call(q) for q in questions))
    wall = time.perf_counter() - start
    stop.set()
    await ticker
    longest = max(range(len(gaps)), key=gaps.__getitem__)
    return gaps, wall, starts[longest] - start


def summary(n: int, runs: list[dict[str, float]], every_gap: list[float]) -> dict[str, Any]:
    return {
        "concurrent": n,
        "longest_gap_ms": max(every_gap) * 1000,
        "longest_gap_at_s": max(runs, key=lambda run: run["max_gap_ms"])["max_gap_at_s"],
        "p99_all_gaps_ms": percentile(sorted(every_gap), 0.99) * 1000,
        # The first results' figures, kept under their names: medians over the runs.
        "max_gap_ms": statistics.median(r["max_gap_ms"] for r in runs),
        "p99_gap_ms": statistics.median(r["p99_gap_ms"] for r in runs),
        "wall_s": statistics.median(r["wall_s"] for r in runs),
        "runs": runs,
    }


async def measure(name: str, call: Call, n: int, repeat: int, round_index: int) -> dict[str, Any]:
    """One row: ``repeat`` runs of ``n`` concurrent calls, printed as it ends."""
    runs = []
    every_gap: list[float] = []
    GC.clear()
    for index in range(repeat):
        gaps, wall, longest_at = await one_level(call, n, round_index + index + 1)
        every_gap += gaps
        runs.append(
            {
                "max_gap_ms": max(gaps) * 1000,
                "max_gap_at_s": longest_at,
                "p99_gap_ms": percentile(sorted(gaps), 0.99) * 1000,
                "wall_s": wall,
            }
        )
    row = {
        "adapter": name,
        **summary(n, runs, every_gap),
        "longest_gc_pass_ms": GC.longest_ms(),
        "gc_passes": {f"gen{g}": len(s) for g, s in GC.seconds.items()},
    }
    print(
        f"{name:>17} {n:>10} {row['longest_gap_ms']:>11.1f} {row['p99_all_gaps_ms']:>7.1f} "
        f"{row['wall_s']:>7.2f}  longest gc pass {row['longest_gc_pass_ms']}"
    )
    return row


async def floors(
    args: argparse.Namespace, levels: list[int], threads: int, round_index: int
) -> list[dict[str, Any]]:
    """The rows of the floors (``loop_floor.py``), after the engine is closed: a bare decode
    thread of ``threads`` threads and ``n`` sequences, under nothing, then under each
    framework's stand-in model; then the bare thread again with the engine's long time slice."""
    rows = []
    loop = asyncio.get_running_loop()
    model = str(resolve_model_path(args.model))
    for n in levels:
        for time_slice, prefix in ((None, ""), (DECODE_SLICE_NS, "long-slice ")):
            decode = DecodeThread(model, n, threads, time_slice_ns=time_slice)
            decode.start(loop)
            try:
                calls = list(all_floor_calls(decode, args.max_tokens, SYSTEM))
                for name, call in calls if time_slice is None else calls[:1]:  # "decode" first
                    rows.append(
                        await measure(f"{prefix}{name} floor", call, n, args.repeat, round_index)
                    )
                    round_index += args.repeat
            finally:
                await asyncio.to_thread(decode.close)
    return rows


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--model", default="smollm2-135m")
    parser.add_argument("--levels", default="8,16")
    parser.add_argument("--adapters", default="ainvoke,astream,llamaindex")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--max-tokens", type=int, default=32)
    parser.add_argument(
        "--threads", type=int, default=None, help="decode threads (default: the engine's)"
    )
    parser.add_argument(
        "--no-floor", dest="floor", action="store_false", help="skip the floors (loop_floor.py)"
    )
    parser.add_argument("--slow-callbacks", action="store_true", help="log callbacks of 4 ms+")
    parser.add_argument("--json", default=None, help="also write the results to this file")
    args = parser.parse_args()
    levels = [int(x) for x in args.levels.split(",")]
    if args.slow_callbacks:
        loop = asyncio.get_running_loop()
        loop.set_debug(True)
        loop.slow_callback_duration = 0.004
        logging.basicConfig(level=logging.WARNING)
    # The engine is made off the loop, as the adapters' first call would make it.
    config = EngineConfig(model=args.model, n_seq_max=max(levels), n_threads=args.threads)
    engine = await asyncio.to_thread(Engine, config)
    calls = adapters(engine, args.max_tokens)
    await calls["ainvoke"]("warm up")  # the first decode; not measured
    print(f"{'adapter':>17} {'concurrent':>10} {'longest ms':>11} {'p99 ms':>7} {'wall s':>7}")
    round_index = 0
    rows: list[dict[str, Any]] = []
    for adapter in args.adapters.split(","):
        for n in levels:
            rows.append(await measure(adapter, calls[adapter], n, args.repeat, round_index))
            round_index += args.repeat
    await asyncio.to_thread(engine.close)
    if args.floor:
        rows += await floors(args, levels, config.threads, round_index)
    settings = {
        "model": args.model,
        "adapters": {
            "ainvoke": "ChatLlamaCpp.ainvoke",
            "astream": "ChatLlamaCpp.astream, every chunk read",
            "llamaindex": "LlamaIndex LlamaCpp.astream_chat, every response read",
        },
        "temperature": 0.0,
        "n_seq_max": max(levels),
        "levels": levels,
        "max_tokens": args.max_tokens,
        "repeat": args.repeat,
        "heartbeat_ms": 1,
        "engine": "EngineConfig defaults otherwise, one engine for every adapter",
    }
    # A run with a thread count of its own is a benchmark of its own (the report reads each
    # benchmark's latest results file by this name).
    name = "loop_stall" if args.threads is None else f"loop_stall_{args.threads}_threads"
    results.write(args.json, name, {**settings, "threads": config.threads}, levels=rows)


if __name__ == "__main__":
    asyncio.run(main())
