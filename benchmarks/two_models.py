"""One model's decode beside a second model's engine in one process (``make bench-two-models``).

A RAG application holds a chat model and an embedding model; each engine's worker is a thread
with its own OpenMP team. This measures the chat model's one-stream decode alone, then with a
second model's engine loaded, then after that engine served one request and sat idle: under
libgomp's own settings its teams together outnumber the CPUs and every barrier sleeps, and the
engine's spin settings (``engine/openmp_env.py``) are what keeps the decode at its pace.

Each side runs in a fresh process, since libgomp reads its settings once, as it loads:

* ``ours``: the engine as it comes;
* ``libgomp``: ``GOMP_SPINCOUNT=300000`` (libgomp's default spin) set beforehand, so the engine
  leaves libgomp's settings as they are.

The sides take turns for ``--repeat`` rounds; the figures are medians of the rounds' medians of
``llama_decode`` per token (SmolLM2-135M, one greedy stream of 128 tokens, 3 per phase).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from dataclasses import replace
from typing import Any

import results
from step_timing import DecodeLog

from llamacpp_integrations.engine import (
    ChatMessage,
    ChatRequest,
    CompletionRequest,
    Engine,
    EngineConfig,
    SamplingParams,
)
from llamacpp_integrations.engine.openmp_env import SPIN_SETTINGS
from llamacpp_integrations.models import resolve_model_path

# Each side's environment for the child process, and what it is. The engine's spin count set by
# hand (libgomp's default too) makes the engine leave libgomp's settings alone.
DEFAULT_SPIN = {"GOMP_SPINCOUNT": SPIN_SETTINGS["GOMP_SPINCOUNT"]}
SIDES: dict[str, tuple[dict[str, str], str]] = {
    "ours": ({}, "the engine as it comes"),
    "libgomp": (DEFAULT_SPIN, "libgomp's settings (GOMP_SPINCOUNT=300000 set)"),
}
PHASES = {
    "alone": "alone",
    "loaded": "second model loaded",
    "served": "second model served one request, idle since",
}


def child(chat_model: str, second_model: str, streams: int) -> dict[str, list[float]]:
    """In this process: the chat model's median ``llama_decode`` per token, ``streams`` times
    in each phase."""

    def config(name: str) -> EngineConfig:
        return EngineConfig(
            model=str(resolve_model_path(name)), n_seq_max=1, realign_when_idle=False
        )

    request = ChatRequest(
        messages=[ChatMessage(role="user", content="Write a long story about a robot.")],
        max_tokens=128,
        sampling=SamplingParams(temperature=0.0),
    )
    out: dict[str, list[float]] = {}

    def measure(phase: str) -> None:
        for _ in range(streams):
            log = DecodeLog()
            with log.recording():
                list(chat.stream(request))
            steady = [decode.llama_decode_s for decode, _ in log.steady(1)]
            out.setdefault(phase, []).append(statistics.median(steady) * 1e3)

    with Engine(config(chat_model)) as chat:
        list(chat.stream(replace(request, max_tokens=4)))  # warm-up
        measure("alone")
        with Engine(config(second_model)) as second:
            measure("loaded")
            list(second.stream(CompletionRequest(prompt="Once upon a time", max_tokens=16)))
            time.sleep(0.5)
            measure("served")
    return out


def run_side(side: str, args: argparse.Namespace) -> dict[str, list[float]]:
    env = {k: v for k, v in os.environ.items() if k not in SPIN_SETTINGS}
    env.update(SIDES[side][0])
    command = [sys.executable, __file__, "--child", "--chat", args.chat, "--second", args.second]
    done = subprocess.run(
        [*command, "--streams", str(args.streams)],
        env=env,
        capture_output=True,
        text=True,
        check=True,
    )
    found: dict[str, list[float]] = json.loads(done.stdout.strip().splitlines()[-1])
    return found


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--chat", default="smollm2-135m")
    parser.add_argument("--second", default="gemma3-270m")
    parser.add_argument("--repeat", type=int, default=3, help="rounds, the sides taking turns")
    parser.add_argument("--streams", type=int, default=3, help="streams per phase")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--json", default=None, help="also write the results to this file")
    args = parser.parse_args()
    if args.child:
        print(json.dumps(child(args.chat, args.second, args.streams)))
        return
    rounds: dict[str, dict[str, list[float]]] = {side: {} for side in SIDES}
    for r in range(args.repeat):
        for side in SIDES:
            for phase, values in run_side(side, args).items():
                rounds[side].setdefault(phase, []).append(statistics.median(values))
        print(f"round {r + 1} of {args.repeat}", file=sys.stderr)
    sides: list[dict[str, Any]] = []
    for side, phases in rounds.items():
        medians = {phase: statistics.median(values) for phase, values in phases.items()}
        alone = medians["alone"]
        sides.append(
            {
                "side": side,
                "label": SIDES[side][1],
                "env": SIDES[side][0],
                "decode_ms": medians,
                "rounds_ms": phases,
                "slowdown": {phase: value / alone for phase, value in medians.items()},
            }
        )
    print(f"{'side':>10} " + " ".join(f"{title:>46}" for title in PHASES.values()))
    for row in sides:
        cells = [
            f"{row['decode_ms'][phase]:.2f} ms ({row['slowdown'][phase]:.2f}x)" for phase in PHASES
        ]
        print(f"{row['side']:>10} " + " ".join(f"{cell:>46}" for cell in cells))
    results.write(
        args.json,
        "two_models",
        {
            "chat_model": args.chat,
            "second_model": args.second,
            "streams_per_phase": args.streams,
            "repeat": args.repeat,
            "measure": "median llama_decode per token, one greedy stream of 128 tokens",
            "phases": PHASES,
            "engine": "n_seq_max=1, realign_when_idle=False, EngineConfig defaults otherwise",
        },
        sides=sides,
    )


if __name__ == "__main__":
    main()
