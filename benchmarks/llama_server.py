"""Our engine against llama.cpp's own C++ server (continuous batching, ``-np`` slots).

``llama-server`` is the reference for batched serving: same model, same prompts, same thread
count, greedy, every request runs to exactly ``--max-tokens`` (``ignore_eos``). Each level starts N
streaming requests at once (the server over HTTP on 127.0.0.1, ours through ``astream`` in this
process) and reports aggregate generated tokens/s and time to first token. The two never run at the
same time: runs alternate (``--repeat K`` reports the median of K each), and each side's threads
sleep while the other works.

The server binary is not part of the package; ``make llama-server`` builds it from the llama.cpp
sources vendored in llama-cpp-python's sdist (the same llama.cpp our engine runs). Where the CPU
advertises AMX the server gets ``--no-repack``, as ours turns repacking off there. By default the
server's settings mirror ours (one KV stream per slot, flash attention off); ``--server-defaults``
leaves them at the server's own defaults.

    python benchmarks/llama_server.py --server .cache/llama-server/llama-server
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import sys
import threading
import time
from collections.abc import Sequence
from dataclasses import asdict
from functools import partial
from pathlib import Path

import results

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from throughput import (
    QUESTIONS,
    WARMUP,
    BatchResult,
    alternate,
    ms,
    our_request,
    ours_batch_sync,
)

from llamacpp_integrations.engine import Engine, EngineConfig
from llamacpp_integrations.engine.native.runner import cpu_advertises_amx
from tests.live.llama_servers import LlamaServerProcess

PORT = 18123


def start_server(
    binary: str, model: str, threads: int, slots: int, n_ctx_per_seq: int, mirror: bool
) -> LlamaServerProcess:
    extra = ["-cb"]
    if mirror:  # our defaults: one KV stream per slot, flash attention off
        extra += ["-fa", "off", "--no-kv-unified"]
    if cpu_advertises_amx():
        extra.append("--no-repack")
    server = LlamaServerProcess(
        Path(binary), Path(model), port=PORT, threads=threads, slots=slots,
        n_ctx_per_slot=n_ctx_per_seq, extra=tuple(extra),
    )  # fmt: skip
    try:
        return server.start()
    except RuntimeError as error:
        server.close()
        sys.exit(str(error))


def server_request(question: str, max_tokens: int, start: float) -> tuple[int, float, float]:
    """Stream one chat completion; returns (tokens, first-token time, end time) from ``start``."""
    body = json.dumps(
        {
            "messages": [{"role": "user", "content": question}],
            "max_tokens": max_tokens,
            "temperature": 0,
            "ignore_eos": True,
            "stream": True,
            "stream_options": {"include_usage": True},
        }
    )
    connection = http.client.HTTPConnection("127.0.0.1", PORT, timeout=600)
    connection.request("POST", "/v1/chat/completions", body, {"Content-Type": "application/json"})
    response = connection.getresponse()
    first = None
    tokens = 0
    for raw in response:
        line = raw.decode("utf-8").strip()
        if not line.startswith("data: ") or line == "data: [DONE]":
            continue
        event = json.loads(line[6:])
        choices = event.get("choices") or []
        if first is None and choices and choices[0].get("delta", {}).get("content"):
            first = time.perf_counter() - start
        if event.get("usage"):
            tokens = event["usage"]["completion_tokens"]
    return tokens, first if first is not None else float("nan"), time.perf_counter() - start


def server_batch(questions: Sequence[str], max_tokens: int) -> BatchResult:
    """Every question at once, each on its own thread, to the server on ``PORT``."""
    n = len(questions)
    results: list[tuple[int, float, float]] = [(0, 0.0, 0.0)] * n
    start = time.perf_counter()

    def run(i: int) -> None:
        results[i] = server_request(questions[i], max_tokens, start)

    threads = [threading.Thread(target=run, args=(i,)) for i in range(n)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    ttfts = [first for _, first, _ in results]
    return BatchResult(
        tokens=sum(tokens for tokens, _, _ in results),
        wall_s=max(end for _, _, end in results),
        mean_ttft_s=sum(ttfts) / n,
        max_ttft_s=max(ttfts),
        first_ttft_s=ttfts[0],
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--server", default=os.environ.get("LLAMA_SERVER", ".cache/llama-server/llama-server")
    )
    parser.add_argument("--model", default="smollm2-135m")
    parser.add_argument("--max-tokens", type=int, default=128)
    parser.add_argument("--levels", default="1,4,8,16")
    parser.add_argument("--repeat", type=int, default=1)
    parser.add_argument(
        "--server-defaults",
        action="store_true",
        help="leave the server's KV layout and flash attention at its own defaults",
    )
    parser.add_argument("--json", default=None, help="also write the results to this file")
    args = parser.parse_args()
    if not Path(args.server).exists():
        sys.exit(f"no llama-server at {args.server}: run `make llama-server` first")
    levels = [int(x) for x in args.levels.split(",")]
    threads = os.cpu_count() or 1
    slots, n_ctx_per_seq = max(levels), 1024

    # Not realigning answers while idle: the peer's turn would share the CPU with that work.
    config = EngineConfig(
        model=args.model, n_seq_max=slots, n_ctx_per_seq=n_ctx_per_seq, realign_when_idle=False
    )
    measured: dict[int, tuple[BatchResult, BatchResult]] = {}
    mirror = not args.server_defaults
    with Engine(config) as engine:
        server = start_server(args.server, engine.info.path, threads, slots, n_ctx_per_seq, mirror)
        try:
            engine.generate(our_request(WARMUP, 8))
            server_request(WARMUP, 8, time.perf_counter())
            # Alternating, so the drift of a noisy machine hits both sides alike.
            for n in levels:
                measured[n] = alternate(
                    args.repeat,
                    partial(ours_batch_sync, engine, n, args.max_tokens),
                    partial(server_batch, QUESTIONS[:n], args.max_tokens),
                )
        finally:
            server.close()

    print("# Our engine (in-process) vs llama.cpp's llama-server (C++, HTTP), same llama.cpp\n")
    print(
        f"- {threads} threads, {slots} slots of {n_ctx_per_seq} tokens, greedy, "
        f"{args.max_tokens} tokens per request, repeat={args.repeat}"
    )
    print(f"- AMX advertised: {cpu_advertises_amx()} (repacking off on both sides if so)")
    print(
        "- server KV layout and flash attention: "
        + ("as ours (split, off)" if mirror else "its own defaults")
        + "\n"
    )
    print(
        "| concurrent | ours tok/s | llama-server tok/s | ratio | ours mean TTFT "
        "| server mean TTFT | tokens ours/server |"
    )
    print("|---:|---:|---:|---:|---:|---:|---:|")
    for n in levels:
        o, s = measured[n]
        print(
            f"| {n} | {o.tok_s:.1f} | {s.tok_s:.1f} | {o.tok_s / s.tok_s:.2f}x "
            f"| {ms(o.mean_ttft_s)} | {ms(s.mean_ttft_s)} | {o.tokens}/{s.tokens} |"
        )
    results.write(
        args.json,
        "llama_server",
        {
            "model": config.model,
            "threads": threads,
            "slots": slots,
            "n_ctx_per_seq": n_ctx_per_seq,
            "max_tokens": args.max_tokens,
            "repeat": args.repeat,
            "server_settings": "as ours (split KV, flash attention off)" if mirror else "defaults",
            "repacking_off": cpu_advertises_amx(),
            # Every side's settings, as run: ours (the rest EngineConfig's defaults) and the
            # server's command line.
            "ours": {
                "n_seq_max": slots,
                "n_ctx_per_seq": n_ctx_per_seq,
                "realign_when_idle": False,
                "rest": "EngineConfig defaults",
            },
            "llama_server_flags": results.server_flags(server.command),
        },
        levels=[
            {"concurrent": n, "ours": asdict(o), "server": asdict(s)}
            for n, (o, s) in measured.items()
        ],
    )


if __name__ == "__main__":
    main()
