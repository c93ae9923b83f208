"""Embedding texts through a llama-server started with ``--embeddings``: our ``RemoteEngine``
(one text a request, one request at a time) beside ``langchain_openai.OpenAIEmbeddings`` on the
server's ``/v1/embeddings`` (every text in one request), and our local ``Engine.embed`` on the
same GGUF for scale.

One server (SmolLM2 by default, mean pooling, ``--slots`` slots of 512 tokens, both cores'
threads) serves both remote peers; the three take turns ``--rounds`` times, the order rotating
each round, so one llama.cpp is busy at a time. Reported: texts/s per peer (median round) and
ratios to ``OpenAIEmbeddings``, and how closely each peer's vectors agree with each text
embedded alone by the server (the lowest cosine over the first 16 texts): the tested server
build gives texts it embeds side by side vectors that are not theirs.

    python benchmarks/remote_embeddings.py --server .cache/llama-server/build/bin/llama-server
"""

from __future__ import annotations

import argparse
import math
import os
import statistics
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path

import results
from langchain_openai import OpenAIEmbeddings

from llamacpp_integrations.engine import Engine
from llamacpp_integrations.models import resolve_model_path
from llamacpp_integrations.remote import RemoteEngine

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from tests.live.llama_servers import LlamaServerProcess

SUBJECTS = ["river", "mountain", "library", "harbour", "orchard", "glacier", "market", "forest"]
Embed = Callable[[Sequence[str]], list[list[float]]]


def corpus(n: int, words: int) -> list[str]:
    """``n`` distinct texts of about ``words`` words."""
    texts = []
    for i in range(n):
        subject = SUBJECTS[i % len(SUBJECTS)]
        filler = " ".join(f"{subject}{(i * 7 + k) % 50}" for k in range(max(0, words - 6)))
        texts.append(f"Note {i} about the {subject}: {filler}.")
    return texts


def cosine(a: Sequence[float], b: Sequence[float]) -> float:
    dot = sum(x * y for x, y in zip(a, b, strict=True))
    return dot / math.sqrt(sum(x * x for x in a) * sum(y * y for y in b))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--server", default=results.LLAMA_SERVER)
    parser.add_argument("--model", default="smollm2-135m")
    parser.add_argument("--texts", type=int, default=128)
    parser.add_argument("--words", type=int, default=16, help="words per text, about")
    parser.add_argument("--slots", type=int, default=4, help="llama-server slots (-np)")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--json", default=None, help="also write the results to this file")
    args = parser.parse_args()
    if not Path(args.server).exists():
        sys.exit(f"no llama-server at {args.server}: run `make llama-server` first")
    texts = corpus(args.texts, args.words)
    threads = os.cpu_count() or 2
    server = LlamaServerProcess(
        Path(args.server),
        Path(resolve_model_path(args.model)),
        threads=threads,
        slots=args.slots,
        n_ctx_per_slot=512,
        extra=("--embeddings", "--pooling", "mean"),
    )
    server.start()
    local = Engine(model=args.model, n_threads=threads)
    try:
        remote = RemoteEngine(server.url, embeddings_url=server.url)
        openai = OpenAIEmbeddings(
            base_url=f"{server.url}/v1",
            api_key="unused",  # type: ignore[arg-type]
            model="local",
            # Its length check tokenizes with OpenAI's tokenizer (tiktoken), not the model's.
            check_embedding_ctx_length=False,
        )
        peers: dict[str, Embed] = {
            "OpenAIEmbeddings, one request": openai.embed_documents,
            "RemoteEngine, one text at a time": remote.embed,
            "Engine.embed (local)": local.embed,
        }
        for embed in peers.values():
            embed(["warm up"])
        print(
            f"llama-server --embeddings, {threads} threads, {args.slots} slots of 512 tokens; "
            f"{args.texts} texts of about {args.words} words, {args.rounds} rounds"
        )
        rates: dict[str, list[float]] = {name: [] for name in peers}
        vectors: dict[str, list[list[float]]] = {}
        names = list(peers)
        for round_ in range(args.rounds):
            for name in names[round_ % len(names) :] + names[: round_ % len(names)]:
                start = time.perf_counter()
                vectors[name] = peers[name](texts)
                rates[name].append(len(texts) / (time.perf_counter() - start))
        alone = [remote.embed([text])[0] for text in texts[:16]]
        agreement = {
            name: min(cosine(a, b) for a, b in zip(alone, got[:16], strict=True))
            for name, got in vectors.items()
        }
        remote.close()
    finally:
        local.close()
        server.close()
    base = statistics.median(rates[names[0]])
    print("\n| peer | texts/s (median) | vs OpenAIEmbeddings | lowest cosine to alone |")
    print("|---|---:|---:|---:|")
    for name in names:
        rate = statistics.median(rates[name])
        print(f"| {name} | {rate:.1f} | {rate / base:.2f}x | {agreement[name]:.4f} |")
    results.write(
        args.json,
        "remote_embeddings",
        {
            "model": args.model,
            "texts": args.texts,
            "words": args.words,
            "slots": args.slots,
            "threads": threads,
            "rounds": args.rounds,
            # The server every remote peer calls, as run; the local engine's settings: n_threads.
            "llama_server_flags": results.server_flags(server.command),
        },
        peers=[
            {
                "peer": name,
                "texts_per_s": rates[name],
                "median_texts_per_s": statistics.median(rates[name]),
                "lowest_cosine_to_alone": agreement[name],
            }
            for name in names
        ],
    )


if __name__ == "__main__":
    main()
