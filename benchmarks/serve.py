"""Tail latency of our HTTP server against llama.cpp's ``llama-server`` (and, for the record,
llama-cpp-python's own server): open-loop Poisson arrivals and closed-loop concurrency.

Every server is a separate process on 127.0.0.1 serving the same GGUF with the same threads,
slots and context per slot (``--no-repack`` for llama-server where ours turns repacking off);
the load generator (asyncio + httpx, in this process) streams chat completions with the end of
the answer banned, so every request generates exactly ``--max-tokens`` tokens. Levels run
alternately, ours then llama-server, so each is alone on the machine while measured and the
drift of a noisy machine hits both alike.

* closed loop: N clients, each sending its next request when the last one ends;
* open loop: requests arrive as a Poisson process at R requests per second (the same seeded
  arrival times for every server), whether or not earlier ones are done, so queueing shows
  up as it does in production. Ours gets a bounded queue (``--max-queued``) and answers 429
  past it; llama-server queues without bound.

Per level: throughput (generated tokens/s), time to first token and inter-token latency at
P50/P90/P99, errors, 429s and client timeouts.

    python benchmarks/serve.py --server .cache/llama-server/build/bin/llama-server

``--light N`` measures light load instead: one client sends N requests one after the other, a
pause of ``--light-pause`` seconds between them (an idle server each time), to ours and to
llama-server in turn request by request, each question new (numbered, so that neither side
answers from a cached prompt beyond the template's preamble); the figure is each side's P99 time
to first token (``serve_light.json``). A third side takes its turn too: ours with the prefill
layout off (``--prefill-block 0``: a prompt keeps every cached token it shares, as llama-server
does, and a cached repeat may then answer differently), which tells what the layout's guarantee
costs apart from the rest of the server::

    python benchmarks/serve.py --light 100 --json benchmarks/results/serve_light.json
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import socket
import subprocess
import sys
import time
from collections import Counter
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import httpx
import results

from llamacpp_integrations.engine.native.runner import cpu_advertises_amx
from llamacpp_integrations.models import read_gguf_info, resolve_model_path

QUESTIONS = [
    "What is the capital of France?",
    "Name three colours.",
    "Write a haiku about the sea.",
    "How do I boil an egg?",
    "Why is the sky blue?",
    "Tell me a fact about cats.",
    "What does a compiler do?",
    "Describe a tree in one sentence.",
]


@dataclass
class Sample:
    status: int  # HTTP status; 0 for a client-side failure (timeout, reset)
    tokens: int = 0
    ttft_s: float | None = None
    gaps_s: list[float] = field(default_factory=list)
    timed_out: bool = False
    error: str = ""


@dataclass
class Level:
    """What one load level measured on one server."""

    server: str
    mode: str  # "closed" or "open"
    load: float  # clients, or requests per second
    requests: int
    ok: int
    rejected_429: int
    errors: int
    timeouts: int
    wall_s: float
    tok_s: float
    ttft_ms: dict[str, float]
    itl_ms: dict[str, float]
    error_kinds: dict[str, int]


def percentiles(values: list[float]) -> dict[str, float]:
    if not values:
        return {"p50": float("nan"), "p90": float("nan"), "p99": float("nan")}
    ordered = sorted(values)

    def at(q: float) -> float:
        return ordered[min(len(ordered) - 1, int(q * len(ordered)))] * 1000

    return {"p50": at(0.50), "p90": at(0.90), "p99": at(0.99)}


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class Server:
    """One server process and how to talk to it."""

    def __init__(self, name: str, command: list[str], port: int, body_extra: dict[str, Any]):
        self.name, self.command, self.port, self.body_extra = name, command, port, body_extra
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> None:
        self.process = subprocess.Popen(
            self.command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
        )
        deadline = time.monotonic() + 180
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                sys.exit(f"{self.name} exited: {' '.join(self.command)}")
            try:
                if httpx.get(f"{self.url}/v1/models", timeout=2).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            time.sleep(0.25)
        self.stop()
        sys.exit(f"{self.name} did not come up")

    def stop(self) -> None:
        if self.process is not None:
            self.process.terminate()
            try:
                self.process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
            self.process = None


async def one_request(
    http: httpx.AsyncClient, server: Server, question: str, max_tokens: int
) -> Sample:
    body = {
        "model": "m",
        "messages": [{"role": "user", "content": question}],
        "max_tokens": max_tokens,
        "temperature": 0,
        "stream": True,
        **server.body_extra,
    }
    start = time.perf_counter()
    try:
        async with http.stream("POST", f"{server.url}/v1/chat/completions", json=body) as response:
            if response.status_code != 200:
                text = (await response.aread())[:120].decode(errors="replace")
                return Sample(response.status_code, error=f"{response.status_code}: {text}")
            sample, last = Sample(200), None
            async for line in response.aiter_lines():
                if not line.startswith("data: ") or line == "data: [DONE]":
                    continue
                event = json.loads(line[6:])
                choices = event.get("choices") or []
                if not choices or not choices[0].get("delta", {}).get("content"):
                    continue
                now = time.perf_counter()
                if last is None:
                    sample.ttft_s = now - start
                else:
                    sample.gaps_s.append(now - last)
                last = now
                sample.tokens += 1
            return sample
    except httpx.TimeoutException:
        return Sample(0, timed_out=True, error="timeout")
    except httpx.HTTPError as error:
        return Sample(0, error=type(error).__name__)


def summarize(server: str, mode: str, load: float, samples: list[Sample], wall_s: float) -> Level:
    ok = [s for s in samples if s.status == 200]
    return Level(
        server=server,
        mode=mode,
        load=load,
        requests=len(samples),
        ok=len(ok),
        rejected_429=sum(s.status == 429 for s in samples),
        errors=sum(s.status not in (200, 429) and not s.timed_out for s in samples),
        timeouts=sum(s.timed_out for s in samples),
        wall_s=wall_s,
        tok_s=sum(s.tokens for s in ok) / wall_s,
        ttft_ms=percentiles([s.ttft_s for s in ok if s.ttft_s is not None]),
        itl_ms=percentiles([g for s in ok for g in s.gaps_s]),
        error_kinds=dict(Counter(s.error for s in samples if s.error and s.status != 429)),
    )


async def closed_loop(server: Server, clients: int, per_client: int, max_tokens: int) -> Level:
    limits = httpx.Limits(max_connections=clients + 8, max_keepalive_connections=0)
    async with httpx.AsyncClient(timeout=120, limits=limits) as http:
        samples: list[Sample] = []

        async def client(index: int) -> None:
            for k in range(per_client):
                question = QUESTIONS[(index + k) % len(QUESTIONS)]
                samples.append(await one_request(http, server, question, max_tokens))

        start = time.perf_counter()
        await asyncio.gather(*(client(i) for i in range(clients)))
        wall = time.perf_counter() - start
    return summarize(server.name, "closed", clients, samples, wall)


async def open_loop(server: Server, rate: float, duration_s: float, max_tokens: int) -> Level:
    rng = random.Random(int(rate * 1000))  # the same arrivals for every server
    arrivals, t = [], 0.0
    while True:
        t += rng.expovariate(rate)
        if t > duration_s:
            break
        arrivals.append(t)
    limits = httpx.Limits(max_connections=len(arrivals) + 8, max_keepalive_connections=0)
    async with httpx.AsyncClient(timeout=120, limits=limits) as http:
        start = time.perf_counter()

        async def arrive(index: int, at: float) -> Sample:
            await asyncio.sleep(max(0.0, start + at - time.perf_counter()))
            return await one_request(http, server, QUESTIONS[index % len(QUESTIONS)], max_tokens)

        samples = await asyncio.gather(*(arrive(i, at) for i, at in enumerate(arrivals)))
        wall = time.perf_counter() - start
    return summarize(server.name, "open", rate, list(samples), wall)


async def light_load(
    servers: tuple[Server, ...], requests: int, pause_s: float, max_tokens: int
) -> list[Level]:
    """One client, one request at a time, the servers taking turns (in order, then reversed:
    none is always first after the pause)."""
    samples: dict[str, list[Sample]] = {server.name: [] for server in servers}
    walls = dict.fromkeys(samples, 0.0)
    limits = httpx.Limits(max_connections=4, max_keepalive_connections=0)
    async with httpx.AsyncClient(timeout=120, limits=limits) as http:
        for i in range(requests):
            question = f"Question {i + 1}. {QUESTIONS[i % len(QUESTIONS)]}"
            for server in servers if i % 2 == 0 else servers[::-1]:
                await asyncio.sleep(pause_s)
                start = time.perf_counter()
                samples[server.name].append(await one_request(http, server, question, max_tokens))
                walls[server.name] += time.perf_counter() - start
    return [summarize(name, "light", 1, samples[name], walls[name]) for name in samples]


def row(level: Level) -> str:
    t, i = level.ttft_ms, level.itl_ms
    return (
        f"| {level.server} | {level.tok_s:.0f} | {t['p50']:.0f} / {t['p90']:.0f} / {t['p99']:.0f} "
        f"| {i['p50']:.1f} / {i['p90']:.1f} / {i['p99']:.1f} | {level.ok}/{level.requests} "
        f"| {level.rejected_429} | {level.errors} | {level.timeouts} |"
    )


def ratio_row(ours: Level, peer: Level) -> str:
    def r(a: float, b: float) -> str:
        return f"{a / b:.2f}x" if b > 0 and a == a and b == b else "-"

    return (
        f"| {ours.server}/{peer.server} | {r(ours.tok_s, peer.tok_s)} "
        f"| P50 {r(ours.ttft_ms['p50'], peer.ttft_ms['p50'])}, "
        f"P99 {r(ours.ttft_ms['p99'], peer.ttft_ms['p99'])} "
        f"| P50 {r(ours.itl_ms['p50'], peer.itl_ms['p50'])}, "
        f"P99 {r(ours.itl_ms['p99'], peer.itl_ms['p99'])} | | | | |"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--server",
        default=os.environ.get("LLAMA_SERVER", ".cache/llama-server/build/bin/llama-server"),
    )
    parser.add_argument("--model", default="smollm2-135m")
    parser.add_argument("--max-tokens", type=int, default=32)
    parser.add_argument("--slots", type=int, default=16)
    parser.add_argument("--ctx", type=int, default=512)
    parser.add_argument("--max-queued", type=int, default=32)
    parser.add_argument("--closed", default="1,8,16,32,64")
    parser.add_argument("--rates", default="2,4,8,16", help="open-loop requests per second")
    parser.add_argument("--duration", type=float, default=8.0, help="seconds per open-loop rate")
    parser.add_argument("--llama-cpp-python", default="1,8", help="closed-loop levels, '' skips")
    parser.add_argument("--light", type=int, default=0, help="light load: one client, N requests")
    parser.add_argument("--light-pause", type=float, default=0.2, help="seconds between them")
    parser.add_argument("--json", default=None)
    args = parser.parse_args()
    if not Path(args.server).exists():
        sys.exit(f"no llama-server at {args.server}: run `make llama-server` first")
    model = str(resolve_model_path(args.model))
    eos = read_gguf_info(model).metadata.get("tokenizer.ggml.eos_token_id")
    no_eos = {"logit_bias": {str(eos): -100}} if isinstance(eos, int) else {}
    threads = os.cpu_count() or 1
    python = sys.executable

    ours_port, peer_port, lcp_port = free_port(), free_port(), free_port()
    ours = Server(
        "ours",
        [python, "-m", "llamacpp_integrations.cli", "serve", model, "--port", str(ours_port),
         "--slots", str(args.slots), "--ctx", str(args.ctx), "--threads", str(threads),
         "--max-queued", str(args.max_queued), "--log-level", "warning",
         "--no-idle-realign"],  # the peer's turn would share the CPU with that work
        ours_port,
        no_eos,
    )  # fmt: skip
    peer_command = [
        args.server, "-m", model, "--host", "127.0.0.1", "--port", str(peer_port),
        "-np", str(args.slots), "-c", str(args.slots * args.ctx), "-t", str(threads),
        "-tb", str(threads), "-cb", "--no-webui", "-fa", "off", "--no-kv-unified",
    ]  # fmt: skip
    if cpu_advertises_amx():
        peer_command.append("--no-repack")
    peer = Server("llama-server", peer_command, peer_port, {**no_eos, "ignore_eos": True})
    lcp = Server(
        "llama-cpp-python",
        [python, "-m", "llama_cpp.server", "--model", model, "--host", "127.0.0.1",
         "--port", str(lcp_port), "--n_threads", str(threads), "--n_ctx", str(args.ctx),
         "--interrupt_requests", "False"],
        lcp_port,
        no_eos,
    )  # fmt: skip

    if args.light:
        command = [str(lcp_port) if arg == str(ours_port) else arg for arg in ours.command]
        loose = Server("ours (layout off)", [*command, "--prefill-block", "0"], lcp_port, no_eos)
        light(args, (ours, loose, peer), model, threads)
        return
    levels: list[tuple[Level, Level]] = []
    extra: list[Level] = []
    closed = [int(x) for x in args.closed.split(",") if x]
    rates = [float(x) for x in args.rates.split(",") if x]
    try:
        ours.start()
        peer.start()
        for server in (ours, peer):  # warm-up: first prompts, page cache, allocator
            asyncio.run(closed_loop(server, 2, 1, 8))
        for clients in closed:
            per_client = max(2, 16 // clients)
            pair = tuple(
                asyncio.run(closed_loop(s, clients, per_client, args.max_tokens))
                for s in (ours, peer)
            )
            levels.append(pair)  # type: ignore[arg-type]
            print(f"closed {clients}: done", file=sys.stderr)
        for rate in rates:
            pair = tuple(
                asyncio.run(open_loop(s, rate, args.duration, args.max_tokens))
                for s in (ours, peer)
            )
            levels.append(pair)  # type: ignore[arg-type]
            print(f"open {rate}/s: done", file=sys.stderr)
    finally:
        ours.stop()
        peer.stop()
    lcp_levels = [int(x) for x in args.llama_cpp_python.split(",") if x]
    if lcp_levels:
        try:
            lcp.start()
            asyncio.run(closed_loop(lcp, 1, 1, 8))
            for clients in lcp_levels:
                extra.append(
                    asyncio.run(closed_loop(lcp, clients, max(2, 16 // clients), args.max_tokens))
                )
        finally:
            lcp.stop()

    print("# Our server vs llama-server, tail latency (streamed chat completions)\n")
    print(
        f"- {Path(model).name}, {threads} threads, {args.slots} slots of {args.ctx} tokens, "
        f"greedy, {args.max_tokens} tokens per request; ours: max {args.max_queued} queued"
    )
    print(f"- AMX advertised: {cpu_advertises_amx()} (repacking off on both sides if so)")
    print("- TTFT and ITL in ms as P50 / P90 / P99\n")
    header = "| server | tok/s | TTFT ms | ITL ms | ok | 429 | errors | timeouts |"
    rule = "|---|---:|---:|---:|---:|---:|---:|---:|"
    for o, p in levels:
        label = f"{int(o.load)} concurrent" if o.mode == "closed" else f"{o.load:g} req/s Poisson"
        print(f"\n**{label}**\n\n{header}\n{rule}\n{row(o)}\n{row(p)}\n{ratio_row(o, p)}")
        if o.mode == "closed":
            match = next((e for e in extra if e.load == o.load), None)
            if match is not None:
                print(f"{row(match)}\n{ratio_row(o, match)}")
    failures = [
        (lv.server, lv.load, lv.error_kinds) for pair in levels for lv in pair if lv.error_kinds
    ]
    for server, load, kinds in failures + [
        (e.server, e.load, e.error_kinds) for e in extra if e.error_kinds
    ]:
        print(f"\n{server} errors at {load:g}: {kinds}")
    results.write(
        args.json,
        "serve",
        {
            "model": model,
            "threads": threads,
            "slots": args.slots,
            "ctx_per_slot": args.ctx,
            "max_tokens": args.max_tokens,
            "max_queued": args.max_queued,
            "open_loop_duration_s": args.duration,
            # Every side's command line, as run (python -m llamacpp_integrations.cli for ours).
            "ours_flags": results.server_flags(ours.command[2:], model),
            "llama_server_flags": results.server_flags(peer.command),
            "llama_cpp_python_flags": results.server_flags(lcp.command[2:]) if lcp_levels else None,
        },
        levels=[asdict(level) for pair in levels for level in pair] + [asdict(e) for e in extra],
    )


def light(args: argparse.Namespace, servers: tuple[Server, ...], model: str, threads: int) -> None:
    """The light-load mode (``--light``): every server up (ours, ours with the layout off,
    llama-server), one busy at a time."""
    ours, loose, peer = servers
    try:
        for server in servers:
            server.start()
        for server in servers:  # warm-up: first prompts, page cache, allocator
            asyncio.run(closed_loop(server, 1, 2, 8))
        levels = asyncio.run(light_load(servers, args.light, args.light_pause, args.max_tokens))
    finally:
        for server in servers:
            server.stop()
    print(f"# One client, {args.light} requests each, {args.light_pause:g} s apart\n")
    print("| server | tok/s | TTFT ms | ITL ms | ok | 429 | errors | timeouts |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|")
    print("\n".join(row(level) for level in levels))
    print(f"{ratio_row(levels[0], levels[2])}\n{ratio_row(levels[1], levels[2])}")
    results.write(
        args.json,
        "serve_light",
        {
            "model": model,
            "threads": threads,
            "requests_per_side": args.light,
            "pause_s": args.light_pause,
            "max_tokens": args.max_tokens,
            "order": "one client; the servers take turns request by request",
            "ours_flags": results.server_flags(ours.command[2:], model),
            "ours_layout_off_flags": results.server_flags(loose.command[2:], model),
            "llama_server_flags": results.server_flags(peer.command),
        },
        levels=[asdict(level) for level in levels],
    )


if __name__ == "__main__":
    main()
