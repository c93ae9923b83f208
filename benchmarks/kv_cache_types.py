"""KV cache types: bytes per cell, and how often a quantized cache picks the f16 cache's token.

For each model and cache type (the same type for K and V):

* bytes per cell: one token of context, all layers, K + V, from the GGUF header (block count,
  KV heads, key/value lengths or embedding length / heads) and ggml's block sizes; and what
  llama.cpp itself reports for the context it made (its ``llama_kv_cache`` log line), divided
  by the cells it holds. Models with sliding-window layers (Gemma 3) keep those layers in a
  second, small cache, so their reported bytes per cell of the main cache are lower.
* agreement with f16 over ``--tokens`` greedy tokens per prompt: the f16 cache generates
  greedily, one token per decode; every variant (f16 itself included, as the baseline: one
  decode of the whole text rounds differently from token-by-token decodes) is then fed the same
  tokens in one decode (teacher forcing) and the share of positions where its argmax is the f16
  token is reported, with the position of the first difference. Its own free-running greedy
  text is compared too, up to its first divergence. A quantized V cache needs flash attention,
  so ``f16+fa`` (f16 with flash attention) tells flash attention's share from quantization's.

It uses the engine's runner directly (one sequence, no sampler), so nothing but the cache type
differs between runs.

    python benchmarks/kv_cache_types.py [--tokens 200] [--json results/kv_cache_types.json]
"""

from __future__ import annotations

import argparse
import json
import logging
import re
from typing import Any

import numpy as np
import results

from llamacpp_integrations.engine import EngineConfig
from llamacpp_integrations.engine.batch import BatchEntry
from llamacpp_integrations.engine.native.runner import GenerationContext
from llamacpp_integrations.engine.native.weights import LoadedModel
from llamacpp_integrations.models import resolve_model_path

MODELS = ["smollm2-135m", "gemma3-270m"]
TYPES = ["f16", "q8_0", "q4_0"]
# A quantized V cache runs with flash attention (llama.cpp requires it), the f16 default without
# on the CPU; "f16+fa" separates what flash attention alone changes from what quantizing does.
VARIANTS = {
    "f16": ("f16", None),
    "f16+fa": ("f16", True),
    "q8_0": ("q8_0", None),
    "q4_0": ("q4_0", None),
}
PROMPTS = [
    "The history of the printing press begins",
    "Here is a short recipe for pancakes:\n1.",
    "def fibonacci(n):\n",
    "Q: Why do leaves change colour in autumn?\nA:",
    "The three largest cities in Europe are",
]
# Bytes per element: ggml stores quantized types in blocks of 32 values.
BYTES_PER_VALUE = {"f32": 4.0, "f16": 2.0, "bf16": 2.0, "q8_0": 34 / 32, "q4_0": 18 / 32}


def header_bytes_per_cell(path: str) -> dict[str, Any]:
    """K + V bytes of one cell over all layers, from the GGUF header, per cache type."""
    import gguf

    reader = gguf.GGUFReader(path)

    def value(key: str) -> Any:
        field = reader.fields.get(key)
        if field is None:
            return None
        part = field.parts[field.data[0]]
        if field.types[0] == gguf.GGUFValueType.STRING:
            return bytes(part).decode()
        return part.tolist()[0]

    arch = value("general.architecture")
    layers = value(f"{arch}.block_count")
    heads = value(f"{arch}.attention.head_count")
    kv_heads = value(f"{arch}.attention.head_count_kv") or heads
    width = value(f"{arch}.embedding_length")
    key_length = value(f"{arch}.attention.key_length") or width // heads
    value_length = value(f"{arch}.attention.value_length") or width // heads
    values = layers * kv_heads * (key_length + value_length)
    return {
        "architecture": arch,
        "layers": layers,
        "kv_heads": kv_heads,
        "key_length": key_length,
        "value_length": value_length,
        "sliding_window": value(f"{arch}.attention.sliding_window"),
        "values_per_cell": values,
        "bytes_per_cell": {t: values * BYTES_PER_VALUE[t] for t in TYPES},
    }


class KvLog(logging.Handler):
    """Collects llama.cpp's ``llama_kv_cache: size = ...`` lines."""

    def __init__(self) -> None:
        super().__init__(logging.INFO)
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        text = record.getMessage()
        if "llama_kv_cache" in text and "size =" in text:
            self.lines.append(text.strip())


def reported(lines: list[str]) -> list[dict[str, Any]]:
    """Each KV cache llama.cpp made: MiB, cells, and bytes per cell."""
    out = []
    for line in lines:
        match = re.search(r"size =\s*([\d.]+) MiB \(\s*(\d+) cells,\s*(\d+) layers", line)
        if match:
            mib, cells, layers = float(match[1]), int(match[2]), int(match[3])
            out.append(
                {
                    "line": line,
                    "mib": mib,
                    "cells": cells,
                    "layers": layers,
                    "bytes_per_cell": round(mib * 2**20 / cells, 1),
                }
            )
    return out


