"""The second wave: sixteen chats over one ~1,600-token system prompt, then sixteen more right
after (new questions; the system prompt cached), through ``ChatLlamaCpp.astream`` against
llama-server.

Each round starts a new session (a fresh first line in the system prompt, so the first wave
finds nothing cached), sends the sixteen first chats at once, and, as soon as all have answered,
the sixteen next ones at once. Greedy answers of ``--max-tokens`` tokens. Sides take turns, one
llama.cpp process busy at a time: ours in this process (``EngineConfig`` defaults but
``n_seq_max`` and ``n_ctx_per_seq``; again with ``realign_when_idle=False``), each on an
engine of its own, closed before the next side starts, and llama-server in its
own process with its defaults except ``-np 16`` and ``-c`` (2,048 tokens a slot, as ours per
sequence). Figures: each wave's wall time and mean and P99 time to first token (from the wave's
start), ours' prompt tokens read and kept from the cache per wave (the usage each answer
reports), and ratios to llama-server.

    python benchmarks/second_wave.py --server .cache/llama-server/build/bin/llama-server \\
        --json benchmarks/results/second_wave.json
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import sys
import threading
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import results
from server_chat import stream_chat

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from llamacpp_integrations.engine import Engine, EngineConfig
from llamacpp_integrations.langchain import ChatLlamaCpp
from llamacpp_integrations.models import resolve_model_path
from tests.live.llama_servers import LlamaServerProcess

N = 16
N_CTX = 2048  # per sequence (slot), both sides
SYSTEM = " ".join(
    f"Rule {i}: a question about topic {i} goes to desk {i % 7}, which opens at {7 + i % 4} and "
    f"closes at {15 + i % 5}; answers cite section {i} and name the duty officer of shift {i % 3}."
    for i in range(36)
)
FIRST = [f"Which desk handles topic {i}, and when does it open?" for i in range(N)]
SECOND = [
    f"Who is the duty officer for topic {i + 5}, and which section applies?" for i in range(N)
]

Chat = list[tuple[str, str]]
# A side answers a wave of chats at once: each one's first-token time from the wave's start,
# and each one's prompt tokens kept from the cache (None where the side does not say).
Wave = Callable[[list[Chat]], Awaitable[tuple[list[float], list[int | None]]]]


def chats(session: str, questions: list[str]) -> list[Chat]:
    system = f"Session {session}. {SYSTEM}"
    return [[("system", system), ("user", q)] for q in questions]


def ours(llm: ChatLlamaCpp) -> Wave:
    async def one(chat: Chat, start: float) -> tuple[float, int | None]:
        first, cached = float("nan"), None
        async for chunk in llm.astream(chat):
            if first != first and chunk.content:
                first = time.perf_counter() - start
            usage = chunk.usage_metadata
            if usage is not None and "input_token_details" in usage:
                cached = usage["input_token_details"].get("cache_read")
        return first, cached

    async def wave(batch: list[Chat]) -> tuple[list[float], list[int | None]]:
        start = time.perf_counter()
        done = await asyncio.gather(*(one(chat, start) for chat in batch))
        return [first for first, _ in done], [cached for _, cached in done]

    return wave


def server(port: int, max_tokens: int) -> Wave:
    async def wave(batch: list[Chat]) -> tuple[list[float], list[int | None]]:
        firsts = [float("nan")] * len(batch)
        start = time.perf_counter()

        def run(i: int) -> None:
            messages = [{"role": role, "content": text} for role, text in batch[i]]
            for at, _ in stream_chat(port, messages, max_tokens):
                if firsts[i] != firsts[i]:
                    firsts[i] = at - start

        threads = [threading.Thread(target=run, args=(i,)) for i in range(len(batch))]
        for thread in threads:
            thread.start()

        def join() -> None:
            for thread in threads:
                thread.join()

        await asyncio.to_thread(join)
        return firsts, [None] * len(batch)

    return wave


def settle(engine: Engine) -> None:
    """Wait until the engine has stopped reading answers again (its steps stop counting), so
    the next side runs alone."""
    last = -1
    while engine.stats().steps != last:
        last = engine.stats().steps
        time.sleep(0.5)


async def one_round(wave: Wave, session: str, n: int) -> dict[str, dict[str, Any]]:
    figures: dict[str, dict[str, Any]] = {}
    for name, questions in (("cold", FIRST[:n]), ("warm", SECOND[:n])):
        start = time.perf_counter()
        firsts, cached = await wave(chats(session, questions))
        wall = time.perf_counter() - start
        ordered = sorted(firsts)
        figures[name] = {
            "wall_s": wall,
            "mean_ttft_s": statistics.mean(firsts),
            "p99_ttft_s": ordered[min(len(ordered) - 1, round(0.99 * (len(ordered) - 1)))],
            "cached_prompt_tokens": None if None in cached else sum(c or 0 for c in cached),
        }
    return figures


KEYS = ("wall_s", "mean_ttft_s", "p99_ttft_s")


async def ours_round(
    config: EngineConfig, session: str, n: int, max_tokens: int
) -> dict[str, dict[str, Any]]:
    """One round on an engine of its own: loaded and warmed up (not measured), both waves, then
    closed. Two engines in one process share its worker, and the first measured ran slower."""
    with Engine(config) as engine:
        await ChatLlamaCpp(engine=engine, max_tokens=4).ainvoke("Say hello.")
        settle(engine)
        llm = ChatLlamaCpp(engine=engine, temperature=0.0, max_tokens=max_tokens)
        return await one_round(ours(llm), session, n)


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--server", default=os.environ.get("LLAMACPP_INTEGRATIONS_LLAMA_SERVER"))
    parser.add_argument("--model", default="smollm2-135m")
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--max-tokens", type=int, default=64)
    parser.add_argument("--chats", type=int, default=N, help=f"chats a wave (at most {N})")
    parser.add_argument("--json", default=None)
    args = parser.parse_args()
    model = resolve_model_path(args.model)
    threads = os.cpu_count() or 1
    process = None
    if args.server and Path(args.server).exists():
        process = LlamaServerProcess(
            Path(args.server), model, threads=threads, slots=N, n_ctx_per_slot=N_CTX
        ).start()
    else:
        print("no llama-server (--server): ours only", file=sys.stderr)
    base: dict[str, Any] = {"model": str(model), "n_seq_max": N, "n_ctx_per_seq": N_CTX}
    variants = ("ours", "ours, no idle realign")
    seen: dict[str, list[dict[str, dict[str, Any]]]] = {name: [] for name in variants}
    if process is not None:
        seen["llama-server"] = []
    configs = {
        "ours": EngineConfig(**base),
        "ours, no idle realign": EngineConfig(**base, realign_when_idle=False),
    }
    try:
        for r in range(args.rounds):
            for name in seen:
                session = f"{r}-{name}"
                if name in configs:  # its own engine, alone in this process, closed after
                    row = await ours_round(configs[name], session, args.chats, args.max_tokens)
                else:
                    assert process is not None  # "llama-server" is a side only with one
                    wave = server(process.port, args.max_tokens)
                    row = await one_round(wave, session, args.chats)
                seen[name].append(row)
                print(
                    f"round {r + 1}, {name}: cold {row['cold']['wall_s']:.1f} s, "
                    f"warm {row['warm']['wall_s']:.1f} s",
                    flush=True,
                )
    finally:
        if process is not None:
            process.close()

    figures = {
        name: {
            case: {key: statistics.median(run[case][key] for run in runs) for key in KEYS}
            | {"cached_prompt_tokens": runs[-1][case]["cached_prompt_tokens"]}
            for case in ("cold", "warm")
        }
        for name, runs in seen.items()
    }
    names = list(figures)
    n = args.chats
    print(f"\n## {n} chats over one system prompt, then {n} more ({args.max_tokens} tokens)\n")
    print("| wave | figure | " + " | ".join(names) + " |")
    print("|---|---|" + "---:|" * len(names))
    for case in ("cold", "warm"):
        for key in KEYS:
            cells = [f"{figures[n][case][key]:.2f}" for n in names]
            print(f"| {case} | {key} | " + " | ".join(cells) + " |")
    report: dict[str, Any] = {"figures": figures, "runs": seen}
    if process is not None:
        for name in variants:
            ratios = {
                f"{case} {key}": figures[name][case][key] / figures["llama-server"][case][key]
                for case in ("cold", "warm")
                for key in ("wall_s", "mean_ttft_s")
            }
            report.setdefault("ratios", {})[name] = ratios
            print(
                f"\n{name} / llama-server: " + ", ".join(f"{k} {v:.2f}x" for k, v in ratios.items())
            )
    results.write(
        args.json,
        "second_wave",
        {
            "model": args.model,
            "threads": threads,
            "rounds": args.rounds,
            "n": args.chats,
            "n_seq_max": N,
            "max_tokens": args.max_tokens,
            "adapter": "ChatLlamaCpp.astream, temperature 0",
            "ours": {
                "n_seq_max": N,
                "n_ctx_per_seq": N_CTX,
                "rest": "EngineConfig defaults",
            },
            "ours, no idle realign": {"realign_when_idle": False},
            "llama_server_flags": results.server_flags(process.command) if process else None,
        },
        **report,
    )


if __name__ == "__main__":
    asyncio.run(main())
