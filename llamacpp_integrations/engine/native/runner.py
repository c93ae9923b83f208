"""The contexts on loaded weights (``weights.py``), and one batched decode.

Like every module of ``engine/native/`` (the only folder that imports ``llama_cpp``), it
translates llama.cpp's return codes into this package's errors. A ``GenerationContext`` is
touched by the engine's worker thread only.
"""

from __future__ import annotations

import ctypes
from collections.abc import Callable, Sequence
from typing import Any

import llama_cpp
import numpy as np
import numpy.typing as npt

from ...errors import EngineError, ModelLoadError
from ..batch import BatchEntry
from ..config import EngineConfig
from ..lora import LoraKey, lora_key
from .interrupt import ABORTED, DecodeInterrupt, DecodeInterrupted
from .tuning import cpu_advertises_amx, tune_context
from .weights import LoadedModel

__all__ = [
    "DecodeRun",
    "DecodeStatus",
    "GenerationContext",
    "NativeContext",
    "cpu_advertises_amx",
    "decode_alone",
]

_FLASH_ATTENTION = {
    None: llama_cpp.LLAMA_FLASH_ATTN_TYPE_AUTO,  # llama.cpp decides
    True: llama_cpp.LLAMA_FLASH_ATTN_TYPE_ENABLED,
    False: llama_cpp.LLAMA_FLASH_ATTN_TYPE_DISABLED,
}


def _apply_lora(ctx: Any, model: LoadedModel, adapters: LoraKey) -> None:
    """Put ``adapters`` (files with their scales) on a context, in place of its own."""
    if not adapters:
        code = int(llama_cpp.llama_set_adapters_lora(ctx, None, 0, None))
    else:
        handles = (llama_cpp.llama_adapter_lora_p_ctypes * len(adapters))(
            *(model.lora(path) for path, _ in adapters)
        )
        scales = (ctypes.c_float * len(adapters))(*(scale for _, scale in adapters))
        code = int(llama_cpp.llama_set_adapters_lora(ctx, handles, len(adapters), scales))
    if code != 0:
        raise ModelLoadError(str(model.path), f"llama.cpp refused the LoRA adapters ({code})")


