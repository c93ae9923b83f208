"""Random-weight llama models of 0.5B to 3B parameters for the GPU check, written where it runs
(no model travels in the bundle), on a real tokenizer: SmolLM2-135M-Instruct's ``tokenizer.*``
keys (vocabulary, merges, special tokens, chat template), read once when the bundle is made
and kept beside it as compressed JSON.

The weights mean nothing (greedy answers are random tokens); what is measured is the time a
step takes, which depends on the shapes only. Drawing billions of normals would take longer
than the measurements, so each tensor is a window into one pool of N(0, 0.02) values at its
own offset: as fast as the disk writes, and no two tensors alike. Norms are ones. The token
embeddings are also the output head (tied), as in the small Llama and SmolLM models.

    python random_models.py --tokenizer tokenizer.json.xz --out models/ --sizes 0.5b,1.5b,3b
    python random_models.py --extract SmolLM2-135M-Instruct.Q4_1.gguf \
        --tokenizer tokenizer.json.xz

Needs numpy and gguf only (the bundle's venv, or this repository's).
"""

from __future__ import annotations

import argparse
import json
import lzma
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from gguf import GGUFReader, GGUFValueType, GGUFWriter

__all__ = ["SIZES", "Shape", "extract_tokenizer", "load_tokenizer", "save_tokenizer", "write_model"]

STD = 0.02


@dataclass(frozen=True)
class Shape:
    """A llama model's shape (grouped-query attention, SwiGLU feed-forward, tied head)."""

    n_embd: int
    n_layer: int
    n_head: int
    n_head_kv: int
    n_ff: int
    n_ctx: int = 32768

    def n_params(self, n_vocab: int) -> int:
        head_dim = self.n_embd // self.n_head
        attention = 2 * self.n_embd * self.n_embd + 2 * self.n_embd * head_dim * self.n_head_kv
        per_layer = attention + 3 * self.n_embd * self.n_ff + 2 * self.n_embd
        return n_vocab * self.n_embd + self.n_layer * per_layer + self.n_embd


# With SmolLM2's 49,152 tokens: about 16M, 0.49B, 1.56B and 2.97B parameters.
SIZES = {
    "tiny": Shape(n_embd=256, n_layer=4, n_head=4, n_head_kv=2, n_ff=768),
    "0.5b": Shape(n_embd=1024, n_layer=24, n_head=16, n_head_kv=4, n_ff=5120),
    "1.5b": Shape(n_embd=2048, n_layer=24, n_head=16, n_head_kv=4, n_ff=8192),
    "3b": Shape(n_embd=3072, n_layer=28, n_head=24, n_head_kv=8, n_ff=8192),
}

# A tokenizer as saved: every ``tokenizer.*`` key with its GGUF type (and element type).
Entry = dict[str, Any]


def extract_tokenizer(source: Path) -> list[Entry]:
    """Every ``tokenizer.*`` key of the GGUF ``source``: key, type, element type, value."""
    reader = GGUFReader(source)
    entries: list[Entry] = []
    for key, field in reader.fields.items():
        if not key.startswith("tokenizer."):
            continue
        vtype = field.types[0]
        value = field.contents()
        entries.append(
            {
                "key": key,
                "type": int(vtype),
                "sub_type": int(field.types[-1]) if vtype == GGUFValueType.ARRAY else None,
                "value": list(value) if vtype == GGUFValueType.ARRAY else value,
            }
        )
    return entries


def save_tokenizer(entries: list[Entry], path: Path) -> None:
    path.write_bytes(lzma.compress(json.dumps(entries).encode(), preset=9))


def load_tokenizer(path: Path) -> list[Entry]:
    entries: list[Entry] = json.loads(lzma.decompress(path.read_bytes()))
    return entries


def vocab_size(entries: list[Entry]) -> int:
    (tokens,) = (e["value"] for e in entries if e["key"] == "tokenizer.ggml.tokens")
    return len(tokens)


