"""Indexing a corpus: our engine against ``llama-server --embeddings`` and the prompt-processing
ceiling, on mixed-length texts; and chat speed while the corpus is embedded.

``--texts`` texts (2,000 by default) of 10 to 400 tokens, the same list for every side:

* **ours**: ``Engine.embed`` (the engine packs each call into decodes).
* **llama-server**: llama.cpp's C++ server from the same vendored sources, ``--embeddings``
  with the same pooling and threads (``--no-repack`` where ours turns repacking off), 4 slots of
  2,048 tokens, ``/v1/embeddings`` requests of 32 texts from 4 client threads.
* **ceiling**: llama.cpp's prompt processing rate. With ``--llama-bench PATH``, llama-bench's
  pp512 on the same model and threads (``-p 512 -n 0 -r 3 -o json``; ``-embd 1 -p 128`` for the
  encoder, which knows 128 positions). Without it, or where llama-bench fails on the model, one
  512-token prompt decoded in one sequence by our generation context, best of 3 (only for
  models that generate). The output says which was used.

Both sides stay loaded and take turns chunk by chunk (``--chunk`` texts, the order flipping
each chunk), so load from elsewhere on the machine falls on both alike; only one side is busy
at a time. Every fourth of our chunks also carries a chat: one greedy 64-token chat alone on
the idle engine just before the chunk (not timed), then the same chat started half a second
into the chunk. The headline ratio compares the two sides on the chunks without a chat; the
chat chunks are reported apart. **Short texts**: the issue's first measurement, 64 texts of
about 23 tokens, 5 rounds, taking turns the same way.

    python benchmarks/embedding_corpus.py --server PATH [--llama-bench PATH]
        [--model smollm2-135m] [--texts 2000] [--chunk 100] [--json PATH]
        [--encoder]   # the tiny random BERT encoder of tests/builders instead of --model
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import random
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import results

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from llamacpp_integrations.engine import ChatMessage, ChatRequest, CompletionRequest, Engine
from llamacpp_integrations.engine.native.runner import cpu_advertises_amx
from llamacpp_integrations.models import resolve_model_path
from tests.live.llama_servers import LlamaServerProcess

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


CHAT_EVERY = 4
"""Every fourth of our chunks carries a chat."""
SHORT_ROUNDS = 5


def short_texts(n: int = 64) -> list[str]:
    """The issue's first measurement: texts of about 23 tokens."""
    rng = random.Random(11)
    return [" ".join(rng.choice(WORDS) for _ in range(20)) + f" ({i})" for i in range(n)]


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


def embed_with_chat(engine: Engine, texts: list[str]) -> tuple[float, tuple[float, float] | None]:
    """Embed ``texts`` with a chat started half a second in: the embed's seconds, and the chat's
    rates (None when the embedding ended before the chat did, so it did not run alongside)."""
    done: list[float] = []

    def embed() -> None:
        start = time.perf_counter()
        engine.embed(texts, truncate=True)
        done.append(time.perf_counter() - start)

    worker = threading.Thread(target=embed)
    worker.start()
    time.sleep(0.5)
    rates = chat_rate(engine)
    alongside = worker.is_alive()
    worker.join()
    return done[0], rates if alongside else None


