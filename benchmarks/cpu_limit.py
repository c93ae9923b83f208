"""One stream in a container with a CPU limit: the default thread count against every CPU seen.

A container's CPU limit (Docker's ``--cpus``, a Kubernetes pod's ``limits.cpu``) leaves the
CPUs a process sees as they are: the engine's old default counted them. This benchmark makes a
real cgroup with ``--quota`` CPUs' worth of time per 100 ms period (v2's ``cpu.max`` where its
cpu controller is on, else v1's ``cpu.cfs_quota_us``), and in it, one side after the other, a
fresh process streams ``--tokens`` greedy tokens of SmolLM2 through ``Engine.astream`` with:

* ``every_cpu``: ``n_threads`` = the CPUs the process may run on (the old default);
* ``default``: ``n_threads=None``, which reads the cgroup's limit (``engine/cpu_budget.py``).

Each process also runs a heartbeat on its event loop. ``--neighbours N`` keeps N processes
spinning outside the cgroup throughout, as a shared host's other work would (the results are
then named ``cpu_limit_busy``). Reported per side, medians over ``--rounds`` (each round runs
both sides, the order reversed every other round): decode tokens/s (after the first token),
the longest wait between two tokens, the event loop's longest gap, and the threads the engine
chose. Linux only, and it needs the right to make a
cgroup (root); elsewhere it says so and stops (with status 0 under ``--skip-without-cgroup``,
as ``make bench-report`` runs it). Nothing is asserted.

    python benchmarks/cpu_limit.py --json benchmarks/results/cpu_limit.json
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import itertools
import json
import os
import statistics
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import results
from heartbeat import heartbeat

SIDES = ("every_cpu", "default")
CGROUPS = Path("/sys/fs/cgroup")


@contextlib.contextmanager
def cpu_limited_cgroup(cpus: float, *, skip: bool) -> Iterator[tuple[Path, str]]:
    """A new cgroup allowed ``cpus`` CPUs per 100 ms period: its ``cgroup.procs`` and its
    version (``"v2"`` or ``"v1"``). Removed after. Where none can be made: SystemExit, with
    status 0 when ``skip`` (``make bench-report`` goes on without this one)."""
    quota = str(int(cpus * 100_000))
    name = f"llamacpp-bench-{uuid.uuid4().hex[:8]}"
    control = CGROUPS / "cgroup.subtree_control"
    if control.exists() and "cpu" in control.read_text(encoding="utf-8").split():
        version, place, limits = "v2", CGROUPS / name, {"cpu.max": f"{quota} 100000"}
    else:
        version, place = "v1", CGROUPS / "cpu" / name
        limits = {"cpu.cfs_period_us": "100000", "cpu.cfs_quota_us": quota}
    try:
        place.mkdir()
    except OSError as error:
        print(f"cannot make a cgroup at {place} ({error.strerror}): run as root", file=sys.stderr)
        sys.exit(0 if skip else 1)
    try:
        for file, value in limits.items():
            (place / file).write_text(value, encoding="utf-8")
        yield place / "cgroup.procs", version
    finally:
        place.rmdir()


@contextlib.contextmanager
def busy_neighbours(count: int, *, own_session: bool = False) -> Iterator[None]:
    """``count`` processes spinning outside the cgroup for the block: the other work of a host
    that a container shares. ``own_session``: in a session of their own, as another program
    started elsewhere (a terminal, a service) runs; where Linux groups each session's tasks
    (autogroup), the scheduler then shares the CPU between the sessions first."""
    command = [sys.executable, "-c", "while True: pass"]
    spinning = [subprocess.Popen(command, start_new_session=own_session) for _ in range(count)]
    try:
        yield
    finally:
        for process in spinning:
            process.kill()
            process.wait()


def run_side(procs: Path, side: str, tokens: int) -> dict[str, Any]:
    """One fresh process in the cgroup streaming ``tokens`` tokens as ``side``."""

    command = [sys.executable, __file__, "--child", side, "--tokens", str(tokens)]
    command += ["--join", str(procs)]
    done = subprocess.run(command, capture_output=True, text=True, timeout=900, check=False)
    if done.returncode != 0:
        sys.exit(f"the {side!r} process failed:\n{done.stderr[-4000:]}")
    measured: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return measured


async def _stream(tokens: int, threads: int | None) -> dict[str, Any]:
    from llamacpp_integrations.engine import ChatRequest, Engine, EngineConfig, SamplingParams
    from llamacpp_integrations.engine.cpu_budget import read_cpu_budget

    config = EngineConfig(model="smollm2-135m", n_threads=threads, realign_when_idle=False)
    engine = await asyncio.to_thread(Engine, config)

    def request(text: str, n: int) -> ChatRequest:
        return ChatRequest(
            messages=[{"role": "user", "content": text}],
            sampling=SamplingParams(temperature=0.0),
            max_tokens=n,
            ignore_eos=True,
        )

    try:
        async for _ in engine.astream(request("Hi", 4)):  # warm-up: first decode, page cache
            pass
        gaps: list[float] = []
        stop = asyncio.Event()
        beat = asyncio.create_task(heartbeat(gaps, stop))
        arrivals: list[tuple[float, int]] = []
        story = request("Write a long story about a lighthouse.", tokens)
        async for chunk in engine.astream(story):
            arrivals.append((time.perf_counter(), len(chunk.token_ids)))
        stop.set()
        await beat
    finally:
        await asyncio.to_thread(engine.close)
    times = [t for t, _ in arrivals]
    after_first = sum(n for _, n in arrivals[1:])
    return {
        "threads": config.threads,
        "budget": vars(read_cpu_budget()),
        "tok_s": after_first / (times[-1] - times[0]),
        "longest_token_wait_ms": max(b - a for a, b in itertools.pairwise(times)) * 1000,
        "longest_loop_gap_ms": max(gaps) * 1000,
    }


def child(side: str, tokens: int, procs: str) -> None:
    """One side's stream, in the cgroup whose ``cgroup.procs`` is ``procs`` (joined first,
    before the engine or its threads exist)."""
    Path(procs).write_text(str(os.getpid()), encoding="utf-8")
    threads = len(os.sched_getaffinity(0)) if side == "every_cpu" else None
    print(json.dumps(asyncio.run(_stream(tokens, threads))))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quota", type=float, default=1.0, help="CPUs the cgroup allows")
    parser.add_argument("--tokens", type=int, default=128)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument(
        "--neighbours", type=int, default=0,
        help="busy processes outside the cgroup while it runs (a shared host's other work)",
    )  # fmt: skip
    parser.add_argument("--json", default=None, help="also write the results to this file")
    parser.add_argument(
        "--skip-without-cgroup", action="store_true", help="exit 0 where none can be made"
    )
    parser.add_argument("--child", choices=SIDES, help=argparse.SUPPRESS)
    parser.add_argument("--join", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(args.child, args.tokens, args.join)
        return
    if not sys.platform.startswith("linux"):
        print("cgroups are Linux's", file=sys.stderr)
        sys.exit(0 if args.skip_without_cgroup else 1)
    runs: dict[str, list[dict[str, Any]]] = {side: [] for side in SIDES}
    with (
        cpu_limited_cgroup(args.quota, skip=args.skip_without_cgroup) as (procs, version),
        busy_neighbours(args.neighbours),
    ):
        for r in range(args.rounds):
            for side in SIDES if r % 2 == 0 else tuple(reversed(SIDES)):
                runs[side].append(run_side(procs, side, args.tokens))
            print(f"round {r + 1} of {args.rounds}", file=sys.stderr)
    figures = ("tok_s", "longest_token_wait_ms", "longest_loop_gap_ms")
    medians = {
        side: {f: statistics.median(run[f] for run in runs[side]) for f in figures}
        | {"threads": runs[side][0]["threads"]}
        for side in SIDES
    }
    every, default = runs["every_cpu"], runs["default"]
    ratio = statistics.median(d["tok_s"] / e["tok_s"] for d, e in zip(default, every, strict=True))
    print("\n| side | threads | tok/s | longest wait between tokens | longest loop gap |")
    print("|---|---:|---:|---:|---:|")
    for side, row in medians.items():
        print(
            f"| {side} | {row['threads']} | {row['tok_s']:.1f} | "
            f"{row['longest_token_wait_ms']:.1f} ms | {row['longest_loop_gap_ms']:.1f} ms |"
        )
    print(f"\ndefault / every_cpu, tokens/s (median of the rounds' ratios): {ratio:.2f}x")
    settings = {
        "cgroup": f"{version}, {args.quota:g} CPUs per 100 ms period",
        "neighbours": f"{args.neighbours} busy processes outside the cgroup throughout",
        "cpus_seen": len(os.sched_getaffinity(0)),
        "model": "smollm2-135m",
        "tokens": args.tokens,
        "rounds": args.rounds,
        "request": "Engine.astream, greedy, ignore_eos, one request after a 4-token warm-up",
        "sides": {"every_cpu": "n_threads = the CPUs the process may run on", "default": "None"},
        "figures": "medians over the rounds; default_over_every_cpu: median of each round's ratio",
    }
    results.write(
        args.json,
        "cpu_limit_busy" if args.neighbours else "cpu_limit",
        settings,
        sides=medians,
        default_over_every_cpu=ratio,
        runs=runs,
    )


if __name__ == "__main__":
    main()
