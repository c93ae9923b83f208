"""What reproducibility costs: the prefill layout (on by default) and deterministic mode.

Part 1, the layout (``EngineConfig.prefill_block``, 64 by default, against ``0``, off, and
any other ``--blocks``): the time to first token of a long prompt read cold (prompt tokens per
second), of a short chat, of the same chat asked again (its prefix cached), and of a follow-up
turn that extends an answered chat, sent at once and after a two-second pause. With the layout
a prompt is read in 64-position chunks (8-position ones inside the first 64) and its last token
alone, and a follow-up sent at once
keeps only the aligned part of the earlier prompt (the answer's cells were made one token at a
time); during a pause the idle engine reads the answer again in the layout, and the follow-up
keeps it. Off, chunks fill the batch and every cached token is kept.

Part 2, deterministic mode (``deterministic=True``, each sequence decoded alone) against the
default, at 1, 4 and 16 concurrent greedy requests of 64 tokens: aggregate tokens per second and
mean time to first token.

Both engines of a part stay loaded on the same weights and take turns request by request (the
order flipping each round), so load from elsewhere falls on both alike; figures are medians.

    python benchmarks/reproducibility.py [--rounds 3] [--json results/reproducibility.json]
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from contextlib import ExitStack
from typing import Any

import results

from llamacpp_integrations.engine import (
    ChatMessage,
    ChatRequest,
    Engine,
    EngineConfig,
    SamplingParams,
)
from llamacpp_integrations.models import resolve_model_path

GREEDY = SamplingParams(temperature=0.0)
IDLE_S = 2.0  # a user's pause before the follow-up
HANDBOOK = " ".join(
    f"Rule {i}: when asked about topic {i}, cite section {i} of the handbook, name the duty "
    f"officer of shift {i % 3}, and answer in at most two sentences."
    for i in range(48)
)
QUESTIONS = [
    "Why is the sky blue?",
    "Name three rivers.",
    "How do bees make honey?",
    "What is a prime number?",
    "Describe a forest at night.",
    "How does a bicycle stay upright?",
    "What do whales eat?",
    "Write a line about the sea.",
]


def chat(*turns: tuple[str, str], max_tokens: int = 1, ignore_eos: bool = False) -> ChatRequest:
    return ChatRequest(
        messages=[ChatMessage(role=role, content=text) for role, text in turns],
        max_tokens=max_tokens,
        ignore_eos=ignore_eos,
        sampling=GREEDY,
    )


def first_token(engine: Engine, request: ChatRequest) -> tuple[float, int, int]:
    """Seconds to the first token, prompt tokens, and how many of them were cached."""
    start = time.perf_counter()
    first = None
    usage = None
    for chunk in engine.stream(request):
        if first is None and chunk.token_ids:
            first = time.perf_counter() - start
        if chunk.usage is not None:
            usage = chunk.usage
    assert usage is not None
    return (first or time.perf_counter() - start), usage.prompt_tokens, usage.cached_prompt_tokens


def layout_round(engine: Engine) -> dict[str, float]:
    """One round of part 1 on one engine."""
    out: dict[str, float] = {}
    engine.clear_cache()
    seconds, n_prompt, _ = first_token(engine, chat(("system", HANDBOOK), ("user", "Hi.")))
    out["long_prompt_tokens_per_s"] = n_prompt / seconds
    out["long_prompt_ttft_s"] = seconds
    engine.clear_cache()
    short = chat(("user", QUESTIONS[0]))
    out["short_cold_ttft_s"] = first_token(engine, short)[0]
    out["short_cached_ttft_s"] = first_token(engine, short)[0]
    # Another question: the chat template's preamble is all it shares with the cached one.
    seconds, n_prompt, cached = first_token(engine, chat(("user", QUESTIONS[3])))
    out["new_question_ttft_s"] = seconds
    out["new_question_evaluated"] = n_prompt - cached
    answer = engine.generate(chat(("user", QUESTIONS[1]), max_tokens=48)).text
    follow_up = chat(("user", QUESTIONS[1]), ("assistant", answer), ("user", "Tell me more."))
    seconds, n_prompt, cached = first_token(engine, follow_up)
    out["follow_up_ttft_s"] = seconds
    out["follow_up_evaluated"] = n_prompt - cached
    # The same after a user's pause: the idle engine reads the answer again in the layout.
    answer = engine.generate(chat(("user", QUESTIONS[2]), max_tokens=96)).text
    time.sleep(IDLE_S)
    follow_up = chat(("user", QUESTIONS[2]), ("assistant", answer), ("user", "Tell me more."))
    seconds, n_prompt, cached = first_token(engine, follow_up)
    out["follow_up_after_idle_ttft_s"] = seconds
    out["follow_up_after_idle_evaluated"] = n_prompt - cached
    return out


def concurrent_round(engine: Engine, n: int) -> dict[str, float]:
    """``n`` requests at once, 64 tokens each: aggregate tokens/s and mean TTFT."""
    engine.clear_cache()
    requests = [
        chat(("user", QUESTIONS[i % len(QUESTIONS)] + f" ({i})"), max_tokens=64, ignore_eos=True)
        for i in range(n)
    ]

    def one(request: ChatRequest) -> tuple[float, int]:
        start = time.perf_counter()
        completion = engine.generate(request)
        ttft = completion.timings.time_to_first_token_s or (time.perf_counter() - start)
        return ttft, completion.usage.completion_tokens

    start = time.perf_counter()
    with ThreadPoolExecutor(n) as pool:
        done = list(pool.map(one, requests))
    wall = time.perf_counter() - start
    return {
        "tokens_per_s": sum(tokens for _, tokens in done) / wall,
        "mean_ttft_s": statistics.mean(ttft for ttft, _ in done),
    }


def quiet(engines: list[Engine]) -> None:
    """Wait until no engine works: an idle engine realigns finished answers in the background,
    which would otherwise land in the next measurement of another engine on the same worker."""
    steps = -1
    while (now := sum(engine.stats().steps for engine in engines)) != steps:
        steps = now
        time.sleep(0.5)


def alternate(
    engines: dict[str, Engine], rounds: int, measure: Callable[[Engine], dict[str, float]]
) -> dict[str, dict[str, float]]:
    """Each engine measured ``rounds`` times, taking turns; the median of each figure."""
    seen: dict[str, list[dict[str, float]]] = {name: [] for name in engines}
    names = list(engines)
    for r in range(rounds):
        for name in names if r % 2 == 0 else names[::-1]:
            quiet(list(engines.values()))
            seen[name].append(measure(engines[name]))
    return {
        name: {key: statistics.median(run[key] for run in runs) for key in runs[0]}
        for name, runs in seen.items()
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default="smollm2-135m")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--json", default=None)
    parser.add_argument(
        "--blocks", default="64,0", help="prefill blocks to compare, 0 is off (first: the default)"
    )
    args = parser.parse_args()
    model = str(resolve_model_path(args.model))
    report: dict[str, Any] = {}

    base = {"model": model, "n_ctx_per_seq": 2048, "n_seq_max": 4}
    blocks = [int(b) for b in args.blocks.split(",")]
    names = {b: f"block {b}" if b else "off" for b in blocks}
    with ExitStack() as stack:
        engines = {
            names[b]: stack.enter_context(Engine(EngineConfig(**base, prefill_block=b)))
            for b in blocks
        }
        layout = alternate(engines, args.rounds, layout_round)
    report["layout"] = layout
    print("\n## The prefill layout by block size (0: off)")
    print("| figure | " + " | ".join(names.values()) + " |")
    print("|---|" + "---:|" * len(names))
    for key in layout[names[blocks[0]]]:
        cells = [f"{layout[name][key]:.3f}" for name in names.values()]
        if "off" in layout and names[blocks[0]] != "off":
            cells[0] += f" ({layout[names[blocks[0]]][key] / layout['off'][key]:.2f}x off)"
        print(f"| {key} | " + " | ".join(cells) + " |")

    base = {"model": model, "n_ctx_per_seq": 512, "n_seq_max": 16}
    modes: dict[str, dict[str, dict[str, float]]] = {}
    with (
        Engine(EngineConfig(**base)) as batched,
        Engine(EngineConfig(**base, deterministic=True)) as alone,
    ):
        for n in (1, 4, 16):
            modes[str(n)] = alternate(
                {"default": batched, "deterministic": alone},
                args.rounds,
                lambda engine, n=n: concurrent_round(engine, n),
            )
    report["deterministic"] = modes
    print("\n## Deterministic mode against the default, 64 greedy tokens per request")
    print("| concurrent | default tok/s | deterministic tok/s | ratio | default TTFT | "
          "deterministic TTFT |\n|---:|---:|---:|---:|---:|---:|")  # fmt: skip
    for n, pair in modes.items():
        d, s = pair["default"], pair["deterministic"]
        print(
            f"| {n} | {d['tokens_per_s']:.1f} | {s['tokens_per_s']:.1f} | "
            f"{s['tokens_per_s'] / d['tokens_per_s']:.2f}x | {d['mean_ttft_s'] * 1000:.0f} ms | "
            f"{s['mean_ttft_s'] * 1000:.0f} ms |"
        )
    results.write(
        args.json, "reproducibility", {"model": args.model, "rounds": args.rounds}, **report
    )


if __name__ == "__main__":
    main()
