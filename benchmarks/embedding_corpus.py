"""Indexing a corpus: our engine against ``llama-server --embeddings`` and the prompt-processing
ceiling, on mixed-length texts; and chat speed while a corpus is embedded.

``--texts`` texts (2,000 by default) of 10 to 400 tokens, the same list for every side. Sides,
one after the other (never two thread teams at once):

* **ours**: ``Engine.embed`` over the whole list in one call (the engine packs it into decodes).
* **llama-server**: llama.cpp's C++ server from the same vendored sources, ``--embeddings``
  with the same pooling and threads (``--no-repack`` where ours turns repacking off), 4 slots of
  2,048 tokens, ``/v1/embeddings`` requests of 32 texts from 4 client threads.
* **ceiling**: llama.cpp's prompt processing rate. With ``--llama-bench PATH``, llama-bench's
  pp512 on the same model and threads (``-p 512 -n 0 -r 3 -o json``; ``-embd 1 -p 128`` for the
  encoder, which knows 128 positions). Without it, or where llama-bench fails on the model, one
  512-token prompt decoded in one sequence by our generation context, best of 3 (only for
  models that generate). The output says which was used.
* **chat**: tokens/s of one greedy 64-token chat alone, and while the corpus is being embedded
  on the same engine (the embedding job running in a thread).

    python benchmarks/embedding_corpus.py --server PATH [--llama-bench PATH]
        [--model smollm2-135m] [--texts 2000] [--json PATH]
        [--encoder]   # the tiny random BERT encoder of tests/fixtures instead of --model
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import random
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import results

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from llamacpp_integrations.engine import ChatMessage, ChatRequest, CompletionRequest, Engine
from llamacpp_integrations.engine.runner import cpu_advertises_amx
from llamacpp_integrations.models import resolve_model_path
from tests.fixtures.llama_servers import LlamaServerProcess

PORT = 18131
WORDS = [
    "the", "river", "runs", "past", "an", "old", "mill", "where", "owls", "nest", "and", "bread",
    "is", "baked", "in", "copper", "ovens", "while", "comets", "cross", "a", "glass", "sky",
    "over", "mountains", "tides", "glaciers", "deserts", "of", "salt", "under", "kites",
]  # fmt: skip


def corpus(n: int, max_words: int, seed: int = 7) -> list[str]:
    """``n`` texts of 9 to ``max_words`` words (SmolLM2 takes about 1.1 tokens per word here,
    so 360 words make about 400 tokens)."""
    rng = random.Random(seed)
    return [
        " ".join(rng.choice(WORDS) for _ in range(rng.randint(9, max_words))) + f" ({i})"
        for i in range(n)
    ]


def ours(engine: Engine, texts: list[str]) -> dict[str, Any]:
    engine.embed(texts[:8])  # makes the embedding context
    start = time.perf_counter()
    vectors = engine.embed(texts, truncate=True)
    wall = time.perf_counter() - start
    assert len(vectors) == len(texts)
    return {"wall_s": wall}


def ceiling(engine: Engine) -> float:
    """Prompt tokens/s of one 512-token prompt in one sequence (llama-bench's pp512)."""
    prompt = " ".join(WORDS * 40)
    tokens = engine.tokenize(prompt)[:512]
    text = engine.detokenize(tokens)
    n = len(engine.tokenize(text))
    best = float("inf")
    for _ in range(3):
        engine.clear_cache()
        start = time.perf_counter()
        engine.generate(CompletionRequest(prompt=text, max_tokens=1))
        best = min(best, time.perf_counter() - start)
    return n / best


def llama_bench_pp(binary: str, model: str, threads: int, encoder: bool) -> float | None:
    """llama-bench's prompt-processing tokens/s, or None when it cannot run this model."""
    command = [binary, "-m", model, "-t", str(threads), "-n", "0", "-r", "3", "-o", "json"]
    command += ["-p", "128", "-embd", "1"] if encoder else ["-p", "512"]
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=600)
        return float(json.loads(done.stdout)[0]["avg_ts"])
    except (OSError, subprocess.SubprocessError, ValueError, LookupError, TypeError):
        return None


