"""Where one stream's time goes, per token: ``llama_decode`` and everything the engine adds.

One request at a time (``n_seq_max=1``), ``--tokens`` tokens (``ignore_eos``), read through
``Engine.astream`` as an application would, on each of ``--models``, in three modes: greedy,
sampled (temperature 0.8, top-p 0.95, top-k 40, min-p off, seed 1) and greedy under a GBNF
grammar. The worker's phases are timed by wrapping the methods that do them
(``step_timing.PhaseTimers``: exclusive times, about a microsecond of timing per call, reported
as ``wrapper_us``):

===================== ==========================================================================
llama_decode          the kernels (``llama_cpp.llama_decode``)
batch building        filling llama.cpp's batch (``GenerationContext.decode`` around the kernels)
logits read           ``GenerationContext.logits_view``
sampling              ``SamplerChain.sample`` (llama.cpp's chain), ``argmax_rows`` (greedy picks)
grammar               checking the pick against the grammar, and filtering when it is refused
detokenizing          ``LoadedModel.token_to_piece`` (the engine keeps each token's piece)
text, stop strings    ``OutputProcessor.feed`` (UTF-8 and stop strings)
request bookkeeping   taking the token into the request, building the chunk
channel               ``Outbox`` and ``EventChannel.put`` (the hand-over to the caller)
scheduling            ``Scheduler.plan`` and ``decoded``, drafts
stats                 ``EngineCore.publish``
rest of the step      ``EngineCore.step`` and ``_step`` around all of the above
worker loop           the rest of the worker's turn: the inbox, waiting for the GIL, the loop
===================== ==========================================================================

A turn runs from one decode's start to the next's; the phases are summed over the steady turns
(one token each) and divided by their number. ``delivery_lag_us`` is the median time from the
worker's ``Outbox.put`` to the caller's ``async for`` receiving the chunk. Nothing is asserted; the
figures go to ``--json`` (``benchmarks/results/step_profile.json``), rendered in
docs/performance.md.

    python benchmarks/step_profile.py --json benchmarks/results/step_profile.json
    python benchmarks/step_profile.py --quick      # a check that it runs
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import time
from collections.abc import Sequence
from typing import Any

import results
from step_timing import DecodeLog, PhaseTimers, wrapper_cost_us

from llamacpp_integrations.engine import (
    ChatMessage,
    ChatRequest,
    CompletionRequest,
    Engine,
    EngineConfig,
    SamplingParams,
)
from llamacpp_integrations.engine.channel import EventChannel
from llamacpp_integrations.engine.native.runner import GenerationContext
from llamacpp_integrations.engine.native.sampler import SamplerChain
from llamacpp_integrations.engine.native.weights import LoadedModel
from llamacpp_integrations.engine.outbox import Outbox
from llamacpp_integrations.engine.worker.active import ActiveRequest
from llamacpp_integrations.engine.worker.core import EngineCore
from llamacpp_integrations.engine.worker.output import OutputProcessor
from llamacpp_integrations.engine.worker.sampling import Sampling
from llamacpp_integrations.engine.worker.scheduler import Scheduler

MODELS = ("smollm2-135m", "gemma3-270m")
MODES = {
    "greedy": (SamplingParams(temperature=0.0), None),
    "sampled": (SamplingParams(temperature=0.8, top_p=0.95, top_k=40, min_p=0.0, seed=1), None),
    "greedy + grammar": (SamplingParams(temperature=0.0), "root ::= [a-zA-Z0-9 ,.\\n]+"),
}
PROMPT = "Write a long story about a lighthouse keeper and the storm that changed everything."
PHASES = [
    "llama_decode",
    "batch building",
    "logits read",
    "sampling",
    "grammar",
    "detokenizing",
    "text, stop strings",
    "request bookkeeping",
    "channel",
    "scheduling",
    "stats",
    "rest of the step",
]


def hook(timers: PhaseTimers) -> None:
    import llama_cpp

    timers.wrap(llama_cpp, "llama_decode", "llama_decode")
    timers.wrap(GenerationContext, "decode", "batch building")
    timers.wrap(GenerationContext, "logits_view", "logits read")
    timers.wrap(SamplerChain, "sample", "sampling")
    timers.wrap(GenerationContext, "argmax_rows", "sampling")  # a step's greedy picks at once
    timers.wrap(SamplerChain, "_grammar_allows", "grammar")
    timers.wrap(SamplerChain, "_pick", "grammar")
    timers.wrap(LoadedModel, "token_to_piece", "detokenizing")
    timers.wrap(OutputProcessor, "feed", "text, stop strings")
    for name in ("take", "_take"):
        timers.wrap(Sampling, name, "request bookkeeping")
    for name in ("take", "pending_chunk"):
        timers.wrap(ActiveRequest, name, "request bookkeeping")
    timers.wrap(EventChannel, "put", "channel")
    timers.wrap(Outbox, "put", "channel")
    timers.wrap(Outbox, "flush", "channel")
    timers.wrap(Scheduler, "plan", "scheduling")
    timers.wrap(Scheduler, "decoded", "scheduling")
    timers.wrap(Sampling, "drafts", "scheduling")
    timers.wrap(EngineCore, "publish", "stats")
    timers.wrap(EngineCore, "step", "rest of the step")
    timers.wrap(EngineCore, "_step", "rest of the step")


def request(engine: Engine, mode: str, tokens: int) -> ChatRequest | CompletionRequest:
    sampling, grammar = MODES[mode]
    common: dict[str, Any] = {
        "sampling": sampling,
        "max_tokens": tokens,
        "ignore_eos": True,
        "grammar": grammar,
    }
    if engine.info.chat_template is None:  # gemma3-270m's file has none: raw text
        return CompletionRequest(prompt=PROMPT, **common)
    return ChatRequest(messages=[ChatMessage(role="user", content=PROMPT)], **common)


async def stream(
    engine: Engine, req: ChatRequest | CompletionRequest, sent: dict[int, float]
) -> tuple[int, list[float]]:
    lags = []
    count = 0
    async for chunk in engine.astream(req):
        put = sent.pop(id(chunk), None)
        if put is not None:
            lags.append(time.perf_counter() - put)
        count += len(chunk.token_ids)
    return count, lags


def profile(engine: Engine, mode: str, tokens: int, repeat: int) -> dict[str, Any]:
    req = request(engine, mode, tokens)
    asyncio.run(stream(engine, req, {}))  # warm: the prompt cached, every piece seen once
    timers = PhaseTimers()
    log = DecodeLog(timers=timers)
    sent: dict[int, float] = {}
    put = Outbox.put

    def stamped(outbox: Outbox, channel: EventChannel, event: object) -> None:
        sent[id(event)] = time.perf_counter()
        put(outbox, channel, event)

    Outbox.put = stamped  # type: ignore[method-assign]
    hook(timers)
    lags: list[float] = []
    produced = 0
    turns: list[float] = []
    totals = dict.fromkeys(PHASES, 0.0)
    try:
        for _ in range(repeat):
            log.decodes.clear()
            with log.recording():
                count, got = asyncio.run(stream(engine, req, sent))
            produced += count
            lags += got
            turns += [turn for _, turn in log.steady(1)]
            for name, total in log.steady_phases(1).items():
                totals[name] += total
    finally:
        timers.restore()
        Outbox.put = put  # type: ignore[method-assign]
    n_turns = len(turns)
    per_token = {name: totals[name] / n_turns * 1e6 for name in PHASES}
    turn_us = sum(turns) / n_turns * 1e6
    per_token["worker loop"] = max(0.0, turn_us - sum(per_token.values()))
    return {
        "mode": mode,
        "tokens": produced,
        "steady_turns": n_turns,
        "token_us": turn_us,
        "token_us_median": statistics.median(turns) * 1e6,
        "tokens_per_s": 1e6 / turn_us,
        "phases_us": per_token,
        "delivery_lag_us": statistics.median(lags) * 1e6 if lags else None,
    }


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--models", default=",".join(MODELS))
    parser.add_argument("--tokens", type=int, default=128)
    parser.add_argument("--repeat", type=int, default=3, help="runs per mode, phases summed")
    parser.add_argument("--quick", action="store_true", help="32 tokens, one run, first model")
    parser.add_argument("--json", default=None)
    args = parser.parse_args(argv)
    models = args.models.split(",")[:1] if args.quick else args.models.split(",")
    tokens, repeat = (32, 1) if args.quick else (args.tokens, args.repeat)
    wrapper = wrapper_cost_us()
    runs = []
    for model in models:
        config = EngineConfig(
            model=model, n_seq_max=1, n_ctx_per_seq=tokens + 256, realign_when_idle=False
        )
        with Engine(config) as engine:
            for mode in MODES:
                row = {"model": model, **profile(engine, mode, tokens, repeat)}
                runs.append(row)
                print(f"\n## {model}, {mode}: {row['token_us']:,.0f} us per token\n")
                for name, us in row["phases_us"].items():
                    print(f"- {name}: {us:,.1f} us ({us / row['token_us']:.1%})")
    settings = {
        "ours": {
            "models": models,
            "tokens": tokens,
            "repeat": repeat,
            "modes": {
                mode: {"sampling": repr(sampling), "grammar": grammar}
                for mode, (sampling, grammar) in MODES.items()
            },
            "threads": os.cpu_count(),
            "engine": "n_seq_max=1, realign_when_idle=False, EngineConfig defaults otherwise",
            "client": "Engine.astream, one request at a time",
        }
    }
    results.write(args.json, "step_profile", settings, wrapper_us=wrapper, runs=runs)


if __name__ == "__main__":
    main()
