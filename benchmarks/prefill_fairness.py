"""Streams beside a long prompt: how long running answers pause while a ~4,000-token prompt is
read, and what bounding the prompt tokens per step costs that prompt's first token.

Four greedy streams run (256 tokens each, past end-of-text); once each has a few tokens, a
~4,000-token prompt arrives. Figures for the streams' gaps between chunks while that prompt is
being read (median, P99, longest), and the long prompt's time to first token. Sides take turns,
one llama.cpp process busy at a time: our engine with ``prefill_per_step`` at each value given
(``0``: none, the default), and llama-server in its own process (its defaults but
``-np`` and ``-c``) when ``--server`` names it.

    python benchmarks/prefill_fairness.py --server .cache/llama-server/build/bin/llama-server
"""

from __future__ import annotations

import argparse
import itertools
import os
import statistics
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import results
from server_chat import stream_chat

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from llamacpp_integrations.engine import (
    ChatMessage,
    ChatRequest,
    Engine,
    EngineConfig,
    SamplingParams,
)
from llamacpp_integrations.models import resolve_model_path
from tests.live.llama_servers import LlamaServerProcess

STREAMS = 4
STREAM_TOKENS = 256
N_CTX = 5120  # per sequence (slot), both sides: room for the long prompt
LONG = " ".join(
    f"Entry {i}: parcel {i * 7 % 101} left depot {i % 13} at {i % 24} hours, weighed {i % 50} kg "
    f"and went to town {i % 37}."
    for i in range(130)
)
SHORT = [
    f"Tell a long story about a lighthouse keeper called Ada, part {i}." for i in range(STREAMS)
]

# A side streams one chat: yields the time of each chunk that carries text.
Stream = Callable[[str, int], Iterator[float]]


def ours(engine: Engine) -> Stream:
    def stream(prompt: str, max_tokens: int) -> Iterator[float]:
        request = ChatRequest(
            messages=[ChatMessage(role="user", content=prompt)],
            max_tokens=max_tokens,
            sampling=SamplingParams(temperature=0.0),
            ignore_eos=True,
        )
        for chunk in engine.stream(request):
            if chunk.token_ids:
                yield time.perf_counter()

    return stream


def server(port: int) -> Stream:
    def stream(prompt: str, max_tokens: int) -> Iterator[float]:
        messages = [{"role": "user", "content": prompt}]
        for at, _ in stream_chat(port, messages, max_tokens, ignore_eos=True):
            yield at

    return stream


def one_round(stream: Stream, session: str) -> dict[str, float]:
    """The streams, the long prompt among them; gaps while it is read, and its first token.
    ``session`` opens the long prompt, so that no side finds it cached."""
    times: list[list[float]] = [[] for _ in range(STREAMS)]
    started = threading.Barrier(STREAMS + 1)

    def run(i: int) -> None:
        for n, at in enumerate(stream(SHORT[i], STREAM_TOKENS)):
            times[i].append(at)
            if n == 8:
                started.wait()

    threads = [threading.Thread(target=run, args=(i,)) for i in range(STREAMS)]
    for thread in threads:
        thread.start()
    started.wait()
    sent = time.perf_counter()
    first = next(stream(f"Log {session}. {LONG}", 1))
    for thread in threads:
        thread.join()
    gaps = [
        b - a
        for arrivals in times
        for a, b in itertools.pairwise(arrivals)
        if sent <= b and a <= first
    ]
    ordered = sorted(gaps)
    return {
        "long_ttft_s": first - sent,
        "gap_p50_ms": 1000 * statistics.median(ordered),
        "gap_p99_ms": 1000 * ordered[min(len(ordered) - 1, round(0.99 * (len(ordered) - 1)))],
        "gap_max_ms": 1000 * ordered[-1],
        "gaps": len(ordered),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--server", default=os.environ.get("LLAMACPP_INTEGRATIONS_LLAMA_SERVER"))
    parser.add_argument("--model", default="smollm2-135m")
    parser.add_argument("--steps", default="0,128", help="prefill_per_step values (0: no bound)")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--json", default=None)
    args = parser.parse_args()
    model = resolve_model_path(args.model)
    threads = os.cpu_count() or 1
    steps = [int(s) for s in args.steps.split(",")]
    names = {s: f"ours, {s} per step" if s else "ours, no bound" for s in steps}
    seen: dict[str, list[dict[str, float]]] = {name: [] for name in names.values()}
    process = None
    if args.server and Path(args.server).exists():
        process = LlamaServerProcess(
            Path(args.server), model, threads=threads, slots=STREAMS + 1, n_ctx_per_slot=N_CTX
        ).start()
        seen["llama-server"] = []
    try:
        with ExitStack() as stack:
            sides: dict[str, Stream] = {
                names[s]: ours(
                    stack.enter_context(
                        Engine(
                            EngineConfig(
                                model=str(model),
                                n_seq_max=STREAMS + 1,
                                n_ctx_per_seq=N_CTX,
                                n_threads=threads,
                                prefill_per_step=s or None,
                            )
                        )
                    )
                )
                for s in steps
            }
            if process is not None:
                sides["llama-server"] = server(process.port)
            for r in range(args.rounds):
                for name, stream in sides.items():
                    seen[name].append(one_round(stream, f"{r}-{name}"))
                    print(f"round {r + 1}, {name}: {seen[name][-1]}", flush=True)
    finally:
        if process is not None:
            process.close()
    figures = {
        name: {key: statistics.median(run[key] for run in runs) for key in runs[0]}
        for name, runs in seen.items()
    }
    print(f"\n## {STREAMS} streams while a {len(LONG)}-character prompt is read\n")
    keys = ("gap_p50_ms", "gap_p99_ms", "gap_max_ms", "long_ttft_s")
    print("| side | " + " | ".join(keys) + " |")
    print("|---|" + "---:|" * len(keys))
    for name, row in figures.items():
        print(f"| {name} | " + " | ".join(f"{row[k]:.2f}" for k in keys) + " |")
    report: dict[str, Any] = {"figures": figures}
    if "llama-server" in figures:
        server_row = figures["llama-server"]
        report["ratios"] = {
            name: {k: row[k] / server_row[k] for k in keys}
            for name, row in figures.items()
            if name != "llama-server"
        }
        for name, ratios in report["ratios"].items():
            print(
                f"{name} / llama-server: " + ", ".join(f"{k} {v:.2f}x" for k, v in ratios.items())
            )
    results.write(
        args.json,
        "prefill_fairness",
        {
            "model": args.model,
            "threads": threads,
            "rounds": args.rounds,
            "streams": STREAMS,
            # Every side, as run: ours (one engine per prefill_per_step) and the server.
            "ours": {"n_seq_max": STREAMS + 1, "n_ctx_per_seq": N_CTX, "prefill_per_step": steps},
            "llama_server_flags": results.server_flags(process.command) if process else None,
        },
        **report,
    )


if __name__ == "__main__":
    main()
