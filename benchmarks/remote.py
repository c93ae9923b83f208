"""Our LangChain adapter over llama-server (``RemoteEngine``, ``FleetEngine``) beside
``langchain_openai.ChatOpenAI`` on the same server, and a fleet's prompt-cache hit rate with
prefix affinity on and off.

Two llama-servers (SmolLM2 by default) start on loopback ports with one thread each: this
machine class has two cores, so two servers of two threads would oversubscribe it and measure
the contention instead. Three peers run the same prompts, greedy, ``--max-tokens`` each, N
streams at once (``astream``), alternating at every level:

* ``ChatOpenAI`` over server 1's ``/v1`` (the OpenAI-compatible route),
* ``ChatLlamaCpp(engine=RemoteEngine(server 1))`` (llama-server's native ``/completion``),
* ``ChatLlamaCpp(engine=FleetEngine([server 1, server 2]))``.

Reported: aggregate generated tokens/s and mean time to the first token, with ratios to
``ChatOpenAI`` (``--repeat K``: K rounds, the run with the median tokens/s kept). Then the
cache run: ``--prefixes`` distinct system prompts times ``--per-prefix`` questions, in a
shuffled order, four at a time, over the two-server fleet with affinity on and off (a fresh
prompt set for each, so neither inherits the other's cache). The servers keep their default
host-memory prompt cache (``--cache-ram``), so a prefix once seen stays cached on that server:
what affinity saves is the cold miss of each prefix on every further server that sees it. The
hit rate is cached prompt tokens over prompt tokens, from llama-server's own per-request counts.

    python benchmarks/remote.py --server .cache/llama-server/build/bin/llama-server
"""

from __future__ import annotations

import argparse
import asyncio
import os
import random
import statistics
import sys
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import results
from langchain_core.language_models import BaseChatModel
from langchain_core.messages import BaseMessage, HumanMessage
from langchain_openai import ChatOpenAI

from llamacpp_integrations.engine.types import ChatRequest, SamplingParams
from llamacpp_integrations.langchain import ChatLlamaCpp
from llamacpp_integrations.models import resolve_model_path
from llamacpp_integrations.remote import RemoteEngine
from llamacpp_integrations.remote.fleet import FleetEngine

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from tests.live.llama_servers import LlamaServerProcess

QUESTIONS = [
    "Why do leaves change colour in autumn?",
    "How does a lighthouse warn ships?",
    "What makes bread rise?",
    "Explain how a lock and key work.",
    "Why is the ocean salty?",
    "How do submarines dive and surface?",
    "What is the purpose of a fuse?",
    "How do owls see at night?",
    "Why does ice float on water?",
    "How is glass made?",
    "What does a compass point to, and why?",
    "How do trains stay on their tracks?",
    "Why do we hear thunder after lightning?",
    "How do solar panels make electricity?",
    "What keeps a kite in the air?",
    "How do earthworms help soil?",
]
THREADS = 1


@dataclass
class LevelResult:
    peer: str
    concurrent: int
    tokens: int
    wall_s: float
    tokens_per_s: float
    mean_ttft_s: float


async def one_stream(
    model: BaseChatModel, messages: list[BaseMessage], start: float
) -> tuple[int, float]:
    first = float("nan")
    tokens = 0
    async for chunk in model.astream(messages):
        if first != first and chunk.content:  # NaN until the first text
            first = time.perf_counter() - start
        usage = getattr(chunk, "usage_metadata", None)
        if usage:
            tokens = usage["output_tokens"]
    return tokens, first


async def run_level(peer: str, model: BaseChatModel, n: int, tag: str) -> LevelResult:
    # ``tag`` starts every question of a run: no peer finds the prompts of another one in the
    # server's cache (the template's opening, the same for all, is cached for everyone).
    start = time.perf_counter()
    outcomes = await asyncio.gather(
        *(
            one_stream(model, [HumanMessage(f"[{tag}] {QUESTIONS[i % len(QUESTIONS)]}")], start)
            for i in range(n)
        )
    )
    wall = time.perf_counter() - start
    tokens = sum(t for t, _ in outcomes)
    return LevelResult(
        peer=peer,
        concurrent=n,
        tokens=tokens,
        wall_s=wall,
        tokens_per_s=tokens / wall,
        mean_ttft_s=statistics.fmean(f for _, f in outcomes),
    )


