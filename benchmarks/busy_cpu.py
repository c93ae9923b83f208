"""One stream while other programs come and go on the same cores: a fixed thread count against
the engine's own (``n_threads=None``, which follows the machine's load).

A laptop or a shared server runs other work beside the model. llama.cpp's decode waits for its
slowest thread at every barrier, so when another process keeps a core busy, a thread per core
is the worst count there is. Each side runs in a fresh process with the CPUs of this one, and
streams greedy SmolLM2 tokens through ``Engine.astream`` in three phases, one request each:

1. ``quiet``: nothing else runs;
2. ``busy``: ``--neighbours`` processes spin on this process's CPUs from the request's start;
3. ``quiet_again``: they were stopped ``--pause`` seconds before it, the engine idle meanwhile
   (a request that comes after a build has ended, say; ``--pause 0``: right before it).

Every side and every neighbour runs in a session of its own, as programs started apart do (a
terminal each, a service each): where Linux groups a session's tasks for the scheduler
(autogroup, on by default in desktop kernels; services and containers get cgroups of their
own, shared the same way), it shares the CPUs between the groups first, and a decode thread
on a core the other group wants gets a third of it.

Sides: ``fixed`` (``n_threads`` = the engine's default count, written out: it never changes),
``default`` (``n_threads=None``: ``engine/worker/thread_governor.py`` drops threads while the
cores are busy and brings them back once they are idle), and with ``--server``, llama.cpp's
``llama-server`` on the same count (one slot, streamed over loopback, ``ignore_eos``).

Ours (``fixed``, ``default``) then also embed ``EMBED_TEXTS`` texts with a fresh engine of the
same side, quiet and then beside the neighbours, as an indexing job would on a busy machine
(llama-server is not asked: it serves embeddings only when started for them).

Reported per side and phase, medians over ``--rounds`` (sides alternate their order each
round): decode tokens/s after the first token and tokens/s over the whole request, its first
token's wait included (a request still running after ``--phase-seconds`` ends there), and the
threads the engine decoded on at the phase's end; for
``default``, how long after the neighbours started the count dropped, and after they stopped,
rose; the seconds each embedding took. Linux only (elsewhere the count never moves). Nothing is
asserted.

    python benchmarks/busy_cpu.py --json benchmarks/results/busy_cpu.json
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import subprocess
import sys
import time
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import results
from cpu_limit import busy_neighbours
from server_chat import stream_chat

SIDES = ("fixed", "default", "llama_server")
PHASES = ("quiet", "busy", "quiet_again")
STORY = "Write a long story about a lighthouse."
EMBED_TEXTS = [
    f"Lighthouse number {i} stands on a rock by the sea, and its keeper writes. " * 4
    for i in range(16)
]


def _rates(start: float, arrivals: list[tuple[float, int]]) -> dict[str, float]:
    """From (time, tokens) per chunk of a request sent at ``start``: decode tokens/s after the
    first chunk, and tokens/s over the whole request (its first token's wait included)."""
    tokens = sum(n for _, n in arrivals)
    return {
        "tok_s": (tokens - arrivals[0][1]) / (arrivals[-1][0] - arrivals[0][0]),
        "wall_tok_s": tokens / (arrivals[-1][0] - start),
    }


def _server_phases(
    binary: str, tokens: int, neighbours: int, cap_s: float, pause: float
) -> dict[str, Any]:
    """The phases against llama-server on the engine's default count, fixed."""
    from llamacpp_integrations.engine.cpu_budget import read_cpu_budget
    from llamacpp_integrations.engine.native.runner import cpu_advertises_amx
    from llamacpp_integrations.models import resolve_model_path

    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    from tests.live.llama_servers import LlamaServerProcess

    target = read_cpu_budget().threads
    extra = ("-fa", "off", "--no-repack") if cpu_advertises_amx() else ("-fa", "off")
    model = resolve_model_path("smollm2-135m")
    server = LlamaServerProcess(
        Path(binary), Path(model), threads=target, slots=1, n_ctx_per_slot=4096, extra=extra
    ).start()

    def stream(n: int) -> dict[str, Any]:
        messages = [{"role": "user", "content": STORY}]
        arrivals: list[tuple[float, int]] = []
        start = time.perf_counter()
        for t, _ in stream_chat(server.port, messages, n, ignore_eos=True):
            arrivals.append((t, 1))  # llama-server streams a token per chunk
            if t - arrivals[0][0] > cap_s:
                break  # closes the connection: the server stops the request
        return _rates(start, arrivals) | {
            "threads_at_end": target,
            "threads_changed_after_s": None,
        }

    try:
        stream(4)  # warm-up
        out = {"target": target, "quiet": stream(tokens)}
        with busy_neighbours(neighbours, own_session=True):
            out["busy"] = stream(2 * tokens)
        time.sleep(pause)
        out["quiet_again"] = stream(2 * tokens)
    finally:
        server.close()
    return out


async def _phases(
    side: str, tokens: int, neighbours: int, cap_s: float, pause: float
) -> dict[str, Any]:
    from llamacpp_integrations.engine import ChatRequest, Engine, EngineConfig, SamplingParams
    from llamacpp_integrations.engine.cpu_budget import read_cpu_budget

    target = read_cpu_budget().threads
    threads = target if side == "fixed" else None
    config = EngineConfig(model="smollm2-135m", n_threads=threads, realign_when_idle=False)
    engine = await asyncio.to_thread(Engine, config)

    def request(n: int) -> ChatRequest:
        return ChatRequest(
            messages=[{"role": "user", "content": STORY}],
            sampling=SamplingParams(temperature=0.0),
            max_tokens=n,
            ignore_eos=True,
        )

    async def stream(n: int) -> dict[str, Any]:
        """One request: its decode rate, and when (seconds after its start) the engine's
        thread count first differed from what it was at the start."""
        start = time.perf_counter()
        before = engine.stats().decode_threads
        arrivals: list[tuple[float, int]] = []
        changed_after = None
        async for chunk in engine.astream(request(n)):
            arrivals.append((time.perf_counter(), len(chunk.token_ids)))
            if changed_after is None and engine.stats().decode_threads != before:
                changed_after = arrivals[-1][0] - start
            if arrivals[-1][0] - arrivals[0][0] > cap_s:
                break  # closes the stream: the engine cancels the request
        return _rates(start, arrivals) | {
            "threads_at_end": engine.stats().decode_threads,
            "threads_changed_after_s": changed_after,
        }

    try:
        async for _ in engine.astream(request(4)):  # warm-up: first decode, page cache
            pass
        out = {"target": target, "quiet": await stream(tokens)}
        with busy_neighbours(neighbours, own_session=True):
            out["busy"] = await stream(2 * tokens)
        await asyncio.sleep(pause)
        out["quiet_again"] = await stream(2 * tokens)
    finally:
        await asyncio.to_thread(engine.close)
    out["embed"] = await asyncio.to_thread(_embed_phases, config, neighbours, 10 * cap_s)
    return out


def _embed_phases(config: Any, neighbours: int, cap_s: float) -> dict[str, Any]:
    """Seconds to embed ``EMBED_TEXTS``, quiet and beside the neighbours, by a fresh engine
    (its count not yet dropped by a chat); ``None`` past ``cap_s``."""
    from llamacpp_integrations.engine import Engine
    from llamacpp_integrations.errors import RequestTimeoutError

    engine = Engine(config)

    def seconds() -> float | None:
        start = time.perf_counter()
        try:
            engine.embed(EMBED_TEXTS, timeout=cap_s)
        except RequestTimeoutError:
            return None
        return time.perf_counter() - start

    try:
        engine.embed(["warm-up"])
        out: dict[str, Any] = {"quiet_s": seconds()}
        with busy_neighbours(neighbours, own_session=True):
            out["busy_s"] = seconds()
        out["threads_at_end"] = engine.stats().decode_threads
    finally:
        engine.close()
    return out


def _median_or_none(values: Iterable[float | None]) -> float | None:
    """The median; ``None`` where any value is (a side past its cap)."""
    listed = list(values)
    if any(value is None for value in listed):
        return None
    return statistics.median(v for v in listed if v is not None)


def run_side(
    side: str, tokens: int, neighbours: int, server: str | None, cap_s: float, pause: float
) -> dict[str, Any]:
    command = [sys.executable, __file__, "--child", side, "--tokens", str(tokens)]
    command += ["--phase-seconds", str(cap_s), "--pause", str(pause)]
    command += ["--neighbours", str(neighbours)] + (["--server", server] if server else [])
    # A session of its own, as llama-server's: the model runs apart from the neighbours.
    done = subprocess.run(
        command, capture_output=True, text=True, timeout=900, check=False, start_new_session=True
    )
    if done.returncode != 0:
        sys.exit(f"the {side!r} process failed:\n{done.stderr[-4000:]}")
    measured: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return measured


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--tokens", type=int, default=256, help="the quiet phase's; busy: twice")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--neighbours", type=int, default=1, help="busy processes in phase 2")
    parser.add_argument("--server", default=None, help="a llama-server binary: a third side")
    parser.add_argument(
        "--phase-seconds", type=float, default=30.0,
        help="a phase's request ends after this long, its tokens/s from what came (a side that "
        "collapses beside a busy process would otherwise take minutes)",
    )  # fmt: skip
    parser.add_argument(
        "--pause", type=float, default=2.0,
        help="seconds between the neighbours' stop and the quiet_again request",
    )  # fmt: skip
    parser.add_argument("--json", default=None, help="also write the results to this file")
    parser.add_argument("--child", choices=SIDES, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child == "llama_server":
        out = _server_phases(
            args.server, args.tokens, args.neighbours, args.phase_seconds, args.pause
        )
        print(json.dumps(out))
        return
    if args.child:
        out = asyncio.run(
            _phases(args.child, args.tokens, args.neighbours, args.phase_seconds, args.pause)
        )
        print(json.dumps(out))
        return
    if not sys.platform.startswith("linux"):
        print("the engine follows the machine's load on Linux only", file=sys.stderr)
        sys.exit(0)
    sides = SIDES if args.server else SIDES[:2]
    runs: dict[str, list[dict[str, Any]]] = {side: [] for side in sides}
    for r in range(args.rounds):
        for side in sides if r % 2 == 0 else tuple(reversed(sides)):
            runs[side].append(
                run_side(
                    side, args.tokens, args.neighbours, args.server, args.phase_seconds, args.pause
                )
            )
        print(f"round {r + 1} of {args.rounds}", file=sys.stderr)
    phases = {
        side: {
            phase: {
                "tok_s": statistics.median(run[phase]["tok_s"] for run in runs[side]),
                "wall_tok_s": statistics.median(run[phase]["wall_tok_s"] for run in runs[side]),
                "threads_at_end": statistics.median(
                    run[phase]["threads_at_end"] for run in runs[side]
                ),
            }
            for phase in PHASES
        }
        for side in sides
    }

    def ratios_over(peer: str) -> dict[str, float]:
        return {
            f"{phase}{suffix}": statistics.median(
                d[phase][figure] / p[phase][figure]
                for d, p in zip(runs["default"], runs[peer], strict=True)
            )
            for phase in PHASES
            for figure, suffix in (("tok_s", ""), ("wall_tok_s", "_wall"))
        }

    ratios = ratios_over("fixed")
    over_server = ratios_over("llama_server") if args.server else None
    reaction = {
        f"{phase}_s": statistics.median(
            run[phase]["threads_changed_after_s"]
            for run in runs["default"]
            if run[phase]["threads_changed_after_s"] is not None
        )
        if any(run[phase]["threads_changed_after_s"] is not None for run in runs["default"])
        else None
        for phase in ("busy", "quiet_again")
    }
    print("\n| side | phase | tok/s | tok/s over the request | threads at the end |")
    print("|---|---|---:|---:|---:|")
    for side, rows in phases.items():
        for phase, row in rows.items():
            print(
                f"| {side} | {phase} | {row['tok_s']:.1f} | {row['wall_tok_s']:.1f} | "
                f"{row['threads_at_end']:g} |"
            )
    print("\ndefault / fixed, tokens/s (median of the rounds' ratios):")
    for phase, ratio in ratios.items():
        print(f"  {phase}: {ratio:.2f}x")
    if over_server is not None:
        print("default / llama-server, tokens/s:")
        for phase, ratio in over_server.items():
            print(f"  {phase}: {ratio:.2f}x")
    print(f"default's count changed after (s, median): {reaction}")
    embed = {
        side: {
            figure: _median_or_none(run["embed"][figure] for run in runs[side])
            for figure in ("quiet_s", "busy_s", "threads_at_end")
        }
        for side in ("fixed", "default")
    }
    print(f"embedding {len(EMBED_TEXTS)} texts, seconds (median): {embed}")
    settings = {
        "cpus": len(os.sched_getaffinity(0)),
        "threads": runs["fixed"][0]["target"],
        "neighbours": f"{args.neighbours} spinning processes, in the busy phase only",
        "pause_s": args.pause,
        "model": "smollm2-135m",
        "tokens": {"quiet": args.tokens, "busy": 2 * args.tokens, "quiet_again": 2 * args.tokens},
        "rounds": args.rounds,
        "phase_seconds": f"a phase's request ends after {args.phase_seconds:g} s at most",
        "request": "Engine.astream, greedy, ignore_eos, after a 4-token warm-up",
        "embedding": f"Engine.embed of {len(EMBED_TEXTS)} texts of about 70 tokens, by a fresh "
        "engine of the side after its chat phases, quiet then beside the neighbours; None: "
        f"past {10 * args.phase_seconds:g} s",
        "sides": {
            "fixed": "n_threads = the default's count, written out",
            "default": "None",
            "llama_server": "llama-server -t/-tb the default's count, -np 1, -c 4096, -fa off"
            if args.server
            else "not run (no --server)",
        },
        "figures": "medians over the rounds; tok_s: after the first token; wall_tok_s: over the "
        "request, from its sending; ratios: median of each round's default / the peer "
        "(*_wall: of wall_tok_s)",
    }
    results.write(
        args.json,
        "busy_cpu",
        settings,
        phases=phases,
        default_over_fixed=ratios,
        default_over_llama_server=over_server,
        default_changed_after=reaction,
        embedding=embed,
        runs=runs,
    )


if __name__ == "__main__":
    main()