def chat_rate(engine: Engine) -> tuple[float, float]:
    """One 64-token chat: tokens over its whole time (from the call, so waiting for a decode
    in flight counts), and its decode rate (tokens after the first over first to last)."""
    request = ChatRequest(
        messages=[ChatMessage(role="user", content="Tell me about rivers.")],
        max_tokens=64,
        ignore_eos=True,
    )
    start = time.perf_counter()
    first = last = None
    tokens = 0
    for chunk in engine.stream(request):
        if chunk.token_ids:
            last = time.perf_counter()
            first = first or last
            tokens += len(chunk.token_ids)
    assert first is not None and last is not None
    return tokens / (time.perf_counter() - start), (tokens - 1) / max(1e-9, last - first)


def chat_while_embedding(engine: Engine, texts: list[str]) -> dict[str, float]:
    alone = [chat_rate(engine) for _ in range(2)]
    worker = threading.Thread(target=engine.embed, args=(texts,), kwargs={"truncate": True})
    worker.start()
    time.sleep(0.5)  # the corpus job is in the queue and decoding
    during = [chat_rate(engine) for _ in range(3) if worker.is_alive()]
    worker.join()
    nan = float("nan")
    return {
        "chat_alone_tps": max(r[0] for r in alone),
        "chat_during_tps": min((r[0] for r in during), default=nan),
        "chat_alone_decode_tps": max(r[1] for r in alone),
        "chat_during_decode_tps": min((r[1] for r in during), default=nan),
    }


def print_chat(row: dict[str, float]) -> None:
    for label, key in (("whole request", "tps"), ("decode rate", "decode_tps")):
        during, alone = row[f"chat_during_{key}"], row[f"chat_alone_{key}"]
        print(
            f"chat while embedding / chat alone, {label}: {during:.1f} / {alone:.1f} tokens/s"
            f" = {during / alone:.2f}x"
        )


def start_server(binary: str, model: str, threads: int, pooling: str | None) -> LlamaServerProcess:
    extra = ["--embeddings", "-b", "2048", "-ub", "2048"]
    if pooling:
        extra += ["--pooling", pooling]
    if cpu_advertises_amx():
        extra.append("--no-repack")
    server = LlamaServerProcess(
        Path(binary), Path(model), port=PORT, threads=threads, slots=4, n_ctx_per_slot=2048,
        extra=tuple(extra),
    )  # fmt: skip
    try:
        return server.start()
    except RuntimeError as error:
        server.close()
        sys.exit(str(error))


