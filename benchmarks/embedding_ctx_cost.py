"""What one short text's embedding costs at each embedding context size, and why.

Three ways, each the median of ``--repeat`` embeds of one short text, at ``--n-ctx`` sizes:

* **engine**: ``Engine.embed([text])`` with ``embedding_n_ctx`` set (the code of the checkout
  the script runs from): the first call of a fresh engine (median of 3 engines), which also
  makes the embedding context, and the calls after it; then the issue's batch, 64 texts of
  about 23 tokens in one call (texts/s);
* **raw, cells cleared**: a bare llama.cpp embedding context set up as the engine sets up its
  own, ``llama_memory_clear(mem, data=False)`` before each decode (what the engine does);
* **raw, data cleared**: the same with ``data=True``, which also writes zeros over the whole KV
  buffer, as the engine did when the issue reported 485 ms at 2048 against 183 ms at 512.

The clear itself is timed apart as well. Standalone llama.cpp calls: the engine exposes no way
to clear its data, on purpose.

``--busy`` keeps one core busy with another process throughout (a machine shared with other
work, as the issue's was: its llama-bench ceiling was 172 tokens/s where this machine gives
about 300 alone), and ``--rounds`` repeats the sizes, so the swing between rounds at one size
can be set against the difference between sizes. To time the code as it was when the issue was
filed, copy this script and ``results.py`` into a checkout of that commit and run it there.

    python benchmarks/embedding_ctx_cost.py [--model smollm2-135m] [--n-ctx 512 2048 4096]
        [--busy] [--rounds 1]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import llama_cpp
import results

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from llamacpp_integrations.engine import Engine, EngineConfig
from llamacpp_integrations.models import resolve_model_path

BUSY_NOTE = ", one core kept busy by another process"
TEXT = "the river runs past an old mill where owls nest"
# The batch: 64 texts of about 23 tokens.
SHORT_TEXTS = [
    f"document {i}: the river runs past an old mill where owls nest and bread is baked"
    for i in range(64)
]


def engine_ms(model: str, n_ctx: int, threads: int, repeat: int) -> dict[str, float]:
    """The first embed of a fresh engine (which makes the embedding context), then the rest."""
    config = EngineConfig(model=model, n_threads=threads, embedding_n_ctx=n_ctx, n_seq_max=1)
    firsts = []
    for _ in range(3):
        with Engine(config) as engine:
            start = time.perf_counter()
            engine.embed([TEXT])
            firsts.append(time.perf_counter() - start)
    times = []
    with Engine(config) as engine:
        engine.embed([TEXT])
        for _ in range(repeat):
            start = time.perf_counter()
            engine.embed([TEXT])
            times.append(time.perf_counter() - start)
        start = time.perf_counter()
        engine.embed(SHORT_TEXTS)
        batch_s = time.perf_counter() - start
    return {
        "engine_first_ms": statistics.median(firsts) * 1000,
        "engine_ms": statistics.median(times) * 1000,
        "short_texts_per_s": len(SHORT_TEXTS) / batch_s,
    }


def raw_ms(
    model_handle: Any, tokens: list[int], n_ctx: int, threads: int, repeat: int
) -> dict[str, float]:
    params = llama_cpp.llama_context_default_params()
    params.n_ctx = params.n_batch = params.n_ubatch = n_ctx
    params.n_seq_max = 128
    params.n_threads = params.n_threads_batch = threads
    params.embeddings = True
    params.pooling_type = llama_cpp.LLAMA_POOLING_TYPE_MEAN
    params.kv_unified = True
    ctx = llama_cpp.llama_init_from_model(model_handle, params)
    assert ctx, "llama.cpp could not create the context"
    memory = llama_cpp.llama_get_memory(ctx)
    batch = llama_cpp.llama_batch_init(n_ctx, 0, 1)
    for i, token in enumerate(tokens):
        batch.token[i], batch.pos[i], batch.n_seq_id[i] = token, i, 1
        batch.seq_id[i][0], batch.logits[i] = 0, True
    batch.n_tokens = len(tokens)
    out: dict[str, float] = {}
    try:
        for data in (False, True):
            embeds, clears = [], []
            for _ in range(repeat + 1):
                start = time.perf_counter()
                llama_cpp.llama_memory_clear(memory, data)
                cleared = time.perf_counter()
                assert llama_cpp.llama_decode(ctx, batch) == 0
                assert llama_cpp.llama_get_embeddings_seq(ctx, 0)
                embeds.append(time.perf_counter() - start)
                clears.append(cleared - start)
            key = "data" if data else "cells"
            out[f"{key}_embed_ms"] = statistics.median(embeds[1:]) * 1000
            out[f"{key}_clear_ms"] = statistics.median(clears[1:]) * 1000
    finally:
        llama_cpp.llama_batch_free(batch)
        llama_cpp.llama_free(ctx)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default="smollm2-135m")
    parser.add_argument("--n-ctx", type=int, nargs="+", default=[512, 2048, 4096])
    parser.add_argument("--repeat", type=int, default=7)
    parser.add_argument("--json", default=None)
    parser.add_argument("--busy", action="store_true", help="keep one core busy meanwhile")
    parser.add_argument("--rounds", type=int, default=1)
    args = parser.parse_args()
    threads = os.cpu_count() or 1
    model = str(resolve_model_path(args.model))
    llama_cpp.llama_backend_init()
    handle = llama_cpp.llama_model_load_from_file(
        model.encode(), llama_cpp.llama_model_default_params()
    )
    vocab = llama_cpp.llama_model_get_vocab(handle)
    raw = TEXT.encode()
    buffer = (llama_cpp.llama_token * 64)()
    n = llama_cpp.llama_tokenize(vocab, raw, len(raw), buffer, 64, True, False)
    tokens = list(buffer[:n])
    rows = []
    busy = subprocess.Popen([sys.executable, "-c", "while True: pass"]) if args.busy else None
    try:
        for round_ in range(args.rounds):
            for n_ctx in args.n_ctx:
                row: dict[str, Any] = {"n_ctx": n_ctx, "round": round_ + 1}
                row.update(raw_ms(handle, tokens, n_ctx, threads, args.repeat))
                row.update(engine_ms(model, n_ctx, threads, args.repeat))
                rows.append(row)
    finally:
        if busy is not None:
            busy.kill()
            busy.wait()
    llama_cpp.llama_model_free(handle)
    print(
        f"# One text ({len(tokens)} tokens), {Path(model).name}, {threads} threads, "
        f"median of {args.repeat}{BUSY_NOTE if args.busy else ''}\n"
    )
    print(
        "| round | embedding_n_ctx | Engine.embed, first | Engine.embed, then | raw, cells cleared "
        "| raw, data cleared | of which the clear | 64 short texts |"
    )
    print("|---:|---:|---:|---:|---:|---:|---:|---:|")
    for row in rows:
        print(
            f"| {row['round']} | {row['n_ctx']} | {row['engine_first_ms']:.0f} ms "
            f"| {row['engine_ms']:.1f} ms "
            f"| {row['cells_embed_ms']:.1f} ms "
            f"| {row['data_embed_ms']:.1f} ms | {row['data_clear_ms']:.1f} ms "
            f"| {row['short_texts_per_s']:.1f} texts/s |"
        )
    results.write(
        args.json,
        "embedding_ctx_cost",
        {
            "model": Path(model).name,
            "tokens": len(tokens),
            "threads": threads,
            "repeat": args.repeat,
            "busy": args.busy,
        },
        rows=rows,
    )


if __name__ == "__main__":
    main()