def median_run(runs: list[LevelResult]) -> LevelResult:
    """The run with the median tokens/s (the lower one of an even count)."""
    ordered = sorted(runs, key=lambda r: r.tokens_per_s)
    return ordered[(len(ordered) - 1) // 2]


def system_prompt(run: str, i: int) -> str:
    # Distinct from the first token on, so no two prompts (or runs) share a cached prefix
    # beyond the template's own opening.
    return (
        f"[{run}-{i}] You are assistant number {i} of the {run} run. You answer questions "
        "about the natural world and everyday machines in two or three plain sentences, "
        "without lists, without headings and without repeating the question. When you are not "
        "sure, you say so briefly. Prefer concrete examples over abstractions, and metric units "
        f"over imperial ones. Your favourite number is {i * 7919 % 1000}."
    )


async def cache_run(
    urls: list[str], affinity: bool, prefixes: int, per_prefix: int
) -> dict[str, Any]:
    run = "affinity" if affinity else "spread"
    with FleetEngine(urls, affinity=affinity) as fleet:
        requests = [
            ChatRequest(
                messages=[
                    {"role": "system", "content": system_prompt(run, p)},
                    {"role": "user", "content": QUESTIONS[q % len(QUESTIONS)]},
                ],
                sampling=SamplingParams(temperature=0.0),
                max_tokens=8,
            )
            for q in range(per_prefix)
            for p in range(prefixes)
        ]
        # Arrivals in a random order (the same for both runs): in a fixed cycle through the
        # prompts, taking the least-loaded server in turn would pin every prompt to one server
        # by accident whenever the number of prompts is a multiple of the number of servers.
        random.Random(7).shuffle(requests)
        gate = asyncio.Semaphore(4)

        async def send(request: ChatRequest) -> None:
            async with gate:
                await fleet.agenerate(request)

        await asyncio.gather(*(send(r) for r in requests))
        stats = fleet.stats()
        return {
            "affinity": affinity,
            "requests": len(requests),
            "hit_rate": stats.cache_hit_rate,
            "servers": [
                {
                    "url": s.url,
                    "requests": s.requests,
                    "prompt_tokens": s.prompt_tokens,
                    "cached_prompt_tokens": s.cached_prompt_tokens,
                }
                for s in stats.servers
            ],
        }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--server", default=results.LLAMA_SERVER)
    parser.add_argument("--model", default="smollm2-135m")
    parser.add_argument("--max-tokens", type=int, default=64)
    parser.add_argument("--levels", default="1,4,8,16")
    parser.add_argument("--slots", type=int, default=16, help="llama-server slots (-np) each")
    parser.add_argument("--prefixes", type=int, default=16, help="system prompts, cache run")
    parser.add_argument("--per-prefix", type=int, default=4, help="questions per system prompt")
    parser.add_argument("--repeat", type=int, default=1, help="rounds; the median run is kept")
    parser.add_argument("--json", default=None, help="also write the results to this file")
    args = parser.parse_args()
    if not Path(args.server).exists():
        sys.exit(f"no llama-server at {args.server}: run `make llama-server` first")
    levels = [int(x) for x in args.levels.split(",")]
    model_path = resolve_model_path(args.model)
    servers = [
        LlamaServerProcess(Path(args.server), Path(model_path), threads=THREADS, slots=args.slots)
        for _ in range(2)
    ]
    try:
        for server in servers:
            server.start()
        urls = [server.url for server in servers]
        print(
            f"2 llama-servers, {THREADS} thread each (2 threads each would oversubscribe "
            f"{os.cpu_count()} cores), {args.slots} slots each, the server's own host prompt "
            f"cache (--cache-ram) on; {args.max_tokens} tokens per request, greedy"
        )
        table, cache = asyncio.run(measure(urls, levels, args))
    finally:
        for server in servers:
            server.close()
    print_tables(table, cache)
    results.write(
        args.json,
        "remote",
        {
            "model": args.model,
            "threads_per_server": THREADS,
            "slots_per_server": args.slots,
            "max_tokens": args.max_tokens,
            "levels": levels,
            "repeat": args.repeat,
            "prefixes": args.prefixes,
            "per_prefix": args.per_prefix,
            # Both llama-servers' command line, as run (ours and ChatOpenAI are their clients).
            "llama_server_flags": results.server_flags(servers[0].command),
        },
        levels=[asdict(r) for r in table],
        cache=cache,
    )


async def measure(
    urls: list[str], levels: list[int], args: argparse.Namespace
) -> tuple[list[LevelResult], list[dict[str, Any]]]:
    remote = RemoteEngine(urls[0])
    fleet = FleetEngine(urls)
    peers: dict[str, Callable[[], BaseChatModel]] = {
        "ChatOpenAI, 1 server": lambda: ChatOpenAI(
            base_url=f"{urls[0]}/v1",
            api_key="unused",  # type: ignore[arg-type]
            model="served",
            temperature=0,
            max_tokens=args.max_tokens,  # type: ignore[call-arg]
            stream_usage=True,
        ),
        "ours, 1 server": lambda: ChatLlamaCpp(
            engine=remote, temperature=0, max_tokens=args.max_tokens
        ),
        "ours, 2-server fleet": lambda: ChatLlamaCpp(
            engine=fleet, temperature=0, max_tokens=args.max_tokens
        ),
    }
    models = {name: make() for name, make in peers.items()}
    try:
        for p, model in enumerate(models.values()):  # connections, templates, every slot
            await run_level("warm-up", model, max(levels), f"w{p:02d}")
        runs: dict[tuple[str, int], list[LevelResult]] = {}
        for r in range(args.repeat):  # peers alternate at every level of every round
            for n in levels:
                for p, (name, model) in enumerate(models.items()):
                    result = await run_level(name, model, n, f"{r}{p}{n:02d}")
                    runs.setdefault((name, n), []).append(result)
        table = [median_run(results) for results in runs.values()]
        cache = [
            await cache_run(urls, affinity, args.prefixes, args.per_prefix)
            for affinity in (True, False)
        ]
    finally:
        fleet.close()
        remote.close()
    return table, cache


def print_tables(table: list[LevelResult], cache: list[dict[str, Any]]) -> None:
    baseline = {r.concurrent: r for r in table if r.peer.startswith("ChatOpenAI")}
    print()
    print(f"{'peer':<22} {'N':>3} {'tok/s':>8} {'x OpenAI':>9} {'TTFT ms':>8} {'x OpenAI':>9}")
    for r in table:
        base = baseline[r.concurrent]
        print(
            f"{r.peer:<22} {r.concurrent:>3} {r.tokens_per_s:>8.1f} "
            f"{r.tokens_per_s / base.tokens_per_s:>8.2f}x {r.mean_ttft_s * 1000:>8.0f} "
            f"{r.mean_ttft_s / base.mean_ttft_s:>8.2f}x"
        )
    print()
    print(f"{'fleet routing':<22} {'requests':>8} {'cache hit rate':>15}   per server (requests)")
    for run in cache:
        name = "prefix affinity" if run["affinity"] else "least-loaded"
        rate = run["hit_rate"]
        per_server = ", ".join(str(s["requests"]) for s in run["servers"])
        print(f"{name:<22} {run['requests']:>8} {rate:>15.1%}   {per_server}")
    on, off = (run["hit_rate"] for run in cache)
    if on and off:
        print(f"affinity / least-loaded hit rate: {on / off:.2f}x")


if __name__ == "__main__":
    main()
