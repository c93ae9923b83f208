"""Loaded weights: one GGUF file's model and vocabulary, shared by every context built on them.

Like every module of ``engine/native/`` (the only folder that imports ``llama_cpp``), it
translates llama.cpp's return codes into this package's errors. ``LoadedModel`` is read-only
after loading and may be used from any thread (tokenizing, detokenizing); the contexts that
decode with it are in ``runner.py``.
"""

from __future__ import annotations

import ctypes
import sys
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import llama_cpp

from ...errors import ModelLoadError
from ..config import WeightsKey
from .llama_log import ROUTER
from .tuning import cpu_advertises_amx

__all__ = ["LoadedModel", "init_backend", "tokenize"]

_SPLIT_MODES = {
    "none": llama_cpp.LLAMA_SPLIT_MODE_NONE,
    "layer": llama_cpp.LLAMA_SPLIT_MODE_LAYER,
    "row": llama_cpp.LLAMA_SPLIT_MODE_ROW,
}

_BACKEND_LOCK = threading.Lock()
_BACKEND_READY: list[bool] = []


def init_backend() -> None:
    """Route llama.cpp's log and initialize its backend, once per process (before any load)."""
    ROUTER.install()
    with _BACKEND_LOCK:
        if not _BACKEND_READY:
            llama_cpp.llama_backend_init()
            _BACKEND_READY.append(True)


def tokenize(vocab: Any, text: str, *, add_special: bool, parse_special: bool) -> list[int]:
    """The token ids of ``text`` in a ``llama_vocab *`` (read-only: safe from any thread)."""
    data = text.encode("utf-8")
    capacity = len(data) + 8
    while True:
        out = (llama_cpp.llama_token * capacity)()
        n = llama_cpp.llama_tokenize(
            vocab, data, len(data), out, capacity, add_special, parse_special
        )
        if n >= 0:
            return list(out[:n])
        capacity = -n  # too small: llama.cpp says how many tokens there are


