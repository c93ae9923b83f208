"""What per-token log-probabilities cost: ``logprobs=k`` against ``logprobs=None``.

Two measurements on the same engine:

* **end to end** - one greedy stream of ``--max-tokens`` tokens (``ignore_eos``), alone on the
  engine, with and without log-probabilities, alternating, ``--repeat`` times each. Reported: the
  median generation time per token (``Timings.generation_s`` over the tokens after the first).
* **the computation alone** - ``LogprobComputer.compute`` on a logits row of the model's
  vocabulary size, timed over many calls, for 0, ``k`` and 20 top tokens. This is what the worker
  thread adds per token of a request that asks, whatever else runs.

The machine is small and shared, so the end-to-end numbers are noisy; the second is the steadier
figure. Nothing is asserted; this is a report. Run from the repository root, with
``LLAMACPP_INTEGRATIONS_MODELS`` pointing at the models folder::

    python benchmarks/logprobs_overhead.py [--model smollm2-135m] [--max-tokens 128] [--top 5]
                                           [--repeat 7] [--threads N]
"""

from __future__ import annotations

import argparse
import statistics
import time

import numpy as np

from llamacpp_integrations.engine import (
    ChatMessage,
    ChatRequest,
    Engine,
    EngineConfig,
    SamplingParams,
)
from llamacpp_integrations.engine.worker.logprobs import LogprobComputer


def per_token_ms(engine: Engine, max_tokens: int, logprobs: int | None) -> float:
    request = ChatRequest(
        messages=[ChatMessage(role="user", content="Write a long story about a lighthouse.")],
        sampling=SamplingParams(temperature=0.0),
        max_tokens=max_tokens,
        ignore_eos=True,
        logprobs=logprobs,
    )
    result = engine.generate(request)
    assert result.usage.completion_tokens == max_tokens
    assert (result.logprobs is None) == (logprobs is None)
    return 1000 * result.timings.generation_s / (max_tokens - 1)


def compute_us(engine: Engine, n_top: int, calls: int) -> float:
    computer = LogprobComputer(engine._model)  # the model's vocabulary, read-only use
    rng = np.random.default_rng(0)
    logits = (rng.standard_normal(engine.info.n_vocab) * 3).astype(np.float32)
    tokens = rng.integers(0, engine.info.n_vocab, size=calls)
    for token in tokens[:50]:  # warm the token-text cache as a long answer would
        computer.compute(logits, int(token), n_top, special=False)
    start = time.perf_counter()
    for token in tokens:
        computer.compute(logits, int(token), n_top, special=False)
    return 1e6 * (time.perf_counter() - start) / calls


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--model", default="smollm2-135m")
    parser.add_argument("--max-tokens", type=int, default=128)
    parser.add_argument("--top", type=int, default=5)
    parser.add_argument("--repeat", type=int, default=7)
    parser.add_argument("--calls", type=int, default=2000)
    parser.add_argument("--threads", type=int, default=None, help="decode threads (all cores)")
    args = parser.parse_args()

    config = EngineConfig(model=args.model, n_seq_max=1, n_ctx_per_seq=1024, n_threads=args.threads)
    with Engine(config) as engine:
        print(f"model {engine.info.name or engine.info.path}: n_vocab={engine.info.n_vocab}")
        per_token_ms(engine, 16, None)  # warm-up (weights paged in, prompt cached)
        off: list[float] = []
        on: list[float] = []
        for _ in range(args.repeat):
            off.append(per_token_ms(engine, args.max_tokens, None))
            on.append(per_token_ms(engine, args.max_tokens, args.top))
        m_off, m_on = statistics.median(off), statistics.median(on)
        print(
            f"end to end, {args.max_tokens} tokens, median of {args.repeat}: "
            f"logprobs=None {m_off:.3f} ms/token, logprobs={args.top} {m_on:.3f} ms/token, "
            f"difference {m_on - m_off:+.3f} ms/token ({100 * (m_on / m_off - 1):+.1f}%)"
        )
        print(f"  runs off: {', '.join(f'{v:.2f}' for v in off)}")
        print(f"  runs on:  {', '.join(f'{v:.2f}' for v in on)}")
        for n_top in sorted({0, args.top, 20}):
            us = compute_us(engine, n_top, args.calls)
            print(
                f"computation alone, top {n_top:>2}: {us:.1f} us/token "
                f"({100 * us / 1000 / m_off:.1f}% of a token)"
            )


if __name__ == "__main__":
    main()