def context(model: LoadedModel, kind: str, flash: bool | None, n_ctx: int) -> GenerationContext:
    config = EngineConfig(type_k=kind, type_v=kind, flash_attention=flash)  # type: ignore[arg-type]
    return GenerationContext(
        model,
        n_ctx_per_seq=n_ctx,
        n_seq_max=1,
        n_batch=512,
        n_threads=config.threads,
        flash_attention=config.flash_attention_for(model.n_gpu_layers),
        kv_unified=False,
        tuning=config,
    )


def greedy(ctx: GenerationContext, prompt: list[int], n: int) -> list[int]:
    ctx.remove(0)
    entry = BatchEntry(0, prompt, 0, True)
    ctx.decode([entry])
    out: list[int] = []
    for _ in range(n):
        token = int(np.argmax(ctx.logits_view(entry.logits_index)))
        out.append(token)
        entry = BatchEntry(0, [token], len(prompt) + len(out) - 1, True)
        ctx.decode([entry])
    return out


def forced_argmax(ctx: GenerationContext, prompt: list[int], forced: list[int]) -> list[int]:
    """The argmax after the prompt and after each forced token but the last (one decode)."""
    ctx.remove(0)
    tokens = prompt + forced[:-1]
    # One entry per token keeps every position's logits in a single decode.
    entries = [BatchEntry(0, [t], i, i >= len(prompt) - 1) for i, t in enumerate(tokens)]
    ctx.decode(entries)
    return [int(np.argmax(ctx.logits_view(e.logits_index))) for e in entries if e.logits_last]


def first_difference(a: list[int], b: list[int]) -> int | None:
    return next((i for i, (x, y) in enumerate(zip(a, b, strict=True)) if x != y), None)


def measure(name: str, n_tokens: int) -> dict[str, Any]:
    path = str(resolve_model_path(name).resolve())
    header = header_bytes_per_cell(path)
    model = LoadedModel(resolve_model_path(name))
    n_ctx = 512
    runs: dict[str, Any] = {}
    reference: list[list[int]] = []
    prompts = [model.tokenize(p, add_special=True, parse_special=False) for p in PROMPTS]
    log = KvLog()
    cpp_logger = logging.getLogger("llamacpp_integrations.llama_cpp")
    cpp_logger.addHandler(log)
    cpp_logger.setLevel(logging.INFO)
    try:
        for variant, (kind, flash) in VARIANTS.items():
            log.lines.clear()
            ctx = context(model, kind, flash, n_ctx)
            try:
                caches = reported(log.lines)
                generated = [greedy(ctx, p, n_tokens) for p in prompts]
                entry: dict[str, Any] = {
                    "flash_attention": EngineConfig(
                        type_v=kind,
                        flash_attention=flash,  # type: ignore[arg-type]
                    ).flash_attention_for(0),
                    "reported_caches": caches,
                }
                if variant == "f16":
                    reference = generated
                # f16 against itself measures what batching alone changes (the baseline).
                forced = [forced_argmax(ctx, p, r) for p, r in zip(prompts, reference, strict=True)]
                same = sum(
                    int(x == y)
                    for f, r in zip(forced, reference, strict=True)
                    for x, y in zip(f, r, strict=True)
                )
                entry["teacher_forced_top1_agreement"] = same / (len(prompts) * n_tokens)
                entry["teacher_forced_first_difference"] = [
                    first_difference(f, r) for f, r in zip(forced, reference, strict=True)
                ]
                entry["free_running_first_divergence"] = [
                    first_difference(g, r) for g, r in zip(generated, reference, strict=True)
                ]
                entry["free_running_positions_equal"] = sum(
                    int(x == y)
                    for g, r in zip(generated, reference, strict=True)
                    for x, y in zip(g, r, strict=True)
                ) / (len(prompts) * n_tokens)
                runs[variant] = entry
            finally:
                ctx.close()
    finally:
        cpp_logger.removeHandler(log)
        model.close()
    return {"model": name, "file": path, "header": header, "types": runs}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--models", nargs="+", default=MODELS)
    parser.add_argument("--tokens", type=int, default=200)
    parser.add_argument("--json", default=None, help="also write the results to this file")
    args = parser.parse_args()
    measured = [measure(name, args.tokens) for name in args.models]
    print(json.dumps(measured, indent=1))
    results.write(
        args.json,
        "kv_cache_types",
        {"tokens": args.tokens, "prompts": PROMPTS, "variants": list(VARIANTS), "n_ctx": 512},
        models=measured,
    )


if __name__ == "__main__":
    main()