def server_side(texts: list[str]) -> dict[str, Any]:
    batches = [texts[i : i + 32] for i in range(0, len(texts), 32)]
    lock = threading.Lock()
    count = [0]

    def post(batch: list[str]) -> None:
        connection = http.client.HTTPConnection("127.0.0.1", PORT, timeout=3600)
        body = json.dumps({"input": batch})
        connection.request("POST", "/v1/embeddings", body, {"Content-Type": "application/json"})
        data = json.loads(connection.getresponse().read())
        with lock:
            count[0] += len(data["data"])

    def run(index: int) -> None:
        for batch in batches[index::4]:
            post(batch)

    post(texts[:8])  # warm-up
    count[0] = 0
    start = time.perf_counter()
    threads = [threading.Thread(target=run, args=(i,)) for i in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    wall = time.perf_counter() - start
    assert count[0] == len(texts), count
    return {"wall_s": wall}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default="smollm2-135m")
    parser.add_argument("--encoder", action="store_true", help="the tiny random BERT encoder")
    parser.add_argument("--texts", type=int, default=2000)
    parser.add_argument("--server", default=".cache/llama-server/build/bin/llama-server")
    parser.add_argument("--llama-bench", default=None, help="a llama-bench binary, if built")
    parser.add_argument("--json", default=None)
    parser.add_argument(
        "--chat-only", action="store_true", help="only chat speed while the corpus is embedded"
    )
    args = parser.parse_args()
    threads = os.cpu_count() or 1
    load_before = os.getloadavg()[0]
    if args.encoder:
        from tests.fixtures.tiny_encoder import build_tiny_encoder

        model = str(build_tiny_encoder(Path(tempfile.mkdtemp()) / "tiny-bert.gguf"))
    else:
        model = str(resolve_model_path(args.model))
    # The tiny encoder spells most of these words letter by letter and knows 128 positions.
    texts = corpus(args.texts, 20 if args.encoder else 360)
    row: dict[str, Any] = {}
    if args.chat_only:
        with Engine(model=model, n_threads=threads) as engine:
            print_chat(chat_while_embedding(engine, texts))
        return
    with Engine(model=model, n_threads=threads) as engine:
        limit = min(engine.config.embedding_n_ctx, engine.info.n_ctx_train)
        n_tokens = sum(min(len(engine.tokenize(t, add_special=True)), limit) for t in texts)
        mine = ours(engine, texts)
        if not engine.embedding_only:
            row.update(chat_while_embedding(engine, texts))
            if not args.llama_bench:
                row["ceiling_tps"] = ceiling(engine)
                row["ceiling"] = "our generation context, one 512-token prompt, best of 3"
        pooling = None if engine.embedding_only else "mean"
    if args.llama_bench:
        bench = llama_bench_pp(args.llama_bench, model, threads, args.encoder)
        if bench is not None:
            row["ceiling_tps"] = bench
            row["ceiling"] = f"llama-bench pp{128 if args.encoder else 512}, 3 runs"
        elif not args.encoder:
            with Engine(model=model, n_threads=threads) as engine:
                row["ceiling_tps"] = ceiling(engine)
            row["ceiling"] = "llama-bench failed; our generation context, 512 tokens, best of 3"
        else:
            row["ceiling"] = "none: llama-bench failed on this model"
    server = start_server(args.server, model, threads, pooling)
    try:
        theirs = server_side(texts)
    finally:
        server.close()
    ours_tps = n_tokens / mine["wall_s"]
    server_tps = n_tokens / theirs["wall_s"]
    name = "tiny BERT encoder" if args.encoder else Path(model).name
    print(
        f"# Corpus embedding: {len(texts)} texts, {n_tokens} tokens, {name}, {threads} threads, "
        f"1-min load {load_before:.2f} before\n"
    )
    print("| side | texts/s | tokens/s |")
    print("|---|---:|---:|")
    print(f"| ours (Engine.embed) | {len(texts) / mine['wall_s']:.1f} | {ours_tps:.0f} |")
    print(
        f"| llama-server /v1/embeddings | {len(texts) / theirs['wall_s']:.1f} | {server_tps:.0f} |"
    )
    if "ceiling_tps" in row:
        print(f"| ceiling ({row['ceiling']}) | | {row['ceiling_tps']:.0f} |")
    print(f"\nours / llama-server: {ours_tps / server_tps:.2f}x")
    if "ceiling_tps" in row:
        print(f"ours / ceiling: {ours_tps / row['ceiling_tps']:.2f}x")
    else:
        print(f"ours / ceiling: n/a ({row.get('ceiling', 'no ceiling for this model')})")
    if "chat_alone_tps" in row:
        print_chat(row)
    row["ours_tps"], row["server_tps"] = ours_tps, server_tps
    row["ours_texts_per_s"] = len(texts) / mine["wall_s"]
    row["server_texts_per_s"] = len(texts) / theirs["wall_s"]
    load = os.getloadavg()[0]
    results.write(
        args.json,
        "embedding_corpus_encoder" if args.encoder else "embedding_corpus",
        {
            "model": name,
            "texts": len(texts),
            "tokens": n_tokens,
            "threads": threads,
            "load_1min_before": round(load_before, 2),
            "load_1min_after": round(load, 2),
        },
        ours=mine,
        server=theirs,
        **row,
    )


if __name__ == "__main__":
    main()