class NativeContext:
    """A llama.cpp context on ``model`` and the one batch it decodes, of ``n_batch`` tokens;
    every kind of context (generation, embedding) is made here, and freed by ``close``.

    The context takes llama.cpp's defaults, ``tuning``'s RoPE settings (and cache types, where
    ``cache_types``) and LoRA adapters, ``n_ctx`` cells, batches and micro-batches of
    ``n_batch`` tokens, ``n_threads`` for both kinds of decode, then what its kind sets
    (``_settings``); no performance counters. An ``interruptible`` one's decodes can be stopped
    from another thread (``interrupt``).

    Raises:
        ModelLoadError: llama.cpp could not create it, or refused the adapters.
    """

    kind = "a context"
    """What it is, as the error names it when llama.cpp cannot create it."""
    cache_types = True
    """Whether the engine's KV cache types apply (else llama.cpp's, f16)."""

    def __init__(
        self,
        model: LoadedModel,
        tuning: EngineConfig | None,
        *,
        n_ctx: int,
        n_batch: int,
        n_seq_max: int,
        n_threads: int,
        interruptible: bool = False,
    ) -> None:
        params = llama_cpp.llama_context_default_params()
        tune_context(params, tuning, kv_types=self.cache_types)
        params.n_ctx = n_ctx
        params.n_batch = params.n_ubatch = n_batch
        params.n_seq_max = n_seq_max
        params.n_threads = params.n_threads_batch = n_threads
        for name, value in self._settings().items():
            setattr(params, name, value)
        params.no_perf = True
        ctx = llama_cpp.llama_init_from_model(model.handle, params)
        if not ctx:
            raise ModelLoadError(str(model.path), f"llama.cpp could not create {self.kind}")
        adapters = () if tuning is None else tuning.lora_adapters
        self.lora = lora_key((a.path, a.scale) for a in adapters)
        """The adapters the next decode applies."""
        try:
            if self.lora:
                _apply_lora(ctx, model, self.lora)
        except BaseException:
            llama_cpp.llama_free(ctx)
            raise
        self.model = model
        self.n_batch = n_batch
        self.n_seq_max = n_seq_max
        self.n_threads = n_threads
        self._ctx = ctx
        self._memory = llama_cpp.llama_get_memory(ctx)
        self._batch = llama_cpp.llama_batch_init(n_batch, 0, 1)
        self._interrupt: DecodeInterrupt | None = None
        if interruptible:
            self._interrupt = DecodeInterrupt()
            self._interrupt.attach(ctx)

    def _settings(self) -> dict[str, Any]:
        """The fields of ``llama_context_params`` this kind of context sets itself."""
        return {}

    def use_lora(self, adapters: LoraKey) -> None:
        """Decode with ``adapters`` from now on (a request's choice: ``engine/lora.py``);
        nothing to do when they are on already. llama.cpp plans its compute graph again on
        the next decode after a change, the cost of mixing adapter sets in one step."""
        if adapters != self.lora:
            _apply_lora(self._ctx, self.model, adapters)
            self.lora = adapters

    def set_threads(self, n_threads: int) -> None:
        """Decode on ``n_threads`` from the next decode on (``worker/thread_governor.py``)."""
        if n_threads != self.n_threads and self._ctx:
            llama_cpp.llama_set_n_threads(self._ctx, n_threads, n_threads)
            self.n_threads = n_threads

    def interrupt(self) -> None:
        """Stop the decode under way, or the next one: it raises ``DecodeInterrupted``. Safe
        from any thread; nothing happens on a context made without ``interruptible``."""
        if self._interrupt is not None:
            self._interrupt.request()

    def clear_interrupt(self) -> None:
        """Take down a request of ``interrupt`` that came after the decode it was meant for."""
        if self._interrupt is not None:
            self._interrupt.clear()

    def _raise_if_interrupted(self, code: int) -> None:
        """After a ``llama_decode`` that returned ``code``: raise ``DecodeInterrupted`` where
        ``interrupt`` stopped it (llama.cpp removed the batch's positions from the cache)."""
        if code == ABORTED and self._interrupt is not None:
            self._interrupt.clear()
            raise DecodeInterrupted

    @property
    def handle(self) -> int:
        """The raw ``llama_context *``."""
        return self._ctx  # type: ignore[no-any-return]

    def close(self) -> None:
        if self._ctx:
            llama_cpp.llama_batch_free(self._batch)
            llama_cpp.llama_free(self._ctx)
            self._ctx = None


DecodeRun = Callable[[NativeContext, Callable[[], int]], int]
"""How a decode on a context is run: ``decode_alone``, or under the worker's stall watch
(``DecodeThreads.run``), which may stop it and run it again on fewer threads."""


def decode_alone(context: NativeContext, decode: Callable[[], int]) -> int:
    """Run ``decode()`` as it is (a ``DecodeRun`` with no watch)."""
    return decode()


class DecodeStatus:
    OK = 0
    NO_KV_SLOT = 1


