"""A tiny random-weight audio projector ("mmproj") GGUF for audio tests.

`build_tiny_audio_projector` writes, with `gguf.GGUFWriter` and numpy only, an Ultravox-type
audio projector that libmtmd (the llama.cpp build bundled with llama-cpp-python 0.3.36) loads
beside a text model whose input embedding width is `n_embd` (576: SmolLM2-135M). The file is
about 1.5 MiB; `mtmd_support_audio` is true for it and `mtmd_get_audio_sample_rate` is 16000.

What it proves, and what it cannot
----------------------------------
The plumbing: audio bytes are decoded and resampled by mtmd's helper, turned into a log-mel
spectrogram, cut into Whisper's 30-second chunks, encoded, projected and decoded into the
sequence, so that the text model's next-token logits depend on the clip. The weights are random:
no test may check what the answer says.

Why Ultravox
------------
Of the Whisper-encoder projectors clip.cpp loads (Ultravox, Qwen2-Audio, Voxtral, ...), Ultravox
puts no marker text around the audio embeddings, so it works beside any text model (as the
``mlp`` image projector does in ``tiny_projector.py``).

Shape
-----
Whisper's preprocessor gives 3000 mel frames per 30-second chunk (a shorter clip is padded to
one chunk); the second convolution halves them to 1500 positions, and stacking them by 60
gives **25 audio embeddings per chunk** (real Ultravox stacks by 8: 187 per chunk; few
embeddings keep the tests' prompts short). The stack factor must divide 1500: otherwise
clip.cpp's token count and its graph disagree by one. Encoder: 16 mel bins, width 32,
2 heads, feed-forward 64, one layer; Ultravox head: RMS norm, a SwiGLU layer (hidden 64), RMS
norm, projection to `n_embd`.

Keys written
------------
``clip.has_audio_encoder`` = true, ``clip.projector_type`` = "ultravox",
``clip.audio.{embedding_length, feed_forward_length, block_count, projection_dim,
attention.head_count, attention.layer_norm_epsilon, num_mel_bins, projector.stack_factor}``.

Tensors (numpy shapes; ggml's `ne` is the reverse)
--------------------------------------------------
``a.conv1d.1.weight`` (32, 16, 3), ``a.conv1d.2.weight`` (32, 32, 3), their biases (32, 1);
``a.position_embd.weight`` (1500, 32); per layer ``a.blk.0.attn_{q,v,out}.{weight,bias}``,
``attn_k.weight`` (Whisper's key has no bias; the graph asserts it), ``ln1``/``ln2``,
``ffn_up`` (64, 32), ``ffn_down`` (32, 64) with biases; ``a.post_ln``; ``mm.a.norm_pre.weight``
(1920,), ``mm.a.mlp.1.weight`` (128, 1920), ``mm.a.norm_mid.weight`` (64,),
``mm.a.mlp.2.weight`` (n_embd, 64).
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
from gguf import GGUFWriter

SAMPLE_RATE = 16000
"""The rate libmtmd resamples every clip to for this projector (Whisper's)."""

TOKENS_PER_CHUNK = 25
"""Audio embeddings per 30-second chunk (a shorter clip is one chunk)."""

_N_MEL = 16
_WIDTH = 32
_N_HEAD = 2
_N_FF = 64
_N_POS = 1500  # positions after the stride-2 convolution, per 3000-frame chunk
_STACK = 60
_HIDDEN = 64


def build_tiny_audio_projector(
    path: Path, *, n_embd: int = 576, seed: int = 0, embd_rms: float = 0.13
) -> Path:
    """Write a tiny random-weight Ultravox mmproj GGUF for a text model of width `n_embd`.

    `embd_rms` is the per-element RMS wanted for the audio embeddings (about SmolLM2-135M's
    own token embeddings by default). Returns `path`.
    """
    if n_embd <= 0:
        raise ValueError(f"n_embd must be positive, got {n_embd}")
    rng = np.random.default_rng(seed)

    def normal(*shape: int, std: float = 0.02) -> np.ndarray:
        return rng.normal(0.0, std, size=shape).astype(np.float32)

    d = _WIDTH
    tensors: dict[str, np.ndarray] = {
        # unit-ish activations out of the convolutions: std 1/sqrt(fan_in)
        "a.conv1d.1.weight": normal(d, _N_MEL, 3, std=1.0 / np.sqrt(3 * _N_MEL)),
        "a.conv1d.1.bias": np.zeros((d, 1), dtype=np.float32),
        "a.conv1d.2.weight": normal(d, d, 3, std=1.0 / np.sqrt(3 * d)),
        "a.conv1d.2.bias": np.zeros((d, 1), dtype=np.float32),
        "a.position_embd.weight": normal(_N_POS, d),
    }
    blk = "a.blk.0"
    for name in ("attn_q", "attn_v", "attn_out"):
        tensors[f"{blk}.{name}.weight"] = normal(d, d)
        tensors[f"{blk}.{name}.bias"] = _zeros(d)
    tensors[f"{blk}.attn_k.weight"] = normal(d, d)
    for name in ("ln1", "ln2"):
        tensors[f"{blk}.{name}.weight"] = _ones(d)
        tensors[f"{blk}.{name}.bias"] = _zeros(d)
    tensors[f"{blk}.ffn_up.weight"] = normal(_N_FF, d)
    tensors[f"{blk}.ffn_up.bias"] = _zeros(_N_FF)
    tensors[f"{blk}.ffn_down.weight"] = normal(d, _N_FF)
    tensors[f"{blk}.ffn_down.bias"] = _zeros(d)
    tensors["a.post_ln.weight"] = _ones(d)
    tensors["a.post_ln.bias"] = _zeros(d)
    stacked = d * _STACK
    tensors["mm.a.norm_pre.weight"] = _ones(stacked)
    tensors["mm.a.mlp.1.weight"] = normal(2 * _HIDDEN, stacked, std=1.0 / np.sqrt(stacked))
    tensors["mm.a.norm_mid.weight"] = _ones(_HIDDEN)
    # after the mid RMS norm the hidden vector has unit RMS
    tensors["mm.a.mlp.2.weight"] = normal(n_embd, _HIDDEN, std=embd_rms / np.sqrt(_HIDDEN))

    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    writer = GGUFWriter(path, arch="clip")
    writer.add_type("mmproj")
    writer.add_name("tiny-random-ultravox-mmproj")
    writer.add_description("random weights for plumbing tests; not a real audio model")
    writer.add_file_type(0)  # all f32
    writer.add_bool("clip.has_audio_encoder", True)
    writer.add_string("clip.projector_type", "ultravox")
    writer.add_uint32("clip.audio.embedding_length", d)
    writer.add_uint32("clip.audio.feed_forward_length", _N_FF)
    writer.add_uint32("clip.audio.block_count", 1)
    writer.add_uint32("clip.audio.projection_dim", n_embd)
    writer.add_uint32("clip.audio.attention.head_count", _N_HEAD)
    writer.add_float32("clip.audio.attention.layer_norm_epsilon", 1e-5)
    writer.add_uint32("clip.audio.num_mel_bins", _N_MEL)
    writer.add_uint32("clip.audio.projector.stack_factor", _STACK)
    for name, data in tensors.items():
        writer.add_tensor(name, data)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path


def _ones(n: int) -> np.ndarray:
    return np.ones(n, dtype=np.float32)


def _zeros(n: int) -> np.ndarray:
    return np.zeros(n, dtype=np.float32)


def cached_tiny_audio_projector(n_embd: int = 576) -> Path:
    """`build_tiny_audio_projector`'s file, built once into `.cache/projectors`."""
    folder = Path(__file__).resolve().parents[2] / ".cache" / "projectors"
    path = folder / f"tiny-ultravox-s60-{n_embd}.gguf"
    if not path.exists():
        folder.mkdir(parents=True, exist_ok=True)
        partial = path.with_suffix(f".{os.getpid()}.part")
        build_tiny_audio_projector(partial, n_embd=n_embd)
        partial.replace(path)  # atomic: a concurrent run never reads half a file
    return path
