"""Time to first token for a long system prompt: cold, warm in memory, and after a restart with
the prompt cache on disk (``EngineConfig.prompt_cache_dir``).

A system prompt of about 1,500 tokens plus a short question, greedy. Cold: a fresh engine and an
empty cache directory. Warm: the same engine, another question after the same system prompt (the
prefix is in a slot). Restart: a new engine on the directory the first one filled (the prefix
is restored from disk). Each figure is the median of ``--repeat`` runs; ratios are to cold.

    python benchmarks/prompt_cache.py
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time
from collections.abc import Sequence

import results

from llamacpp_integrations.engine import (
    ChatMessage,
    ChatRequest,
    Engine,
    EngineConfig,
    SamplingParams,
)
from llamacpp_integrations.models import resolve_model_path

SYSTEM = "You are the help desk of the Zephyr-9 research station. " + " ".join(
    f"Rule {i}: when asked about topic {i}, cite section {i} of the handbook, name the duty "
    f"officer of shift {i % 3}, and answer in at most two sentences."
    for i in range(48)
)


def request(question: str) -> ChatRequest:
    return ChatRequest(
        messages=[
            ChatMessage(role="system", content=SYSTEM),
            ChatMessage(role="user", content=question),
        ],
        max_tokens=8,
        sampling=SamplingParams(temperature=0.0),
    )


def ttft(engine: Engine, question: str) -> tuple[float, int, int]:
    """Seconds to the first token, prompt tokens, and how many of them were cached."""
    start = time.perf_counter()
    first = None
    usage = None
    for chunk in engine.stream(request(question)):
        if first is None and chunk.token_ids:
            first = time.perf_counter() - start
        if chunk.usage is not None:
            usage = chunk.usage
    assert usage is not None
    return first or 0.0, usage.prompt_tokens, usage.cached_prompt_tokens


def config(model: str, directory: str, threads: int) -> EngineConfig:
    return EngineConfig(
        model=model, n_seq_max=4, n_ctx_per_seq=4096, n_threads=threads,
        prompt_cache_dir=directory,
    )  # fmt: skip


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="smollm2-135m")
    parser.add_argument("--threads", type=int, default=os.cpu_count() or 1)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--json", default=None, help="write the results here")
    args = parser.parse_args(argv)
    model = str(resolve_model_path(args.model))
    cold, warm, restart = [], [], []
    n_prompt = 0
    for k in range(args.repeat):
        with tempfile.TemporaryDirectory() as directory:
            with Engine(config(model, directory, args.threads)) as engine:
                engine.generate(ChatRequest(messages=[ChatMessage(role="user", content="Hi")],
                                            max_tokens=2))  # fmt: skip
                seconds, n_prompt, cached = ttft(engine, f"What is rule {k}?")
                assert cached < 32  # only the chat template's opening tokens
                cold.append(seconds)
                seconds, _, cached = ttft(engine, f"Who is on shift {k}?")
                assert cached > 0
                warm.append(seconds)
            with Engine(config(model, directory, args.threads)) as engine:
                engine.generate(ChatRequest(messages=[ChatMessage(role="user", content="Hi")],
                                            max_tokens=2))  # fmt: skip
                seconds, _, cached = ttft(engine, f"Who is on shift {k + 1}?")
                assert cached > 0, "the restarted engine did not restore the prompt"
                restart.append(seconds)
    base = statistics.median(cold)
    print(f"time to first token, {n_prompt}-token prompt, median of {args.repeat}")
    print(f"{'case':<34}{'ms':>8}{'vs cold':>9}")
    rows = []
    for name, values in (
        ("cold (nothing cached)", cold),
        ("warm (prefix in a slot)", warm),
        ("after restart (prefix on disk)", restart),
    ):
        median = statistics.median(values)
        rows.append({"case": name, "ttft_ms": median * 1000, "vs_cold": median / base})
        print(f"{name:<34}{median * 1000:>8.0f}{median / base:>8.2f}x")
    settings = {"model": os.path.basename(model), "threads": args.threads, "repeat": args.repeat,
                "prompt_tokens": n_prompt}  # fmt: skip
    results.write(args.json, "prompt_cache", settings, rows=rows)


if __name__ == "__main__":
    main()