class ServerClient:
    """Sends texts to llama-server as requests of 32 from 4 client threads."""

    def __init__(self, port: int) -> None:
        self.port = port

    def _post(self, batch: list[str]) -> int:
        connection = http.client.HTTPConnection("127.0.0.1", self.port, timeout=3600)
        body = json.dumps({"input": batch})
        connection.request("POST", "/v1/embeddings", body, {"Content-Type": "application/json"})
        data = json.loads(connection.getresponse().read())
        connection.close()
        return len(data["data"])

    def embed(self, texts: list[str]) -> None:
        batches = [texts[i : i + 32] for i in range(0, len(texts), 32)]
        counts = [0] * 4

        def run(index: int) -> None:
            counts[index] = sum(self._post(batch) for batch in batches[index::4])

        threads = [threading.Thread(target=run, args=(i,)) for i in range(4)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        assert sum(counts) == len(texts), counts


def timed(run: Callable[[list[str]], Any], texts: list[str]) -> float:
    start = time.perf_counter()
    run(texts)
    return time.perf_counter() - start


def take_turns(
    engine: Engine, server: ServerClient, chunks: list[list[str]], chats: bool
) -> dict[str, Any]:
    """Each chunk on both sides, the order flipping each chunk; with ``chats``, every
    CHAT_EVERY-th chunk of ours carries a chat. Seconds per chunk and side, and the chats."""
    ours_s: list[float] = []
    server_s: list[float] = []
    alone: list[tuple[float, float]] = []
    during: list[tuple[float, float]] = []
    chat_chunks: list[int] = []

    def ours_side(index: int, chunk: list[str]) -> float:
        if not (chats and index % CHAT_EVERY == CHAT_EVERY - 1):
            return timed(lambda t: engine.embed(t, truncate=True), chunk)
        alone.append(chat_rate(engine))  # the engine is idle here; not timed
        seconds, rates = embed_with_chat(engine, chunk)
        chat_chunks.append(index)
        if rates is not None:
            during.append(rates)
        return seconds

    for index, chunk in enumerate(chunks):
        if index % 2 == 0:
            ours_s.append(ours_side(index, chunk))
            server_s.append(timed(server.embed, chunk))
        else:
            server_s.append(timed(server.embed, chunk))
            ours_s.append(ours_side(index, chunk))
        print(
            f"  chunk {index + 1}/{len(chunks)}: ours {ours_s[-1]:.1f} s, "
            f"llama-server {server_s[-1]:.1f} s",
            flush=True,
        )
    return {
        "ours_s": ours_s,
        "server_s": server_s,
        "chat_chunks": chat_chunks,
        "chat_alone": alone,
        "chat_during": during,
    }


def chat_summary(
    alone: list[tuple[float, float]], during: list[tuple[float, float]]
) -> dict[str, float]:
    """Medians and the worst of the chats alone and alongside the corpus: whole-request rate
    (from the call, so waiting for a decode in flight counts) and decode rate."""
    if not alone or not during:
        return {}
    row = {}
    for position, key in ((0, "tps"), (1, "decode_tps")):
        row[f"chat_alone_{key}"] = statistics.median(r[position] for r in alone)
        row[f"chat_during_{key}"] = statistics.median(r[position] for r in during)
        row[f"chat_during_{key}_worst"] = min(r[position] for r in during)
    row["chats"] = len(during)
    return row


def print_chat(row: dict[str, float]) -> None:
    print(f"chats alongside the corpus: {row['chats']} (median; worst in brackets)")
    for label, key in (("whole request", "tps"), ("decode rate", "decode_tps")):
        during, alone = row[f"chat_during_{key}"], row[f"chat_alone_{key}"]
        worst = row[f"chat_during_{key}_worst"]
        print(
            f"chat while embedding / chat alone, {label}: {during:.1f} / {alone:.1f} tokens/s"
            f" = {during / alone:.2f}x ({worst / alone:.2f}x)"
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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default="smollm2-135m")
    parser.add_argument("--encoder", action="store_true", help="the tiny random BERT encoder")
    parser.add_argument("--texts", type=int, default=2000)
    parser.add_argument("--chunk", type=int, default=100, help="texts per turn")
    parser.add_argument("--server", default=".cache/llama-server/build/bin/llama-server")
    parser.add_argument("--llama-bench", default=None, help="a llama-bench binary, if built")
    parser.add_argument("--json", default=None)
    args = parser.parse_args()
    threads = os.cpu_count() or 1
    load_before = os.getloadavg()[0]
    if args.encoder:
        from tests.builders.tiny_encoder import build_tiny_encoder

        model = str(build_tiny_encoder(Path(tempfile.mkdtemp()) / "tiny-bert.gguf"))
    else:
        model = str(resolve_model_path(args.model))
    # The tiny encoder spells most of these words letter by letter and knows 128 positions.
    texts = corpus(args.texts, 20 if args.encoder else 360)
    short = short_texts()
    chunks = [texts[i : i + args.chunk] for i in range(0, len(texts), args.chunk)]
    row: dict[str, Any] = {}
    with Engine(model=model, n_threads=threads) as engine:
        limit = min(engine.config.embedding_n_ctx, engine.info.n_ctx_train)

        def count(batch: list[str]) -> int:
            return sum(min(len(engine.tokenize(t, add_special=True)), limit) for t in batch)

        chunk_tokens = [count(chunk) for chunk in chunks]
        short_tokens = count(short)
        chats = not engine.embedding_only
        pooling = None if engine.embedding_only else "mean"
        if chats and not args.llama_bench:
            row["ceiling_tps"] = ceiling(engine)
            row["ceiling"] = "our generation context, one 512-token prompt, best of 3"
        server_process = start_server(args.server, model, threads, pooling)
        try:
            server = ServerClient(server_process.port)
            engine.embed(texts[:8])  # makes the embedding context
            server.embed(texts[:8])
            print(
                f"{len(chunks)} chunks of {args.chunk} texts, {sum(chunk_tokens)} tokens",
                flush=True,
            )
            turns = take_turns(engine, server, chunks, chats)
            short_turns = take_turns(engine, server, [short] * SHORT_ROUNDS, chats=False)
            short_ours, short_server = sum(short_turns["ours_s"]), sum(short_turns["server_s"])
        finally:
            server_process.close()
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
    clean = [i for i in range(len(chunks)) if i not in turns["chat_chunks"]]
    tokens_clean = sum(chunk_tokens[i] for i in clean)
    texts_clean = sum(len(chunks[i]) for i in clean)
    ours_clean = sum(turns["ours_s"][i] for i in clean)
    server_clean = sum(turns["server_s"][i] for i in clean)
    n_tokens = sum(chunk_tokens)
    row.update(
        ours_tps=tokens_clean / ours_clean,
        server_tps=tokens_clean / server_clean,
        ours_texts_per_s=texts_clean / ours_clean,
        server_texts_per_s=texts_clean / server_clean,
        ours_tps_all=n_tokens / sum(turns["ours_s"]),
        server_tps_all=n_tokens / sum(turns["server_s"]),
        short_ours_texts_per_s=SHORT_ROUNDS * len(short) / short_ours,
        short_server_texts_per_s=SHORT_ROUNDS * len(short) / short_server,
        short_tokens=short_tokens,
        **chat_summary(turns["chat_alone"], turns["chat_during"]),
    )
    name = "tiny BERT encoder" if args.encoder else Path(model).name
    print(
        f"\n# Corpus embedding: {len(texts)} texts, {n_tokens} tokens, {name}, {threads} threads, "
        f"1-min load {load_before:.2f} before\n"
    )
    print(f"Chunks without a chat: {len(clean)} of {len(chunks)}, {tokens_clean} tokens.\n")
    print("| side | texts/s | tokens/s |")
    print("|---|---:|---:|")
    print(f"| ours (Engine.embed) | {row['ours_texts_per_s']:.1f} | {row['ours_tps']:.0f} |")
    print(
        f"| llama-server /v1/embeddings | {row['server_texts_per_s']:.1f} "
        f"| {row['server_tps']:.0f} |"
    )
    if "ceiling_tps" in row:
        print(f"| ceiling ({row['ceiling']}) | | {row['ceiling_tps']:.0f} |")
    print(f"\nours / llama-server: {row['ours_tps'] / row['server_tps']:.2f}x")
    print(
        f"all chunks, chat chunks included: ours {row['ours_tps_all']:.0f}, llama-server "
        f"{row['server_tps_all']:.0f} tokens/s = {row['ours_tps_all'] / row['server_tps_all']:.2f}x"
    )
    if "ceiling_tps" in row:
        print(f"ours / ceiling: {row['ours_tps'] / row['ceiling_tps']:.2f}x")
    else:
        print(f"ours / ceiling: n/a ({row.get('ceiling', 'no ceiling for this model')})")
    print(
        f"short texts ({len(short)} of about {short_tokens // len(short)} tokens, "
        f"{SHORT_ROUNDS} rounds): ours {row['short_ours_texts_per_s']:.1f}, llama-server "
        f"{row['short_server_texts_per_s']:.1f} texts/s = "
        f"{row['short_ours_texts_per_s'] / row['short_server_texts_per_s']:.2f}x"
    )
    if "chats" in row:
        print_chat(row)
    load = os.getloadavg()[0]
    results.write(
        args.json,
        "embedding_corpus_encoder" if args.encoder else "embedding_corpus",
        {
            "model": name,
            "texts": len(texts),
            "tokens": n_tokens,
            "chunk": args.chunk,
            "threads": threads,
            "load_1min_before": round(load_before, 2),
            "load_1min_after": round(load, 2),
            # The server's command line, as run (ours: Engine(model, n_threads) defaults).
            "llama_server_flags": results.server_flags(server_process.command),
        },
        ours={"seconds_per_chunk": turns["ours_s"]},
        server={"seconds_per_chunk": turns["server_s"]},
        chat_chunks=turns["chat_chunks"],
        **row,
    )


if __name__ == "__main__":
    main()
