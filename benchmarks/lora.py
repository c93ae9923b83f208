"""What LoRA adapters chosen per request cost: streams with adapters against streams without.

llama.cpp applies adapters to a whole context (``llama_set_adapters_lora``), so the engine
decodes each step's rows one adapter set after another, and a change of set has llama.cpp plan
its compute graph again. This measures ``--streams`` greedy streams of ``--max-tokens`` tokens
(``ignore_eos``) at once on one engine, in four mixes:

* **no adapter**: the plain model, one decode per step;
* **one adapter, every stream**: the adapter's extra matmuls, still one decode per step;
* **two adapters, half each**: two decodes per step, a graph planned again at each;
* **a set per stream**: none, A, B, A at half scale: one decode per stream and step.

Reported: generated tokens per second over all streams (median of ``--repeat`` runs) and the
ratio to no adapter. The adapters are the tests' tiny random ones (rank 4 on two projections
per layer, ``tests/builders/tiny_lora.py``): a real adapter of higher rank costs more matmul
time, the same switching. Run from the repository root, with ``LLAMACPP_INTEGRATIONS_MODELS``
pointing at the models folder::

    python benchmarks/lora.py [--streams 4] [--max-tokens 64] [--repeat 3] \\
        [--json benchmarks/results/lora.json]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from collections.abc import Mapping, Sequence
from pathlib import Path

import results

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from llamacpp_integrations.engine import (
    CompletionRequest,
    Engine,
    EngineConfig,
    LoraAdapter,
    SamplingParams,
)
from llamacpp_integrations.models import resolve_model_path
from tests.builders.tiny_lora import cached_tiny_lora

Choice = Mapping[str | int, float] | None


def mixes(streams: int) -> dict[str, list[Choice]]:
    """Each mix: the adapters of every stream."""
    sets: tuple[Choice, ...] = (None, {"a": 1.0}, {"b": 1.0}, {"a": 0.5})
    return {
        "no adapter": [None] * streams,
        "one adapter, every stream": [{"a": 1.0}] * streams,
        "two adapters, half each": [{"a": 1.0} if i % 2 else {"b": 1.0} for i in range(streams)],
        "a set per stream": [sets[i % len(sets)] for i in range(streams)],
    }


def run(engine: Engine, choices: Sequence[Choice], max_tokens: int) -> float:
    """Generated tokens per second of ``choices`` streams at once."""
    start = time.perf_counter()
    handles = [
        engine.submit(
            CompletionRequest(
                prompt=f"Story {i}: once upon a time",
                max_tokens=max_tokens,
                ignore_eos=True,
                sampling=SamplingParams(temperature=0.0),
                lora=choice,
            )
        )
        for i, choice in enumerate(choices)
    ]
    tokens = sum(handle.result().usage.completion_tokens for handle in handles)
    return tokens / (time.perf_counter() - start)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--model", default="smollm2-135m")
    parser.add_argument("--streams", type=int, default=4)
    parser.add_argument("--max-tokens", type=int, default=64)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--threads", type=int, default=None, help="decode threads (all CPUs)")
    parser.add_argument("--json", default=None, help="write the results here")
    args = parser.parse_args()

    model = str(resolve_model_path(args.model))
    adapters = (
        LoraAdapter(str(cached_tiny_lora()), 0.0, "a"),
        LoraAdapter(str(cached_tiny_lora(seed=1)), 0.0, "b"),
    )
    config = EngineConfig(
        model=model,
        n_seq_max=args.streams,
        n_ctx_per_seq=args.max_tokens + 64,
        n_threads=args.threads,
        lora_adapters=adapters,
    )
    measured: dict[str, list[float]] = {name: [] for name in mixes(args.streams)}
    with Engine(config) as engine:
        run(engine, [None, {"a": 1.0}], 8)  # warm-up: weights paged in, both graphs planned
        for _ in range(args.repeat):  # the mixes take turns, so drift hits them alike
            for name, choices in mixes(args.streams).items():
                measured[name].append(run(engine, choices, args.max_tokens))
    base = statistics.median(measured["no adapter"])
    print(f"{args.streams} streams of {args.max_tokens} tokens, median of {args.repeat}")
    print(f"{'mix':<28}{'tokens/s':>10}{'vs none':>9}")
    rows = []
    for name, values in measured.items():
        median = statistics.median(values)
        rows.append({"mix": name, "tokens_per_s": median, "vs_none": median / base})
        print(f"{name:<28}{median:>10.1f}{median / base:>8.2f}x")
    settings = {"model": os.path.basename(model), "streams": args.streams,
                "max_tokens": args.max_tokens, "repeat": args.repeat, "threads": args.threads,
                "adapters": "tiny random, rank 4, attn_q and attn_v"}  # fmt: skip
    results.write(args.json, "lora", settings, rows=rows)


if __name__ == "__main__":
    main()