def write_model(path: Path, name: str, shape: Shape, tokenizer: list[Entry], seed: int = 0) -> Path:
    """Write a random-weight llama GGUF (f16 matrices, f32 norms) of ``shape`` to ``path``."""
    n_vocab = vocab_size(tokenizer)
    writer = GGUFWriter(path, arch="llama")
    writer.add_type("model")
    writer.add_name(f"random-llama-{name}")
    writer.add_description("random weights for timing a GPU; not a language model")
    writer.add_file_type(1)  # mostly f16
    writer.add_context_length(shape.n_ctx)
    writer.add_embedding_length(shape.n_embd)
    writer.add_block_count(shape.n_layer)
    writer.add_feed_forward_length(shape.n_ff)
    writer.add_head_count(shape.n_head)
    writer.add_head_count_kv(shape.n_head_kv)
    writer.add_layer_norm_rms_eps(1e-5)
    writer.add_rope_freq_base(10000.0)
    writer.add_rope_dimension_count(shape.n_embd // shape.n_head)
    writer.add_vocab_size(n_vocab)
    for entry in tokenizer:
        sub_type = GGUFValueType(entry["sub_type"]) if entry["sub_type"] is not None else None
        writer.add_key_value(entry["key"], entry["value"], GGUFValueType(entry["type"]), sub_type)
    for tensor_name, data in _tensors(shape, n_vocab, seed).items():
        writer.add_tensor(tensor_name, data)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path


def _tensors(shape: Shape, n_vocab: int, seed: int) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    d = shape.n_embd
    n_kv = d // shape.n_head * shape.n_head_kv
    largest = max(n_vocab * d, shape.n_ff * d)
    # One pool a little larger than the largest tensor; each tensor a view at its own offset.
    pool = (rng.standard_normal(largest + (1 << 20), dtype=np.float32) * STD).astype(np.float16)

    def window(*dims: int) -> np.ndarray:
        size = int(np.prod(dims))
        start = int(rng.integers(0, pool.size - size + 1))
        return pool[start : start + size].reshape(dims)

    ones = np.ones(d, dtype=np.float32)
    tensors: dict[str, np.ndarray] = {
        "token_embd.weight": window(n_vocab, d),
        "output_norm.weight": ones,
    }
    for il in range(shape.n_layer):
        blk = f"blk.{il}"
        tensors |= {
            f"{blk}.attn_norm.weight": ones,
            f"{blk}.attn_q.weight": window(d, d),
            f"{blk}.attn_k.weight": window(n_kv, d),
            f"{blk}.attn_v.weight": window(n_kv, d),
            f"{blk}.attn_output.weight": window(d, d),
            f"{blk}.ffn_norm.weight": ones,
            f"{blk}.ffn_gate.weight": window(shape.n_ff, d),
            f"{blk}.ffn_up.weight": window(shape.n_ff, d),
            f"{blk}.ffn_down.weight": window(d, shape.n_ff),
        }
    return tensors


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tokenizer", type=Path, required=True)
    parser.add_argument("--extract", type=Path, help="write --tokenizer from this GGUF")
    parser.add_argument("--out", type=Path, help="where to write the models")
    parser.add_argument("--sizes", default="0.5b,1.5b,3b", help=f"of {', '.join(SIZES)}")
    args = parser.parse_args()
    if args.extract is not None:
        save_tokenizer(extract_tokenizer(args.extract), args.tokenizer)
        return
    if args.out is None:
        parser.error("--out is needed to write models")
    tokenizer = load_tokenizer(args.tokenizer)
    args.out.mkdir(parents=True, exist_ok=True)
    for name in args.sizes.split(","):
        path = args.out / f"random-llama-{name}.f16.gguf"
        if path.exists():
            print(f"models: {path} is there")
            continue
        shape = SIZES[name]
        partial = path.with_suffix(".part")
        write_model(partial, name, shape, tokenizer)
        partial.rename(path)
        n_params = shape.n_params(vocab_size(tokenizer))
        print(f"models: {path} ({n_params / 1e9:.2f}B parameters)", flush=True)


if __name__ == "__main__":
    main()
