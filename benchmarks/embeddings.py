"""Embeddings: our engine against langchain-community's ``LlamaCppEmbeddings``, same GGUF.

Both embed the same ``--texts`` short texts with ``embed_documents``, ``--repeat`` times; each
side runs in its own process, one after the other (two llama.cpp thread teams on the same cores
slow each other down). Reported: texts per second, and how many vectors came back per text.
langchain-community passes the texts to ``llama_cpp.Llama.create_embedding``; on a decoder
model with no pooling set it returns one vector per token, and the wrapper flattens them, so
the count is not one per text (what a vector store expects).

    python benchmarks/embeddings.py [--model smollm2-135m] [--texts 64] [--repeat 3]

Indexing a large mixed-length corpus against ``llama-server --embeddings`` and the
prompt-processing ceiling is ``embedding_corpus.py`` (``make bench-embeddings``).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
import warnings
from collections.abc import Callable
from typing import Any

import results

from llamacpp_integrations.models import resolve_model_path

TOPICS = [
    "rivers", "mountains", "owls", "bread", "glass", "copper", "tides", "comets",
    "maple trees", "lighthouses", "violins", "bees", "deserts", "glaciers", "kites", "salt",
]  # fmt: skip


def texts(n: int) -> list[str]:
    return [f"A short note about {TOPICS[i % len(TOPICS)]}, number {i}." for i in range(n)]


def ours(model: str, n: int, repeat: int) -> dict[str, Any]:
    from llamacpp_integrations.langchain import LlamaCppEmbeddings

    embeddings = LlamaCppEmbeddings(model=model)
    embeddings.embed_documents(texts(2))  # loads the model and makes its context
    return _measure(embeddings.embed_documents, n, repeat)


def peer(model: str, n: int, repeat: int) -> dict[str, Any]:
    warnings.simplefilter("ignore", DeprecationWarning)  # the package announces its sunset
    from langchain_community.embeddings import LlamaCppEmbeddings
    from throughput import match_weight_repacking

    match_weight_repacking()  # the same ggml kernels as ours
    embeddings = LlamaCppEmbeddings(model_path=model, n_threads=os.cpu_count(), verbose=False)
    embeddings.embed_documents(texts(2))
    return _measure(embeddings.embed_documents, n, repeat)


def _measure(embed: Callable[[list[str]], list[Any]], n: int, repeat: int) -> dict[str, Any]:
    batch = texts(n)
    walls: list[float] = []
    vectors = 0
    for _ in range(repeat):
        start = time.perf_counter()
        out = embed(batch)
        walls.append(time.perf_counter() - start)
        vectors = len(out)
    wall = statistics.median(walls)
    return {"wall_s": wall, "texts_per_s": n / wall, "vectors": vectors, "texts": n}


def run_side(side: str, model: str, n: int, repeat: int) -> dict[str, Any]:
    """One side in a process of its own; its result as JSON on the last line of stdout."""
    done = subprocess.run(
        [sys.executable, __file__, "--side", side, "--model", model,
         "--texts", str(n), "--repeat", str(repeat)],
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    if done.returncode != 0:
        return {"error": f"exit code {done.returncode}: {done.stderr.strip()[-300:]}"}
    result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default="smollm2-135m")
    parser.add_argument("--texts", type=int, default=64)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--side", choices=["ours", "peer"], default=None, help=argparse.SUPPRESS)
    parser.add_argument("--json", default=None, help="also write the results to this file")
    args = parser.parse_args()
    model = str(resolve_model_path(args.model))
    if args.side is not None:
        measure = ours if args.side == "ours" else peer
        print(json.dumps(measure(model, args.texts, args.repeat)))
        return
    mine = run_side("ours", model, args.texts, args.repeat)
    theirs = run_side("peer", model, args.texts, args.repeat)
    print(f"# Embeddings: {args.texts} short texts, embed_documents, median of {args.repeat}\n")
    print("| side | texts/s | vectors returned | wall |")
    print("|---|---:|---:|---:|")
    for name, side in (("ours", mine), ("langchain-community LlamaCppEmbeddings", theirs)):
        if "error" in side:
            print(f"| {name} | failed: {side['error']} | | |")
        else:
            print(
                f"| {name} | {side['texts_per_s']:.1f} | {side['vectors']:.0f} "
                f"| {side['wall_s']:.2f} s |"
            )
    results.write(
        args.json,
        "embeddings",
        {
            "model": model,
            "texts": args.texts,
            "repeat": args.repeat,
            "threads": os.cpu_count(),
            "peer": "langchain-community LlamaCppEmbeddings (llama-cpp-python Llama)",
            # Each side's constructor, as run (the rest: each package's defaults).
            "ours_settings": {"model": "the path above"},
            "peer_settings": {"model_path": "the path above", "n_threads": os.cpu_count()},
        },
        ours=mine,
        peer=theirs,
    )


if __name__ == "__main__":
    main()
