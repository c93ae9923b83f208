"""The engine's own cost per step, apart from the kernels: would it keep a GPU busy?

Two measurements, both of greedy streams of ``--tokens`` tokens started together through
``Engine.astream`` (``ignore_eos``), on ``EngineConfig`` defaults otherwise (idle re-reads off):

* **no-op decode**: the worker runs with ``FixedLogitsContext`` in place of its generation context
  (``engine/native/fixed_logits.py``): every decode fills llama.cpp's batch and returns, every
  logits row is one fixed distribution. What a step then costs is the engine's own work:
  planning, batch building, sampling, detokenizing, stop strings, stats, the channel to the
  caller and the caller's side of it. At each of ``--levels`` sequences: steps per second,
  microseconds per step and per sequence. A step is the worker's whole turn, from one decode's
  start to the next one's, over the decodes where every sequence decodes one token.
* **real decode**: the same at ``--real-level`` sequences on each of ``--models``, timing
  ``llama_decode`` inside each turn: the share of a step that is not ``llama_decode``.

The issue's targets: under 1 ms per step at 16 sequences with the no-op decode, at most 5% of a
real step on SmolLM2. Nothing is asserted here; the figures go to ``--json``
(``benchmarks/results/overhead.json``), rendered in docs/performance.md.

    python benchmarks/bench_overhead.py --json benchmarks/results/overhead.json
    python benchmarks/bench_overhead.py --quick        # a check that it runs: fewer tokens
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
from collections.abc import Sequence
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
from llamacpp_integrations.engine.native.fixed_logits import FixedLogitsContext
from llamacpp_integrations.engine.worker import cells

MODELS = ("smollm2-135m", "gemma3-270m")


def request(engine: Engine, index: int, tokens: int) -> ChatRequest | CompletionRequest:
    question = f"Question {index}: say something."
    common: dict[str, Any] = {
        "sampling": SamplingParams(temperature=0),
        "max_tokens": tokens,
        "ignore_eos": True,
    }
    if engine.info.chat_template is None:  # gemma3-270m's file has none: raw text
        return CompletionRequest(prompt=question, **common)
    return ChatRequest(messages=[ChatMessage(role="user", content=question)], **common)


async def run_streams(engine: Engine, n: int, tokens: int) -> int:
    """``n`` streams at once; how many tokens came back."""

    async def one(index: int) -> int:
        count = 0
        async for chunk in engine.astream(request(engine, index, tokens)):
            count += len(chunk.token_ids)
        return count

    return sum(await asyncio.gather(*(one(i) for i in range(n))))


def measure(engine: Engine, n: int, tokens: int) -> dict[str, Any]:
    """One warm-up round, then a recorded one: the steady steps of ``n`` sequences."""
    asyncio.run(run_streams(engine, n, min(tokens, 8)))
    log = DecodeLog()
    with log.recording():
        produced = asyncio.run(run_streams(engine, n, tokens))
    steady = log.steady(n)
    if not steady:
        raise SystemExit(f"no steady decode steps of {n} sequences were seen")
    turns = [turn for _, turn in steady]
    decodes = [decode.llama_decode_s for decode, _ in steady]
    turn_s = sum(turns)
    return {
        "sequences": n,
        "tokens": produced,
        "steps": len(steady),
        "steps_per_s": len(turns) / turn_s,
        "us_per_step": statistics.median(turns) * 1e6,
        "us_per_step_mean": turn_s / len(turns) * 1e6,
        "us_per_sequence": statistics.median(turns) * 1e6 / n,
        "llama_decode_ms": statistics.median(decodes) * 1e3,
        "not_decode_share": 1.0 - sum(decodes) / turn_s,
    }


def config(model: str, n_seq_max: int, tokens: int) -> EngineConfig:
    return EngineConfig(
        model=model,
        n_seq_max=n_seq_max,
        n_ctx_per_seq=max(256, tokens + 64),
        realign_when_idle=False,
    )


def noop(model: str, levels: Sequence[int], tokens: int) -> list[dict[str, Any]]:
    made = cells.GenerationContext
    cells.GenerationContext = FixedLogitsContext  # type: ignore[misc]
    try:
        with Engine(config(model, max(levels), tokens)) as engine:
            return [measure(engine, n, tokens) for n in levels]
    finally:
        cells.GenerationContext = made  # type: ignore[misc]


def real(model: str, n: int, tokens: int) -> dict[str, Any]:
    with Engine(config(model, n, tokens)) as engine:
        return {"model": model, **measure(engine, n, tokens)}


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--models", default=",".join(MODELS))
    parser.add_argument("--levels", default="1,16,64", help="sequences with the no-op decode")
    parser.add_argument("--real-level", type=int, default=16)
    parser.add_argument("--tokens", type=int, default=128)
    parser.add_argument("--quick", action="store_true", help="32 tokens, the first model only")
    parser.add_argument("--json", default=None)
    args = parser.parse_args(argv)
    models = args.models.split(",")
    tokens = 32 if args.quick else args.tokens
    if args.quick:
        models = models[:1]
    levels = [int(x) for x in args.levels.split(",")]
    print(f"# Engine overhead ({os.cpu_count()} cores), {tokens} greedy tokens per stream\n")
    fixed = noop(models[0], levels, tokens)
    print("## no-op decode (fixed logits)\n")
    print("| sequences | steps/s | us per step | us per sequence |")
    print("|---|---|---|---|")
    for row in fixed:
        print(
            f"| {row['sequences']} | {row['steps_per_s']:,.0f} | {row['us_per_step']:,.0f} "
            f"| {row['us_per_sequence']:,.1f} |"
        )
    print(f"\n## real decode, {args.real_level} sequences\n")
    print("| model | step ms | llama_decode ms | not llama_decode |")
    print("|---|---|---|---|")
    reals = []
    for model in models:
        row = real(model, args.real_level, tokens)
        reals.append(row)
        print(
            f"| {model} | {row['us_per_step'] / 1e3:.2f} | {row['llama_decode_ms']:.2f} "
            f"| {row['not_decode_share']:.1%} |"
        )
    settings = {
        "ours": {
            "models": models,
            "noop_model": models[0],
            "levels": levels,
            "real_level": args.real_level,
            "tokens_per_stream": tokens,
            "sampling": "greedy, ignore_eos",
            "threads": os.cpu_count(),
            "engine": "EngineConfig defaults, n_seq_max = sequences, realign_when_idle=False",
            "client": "Engine.astream, all streams started together",
        }
    }
    results.write(args.json, "overhead", settings, noop=fixed, real=reals)


if __name__ == "__main__":
    main()