class LoadedModel:
    """The weights and vocabulary of one GGUF file, shared by every context built on them."""

    def __init__(self, path: Path, key: WeightsKey | None = None) -> None:
        """Load ``path`` with the model settings of ``key`` (``None``: the defaults), whose
        ``n_gpu_layers`` is already decided (``None`` is taken as none offloaded)."""
        init_backend()
        key = key or WeightsKey(str(path), 0, True, None)
        n_gpu_layers = key.n_gpu_layers or 0
        params = llama_cpp.llama_model_default_params()
        params.n_gpu_layers = n_gpu_layers
        params.use_mmap = key.use_mmap
        params.use_mlock = key.use_mlock
        params.main_gpu = key.main_gpu
        params.split_mode = _SPLIT_MODES[key.split_mode]
        weight_repacking = key.weight_repacking
        if weight_repacking is None:
            weight_repacking = not cpu_advertises_amx()
        params.use_extra_bufts = weight_repacking
        split = None
        if key.tensor_split is not None:
            if len(key.tensor_split) > llama_cpp.LLAMA_MAX_DEVICES:
                raise ModelLoadError(
                    str(path),
                    f"tensor_split names {len(key.tensor_split)} devices; this build of "
                    f"llama.cpp has at most {llama_cpp.LLAMA_MAX_DEVICES}",
                )
            # llama.cpp reads llama_max_devices() floats; the array lives through the load.
            split = (ctypes.c_float * llama_cpp.LLAMA_MAX_DEVICES)(*key.tensor_split)
            params.tensor_split = split
        model = llama_cpp.llama_model_load_from_file(str(path).encode("utf-8"), params)
        del split
        if not model:
            raise ModelLoadError(str(path), "llama.cpp could not load it (see the debug log)")
        self.path = path
        self.n_gpu_layers = n_gpu_layers
        self._model = model
        self._loras: dict[str, Any] = {}  # adapter file -> llama_adapter_lora *
        self._lora_lock = threading.Lock()
        self._vocab = llama_cpp.llama_model_get_vocab(model)
        self.n_vocab: int = llama_cpp.llama_vocab_n_tokens(self._vocab)
        self.n_ctx_train: int = llama_cpp.llama_model_n_ctx_train(model)
        self.n_embd: int = llama_cpp.llama_model_n_embd(model)
        self.n_swa: int = llama_cpp.llama_model_n_swa(model)
        self.n_params: int = llama_cpp.llama_model_n_params(model)
        self.size_bytes: int = llama_cpp.llama_model_size(model)
        self.bos_token_id: int = llama_cpp.llama_vocab_bos(self._vocab)
        self.eos_token_id: int = llama_cpp.llama_vocab_eos(self._vocab)
        self.adds_bos: bool = bool(llama_cpp.llama_vocab_get_add_bos(self._vocab))
        self.adds_eos: bool = bool(llama_cpp.llama_vocab_get_add_eos(self._vocab))
        self.adds_sep: bool = bool(llama_cpp.llama_vocab_get_add_sep(self._vocab))
        self.sep_token_id: int = llama_cpp.llama_vocab_sep(self._vocab)
        template = llama_cpp.llama_model_chat_template(model, None)
        self.chat_template: str | None = template.decode("utf-8") if template else None
        # A decoder reranker (Qwen3-Reranker) lays out its query/document pair in a template
        # of its own, with {query} and {document} placeholders.
        rerank = llama_cpp.llama_model_chat_template(model, b"rerank")
        self.rerank_template: str | None = rerank.decode("utf-8") if rerank else None
        buf = ctypes.create_string_buffer(256)
        llama_cpp.llama_model_desc(model, buf, len(buf))
        self.description = buf.value.decode("utf-8", errors="replace")
        self._piece_buf = threading.local()

    @property
    def handle(self) -> int:
        """The raw ``llama_model *`` for sibling modules of the engine."""
        return self._model  # type: ignore[no-any-return]

    @property
    def vocab(self) -> int:
        return self._vocab  # type: ignore[no-any-return]

    def token_text(self, token: int) -> str:
        """The vocabulary entry of a token, special tokens included (``<|im_end|>``)."""
        return self.token_to_piece(token, special=True).decode("utf-8", errors="replace")

    def vocab_texts(self) -> list[bytes]:
        """Every token's raw vocabulary entry, as stored in the GGUF (by id)."""
        get = llama_cpp.llama_vocab_get_text
        return [bytes(get(self._vocab, token) or b"") for token in range(self.n_vocab)]

    def is_eog(self, token: int) -> bool:
        return bool(llama_cpp.llama_vocab_is_eog(self._vocab, token))

    def turn_ends(self) -> frozenset[int]:
        """The tokens a chat template closes a turn with (end of text, end of turn), where
        they end generation: the prefill layout puts a chunk edge after each."""
        found = (llama_cpp.llama_vocab_eos(self._vocab), llama_cpp.llama_vocab_eot(self._vocab))
        return frozenset(token for token in found if token >= 0 and self.is_eog(token))

    def line_breaks(self) -> frozenset[int]:
        """The tokens that are one or two line breaks and nothing else: what chat templates
        end a turn's header with ("<|im_start|>user\\n"), where the prefill layout puts a turn's
        chunk edge."""
        texts = ("\n", "\n\n")
        found = (self.tokenize(text, add_special=False, parse_special=False) for text in texts)
        return frozenset(tokens[0] for tokens in found if len(tokens) == 1)

    def tokenize(self, text: str, *, add_special: bool, parse_special: bool) -> list[int]:
        return tokenize(self._vocab, text, add_special=add_special, parse_special=parse_special)

    def token_to_piece(self, token: int, *, special: bool = False) -> bytes:
        if token < 0:  # LLAMA_TOKEN_NULL (an encoder has no EOS): llama.cpp would throw and abort
            return b""
        buf = getattr(self._piece_buf, "buf", None)
        if buf is None:
            buf = self._piece_buf.buf = ctypes.create_string_buffer(256)
        n = llama_cpp.llama_token_to_piece(self._vocab, token, buf, len(buf), 0, special)
        if n < 0:  # a piece longer than the buffer: grow it once for this thread
            buf = self._piece_buf.buf = ctypes.create_string_buffer(-n)
            n = llama_cpp.llama_token_to_piece(self._vocab, token, buf, len(buf), 0, special)
        return buf.raw[:n]

    def detokenize(self, tokens: Sequence[int], *, special: bool = False) -> str:
        return b"".join(self.token_to_piece(t, special=special) for t in tokens).decode(
            "utf-8", errors="replace"
        )

    def lora(self, path: str) -> Any:
        """The ``llama_adapter_lora *`` of an adapter file, loaded on first use and kept until
        the weights are freed (llama.cpp frees a model's adapters with it, so they are never
        freed here).

        Raises:
            ModelLoadError: llama.cpp refused the file (another base model, not a LoRA GGUF).
        """
        with self._lora_lock:
            adapter = self._loras.get(path)
            if adapter is None:
                adapter = llama_cpp.llama_adapter_lora_init(self._model, path.encode("utf-8"))
                if not adapter:
                    raise ModelLoadError(
                        path,
                        f"llama.cpp could not load it as a LoRA adapter of {self.path.name} "
                        "(see the debug log of 'llamacpp_integrations.llama_cpp')",
                    )
                self._loras[path] = adapter
            return adapter

    def close(self) -> None:
        if self._model:
            with self._lora_lock:
                self._loras.clear()  # llama_model_free frees them
            llama_cpp.llama_model_free(self._model)
            self._model = None
            _return_freed_memory()


def _return_freed_memory() -> None:
    """Hand the memory the C heap holds free back to the system (glibc's ``malloc_trim``).

    The weights are unmapped when freed, but llama.cpp's buffers (KV cells, compute, outputs)
    are ``malloc``'s, and glibc keeps freed heap memory for reuse: once a large block has been
    freed, blocks up to 32 MB come from the heap instead of their own mappings. A process that
    unloads a model would otherwise keep part of what loading it took (seen: 58 MB after
    SmolLM2 and then Gemma were loaded and closed, none with the trim). Nothing to do where the
    C library has no ``malloc_trim`` (macOS, Windows, musl)."""
    if not sys.platform.startswith("linux"):
        return
    trim = getattr(ctypes.CDLL(None), "malloc_trim", None)
    if trim is not None:
        trim(0)