class GenerationContext(NativeContext):
    """A context of ``n_seq_max`` sequences, fed by batched decodes.

    ``n_cells`` cells in all. Unified, the sequences share them, so a prefix can be shared
    between sequences by tagging its cells, but every token's attention spans every used cell
    (where a sequence's cells lie then changes its rounding). Split, every sequence has a stream
    of ``n_cells / n_seq_max`` cells of its own and attends over its own cells only.
    """

    def __init__(
        self,
        model: LoadedModel,
        *,
        n_cells: int,
        n_seq_max: int,
        n_batch: int,
        n_threads: int,
        flash_attention: bool | None,
        kv_unified: bool,
        tuning: EngineConfig | None = None,
        interruptible: bool = False,
    ) -> None:
        self.kv_unified = kv_unified
        self._flash_attention = flash_attention
        super().__init__(
            model,
            tuning,
            n_ctx=n_cells,
            n_batch=n_batch,
            n_seq_max=n_seq_max,
            n_threads=n_threads,
            interruptible=interruptible,
        )
        self._n_vocab = model.n_vocab
        batch = self._batch  # its arrays looked up once: each attribute read makes a pointer
        self._fields = (batch.token, batch.pos, batch.n_seq_id, batch.logits)
        self._seq_ids = [batch.seq_id[i] for i in range(n_batch)]
        self._views: dict[int, npt.NDArray[np.float32]] = {}  # logits rows by address
        # The logits tables of ``argmax_rows`` by address and row count: making a view costs
        # tens of microseconds right after a decode (its caches are cold), a lookup does not.
        self._tables: dict[tuple[int, int], npt.NDArray[np.float32]] = {}
        self._outputs: list[int] = []  # the last decode's batch indices that have logits

    def _settings(self) -> dict[str, Any]:
        return {
            "flash_attn_type": _FLASH_ATTENTION[self._flash_attention],
            "kv_unified": self.kv_unified,
        }

    def decode(self, entries: Sequence[BatchEntry]) -> int:
        """Run one ``llama_decode`` over every entry; sets each ``logits_index``.

        Returns ``DecodeStatus.OK`` or ``DecodeStatus.NO_KV_SLOT`` (the cache is then unchanged);
        raises ``DecodeInterrupted`` where ``interrupt`` stopped it, ``EngineError`` on any
        other code.
        """
        total = sum(len(entry.tokens) for entry in entries)
        if total > self.n_batch:  # checked first: the batch's arrays hold n_batch tokens
            raise EngineError(f"internal: batch of {total} tokens exceeds n_batch={self.n_batch}")
        token, pos, n_seq_id, logits = self._fields
        seq_ids = self._seq_ids
        outputs = self._outputs = []
        n = 0
        for entry in entries:
            tokens = entry.tokens
            seq_id, start, every = entry.seq_id, entry.start_pos, entry.logits_all
            entry.first_index = n
            for offset, value in enumerate(tokens):
                token[n] = value
                pos[n] = start + offset
                n_seq_id[n] = 1
                seq_ids[n][0] = seq_id
                logits[n] = every
                n += 1
            if every:
                outputs.extend(range(entry.first_index, n))
            elif entry.logits_last and tokens:
                logits[n - 1] = True
                outputs.append(n - 1)
            entry.logits_index = n - 1 if entry.logits_last else -1
        if n == 0:
            return DecodeStatus.OK
        self._batch.n_tokens = n
        code = self._run(self._batch)
        if code in (DecodeStatus.OK, DecodeStatus.NO_KV_SLOT):
            return code
        self._raise_if_interrupted(code)
        raise EngineError(f"llama_decode failed with code {code}")

    def _run(self, batch: Any) -> int:
        """``llama_decode`` of the filled batch (a test seam: ``fixed_logits.py``)."""
        return int(llama_cpp.llama_decode(self._ctx, batch))

    def logits_view(self, index: int) -> npt.NDArray[np.float32]:
        """The logits row ``index`` of the last decode, without copying (valid until the next)."""
        ptr = llama_cpp.llama_get_logits_ith(self._ctx, index)
        address = ctypes.addressof(ptr.contents) if ptr else 0
        view = self._views.get(address)  # one per row: llama.cpp keeps its output buffer
        if view is None:
            view = self._views[address] = np.ctypeslib.as_array(ptr, shape=(self._n_vocab,))
        return view

    def argmax_rows(self, indices: Sequence[int]) -> list[int]:
        """The first largest logit of each row ``indices`` of the last decode, in one pass.

        One numpy call for the step's greedy rows instead of one per row: numpy lets go of the
        GIL for each call, and a worker that lets go of it waits to get it back from the event
        loop's thread (see ``outbox.py``). llama.cpp keeps the rows of the tokens that
        asked for logits together, in the batch's order (``llama_get_logits``).
        """
        outputs = self._outputs
        ptr = llama_cpp.llama_get_logits(self._ctx)
        if not ptr:
            raise EngineError("internal: the last decode kept no logits")
        key = (ctypes.addressof(ptr.contents), len(outputs))
        table = self._tables.get(key)  # llama.cpp keeps its output buffer between decodes
        if table is None:
            shape = (len(outputs), self._n_vocab)
            table = self._tables[key] = np.ctypeslib.as_array(ptr, shape=shape)
        if list(indices) == outputs:  # every row: the usual step, no copy
            return [int(token) for token in table.argmax(axis=1)]
        row_of = {index: row for row, index in enumerate(outputs)}
        return [int(token) for token in table[[row_of[i] for i in indices]].argmax(axis=1)]

    def remove(self, seq_id: int, start: int = 0) -> bool:
        """Drop the sequence's cells from position ``start`` on; False if that part can't go."""
        if start <= 0:
            return bool(llama_cpp.llama_memory_seq_rm(self._memory, seq_id, -1, -1))
        return bool(llama_cpp.llama_memory_seq_rm(self._memory, seq_id, start, -1))

    def share_prefix(self, src: int, dst: int, n_tokens: int) -> None:
        """Give ``dst`` (emptied first) the cells of ``src``'s first ``n_tokens`` positions.

        Unified, the same cells are tagged with both sequence ids (no copy). Split, llama.cpp
        copies only whole streams, so the stream is copied and the copy cut back: a memory copy
        of a whole stream, still far cheaper than evaluating the prefix again.
        """
        if self.kv_unified:
            llama_cpp.llama_memory_seq_cp(self._memory, src, dst, 0, n_tokens)
        else:
            llama_cpp.llama_memory_seq_cp(self._memory, src, dst, -1, -1)
            llama_cpp.llama_memory_seq_rm(self._memory, dst, n_tokens, -1)

    def seq_state(self, seq_id: int) -> bytes:
        """The sequence's KV state (its cells), as ``llama_state_seq_get_data`` writes it."""
        size = int(llama_cpp.llama_state_seq_get_size(self._ctx, seq_id))
        buf = (ctypes.c_uint8 * size)()
        n = int(llama_cpp.llama_state_seq_get_data(self._ctx, buf, size, seq_id))
        return bytes(buf)[:n]

    def set_seq_state(self, seq_id: int, state: bytes) -> bool:
        """Put a saved state into the (emptied) sequence; False when llama.cpp refuses it
        (another model or cache layout, no room): the sequence is then left empty."""
        llama_cpp.llama_memory_seq_rm(self._memory, seq_id, -1, -1)
        buf = (ctypes.c_uint8 * len(state)).from_buffer_copy(state)
        n = int(llama_cpp.llama_state_seq_set_data(self._ctx, buf, len(state), seq_id))
        if n == 0:
            llama_cpp.llama_memory_seq_rm(self._memory, seq_id, -1, -1)
            return False
        return True

    def pos_range(self, seq_id: int) -> tuple[int, int]:
        """Smallest and largest cached position of a sequence, ``(-1, -1)`` when it is empty."""
        return (
            int(llama_cpp.llama_memory_seq_pos_min(self._memory, seq_id)),
            int(llama_cpp.llama_memory_seq_pos_max(self._memory, seq_id)),
        )

    def window_kept(self, seq_id: int, n_reused: int) -> bool:
        """Whether a sequence cut back to ``n_reused`` cells can be continued: a sliding-window
        cache prunes old cells, and continuing needs the window before the cut."""
        if self.model.n_swa <= 0:
            return True
        pos_min, _ = self.pos_range(seq_id)
        return pos_min <= max(0, n_reused - self.model.n_swa)
