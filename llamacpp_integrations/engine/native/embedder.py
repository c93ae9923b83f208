"""The embedding context: a second llama.cpp context over the same loaded weights.

Kept apart from generation because pooled embeddings need their own context settings
(``embeddings=True``, a pooling type) and clearing it must not disturb running chats.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import llama_cpp
import numpy as np
import numpy.typing as npt

from ...errors import EngineError
from ..config import EngineConfig
from .runner import NativeContext
from .weights import LoadedModel

__all__ = ["POOLING_TYPES", "RANK_POOLING", "EmbeddingContext"]

POOLING_TYPES = {
    "mean": llama_cpp.LLAMA_POOLING_TYPE_MEAN,
    "cls": llama_cpp.LLAMA_POOLING_TYPE_CLS,
    "last": llama_cpp.LLAMA_POOLING_TYPE_LAST,
    "rank": llama_cpp.LLAMA_POOLING_TYPE_RANK,
}
RANK_POOLING = llama_cpp.LLAMA_POOLING_TYPE_RANK


class EmbeddingContext(NativeContext):
    """Embeds up to ``n_seq_max`` texts (``n_ctx`` tokens in all) per decode, one vector each.

    With rank pooling (a cross-encoder's classification head) the "vector" of a sequence is its
    ``n_cls_out`` scores instead of ``n_embd`` floats. RoPE and LoRA shape the vectors as they
    shape generation.
    """

    kind = "an embedding context"
    cache_types = False  # f16: an embedding context keeps nothing between decodes

    def __init__(
        self,
        model: LoadedModel,
        *,
        pooling: int,
        n_ctx: int,
        n_seq_max: int,
        n_threads: int,
        tuning: EngineConfig | None = None,
        interruptible: bool = False,
    ) -> None:
        # Short texts fill a decode only with many sequences. llama.cpp tracks at most 256 and
        # sizes its worst-case graph as n_seq_max equal shares of the micro-batch, so the
        # context is rounded up to a multiple of the sequence count (else that graph overflows
        # the KV buffer and llama.cpp aborts).
        n_seq_max = max(1, min(n_seq_max, n_ctx, int(llama_cpp.llama_max_parallel_sequences())))
        n_ctx = -(-n_ctx // n_seq_max) * n_seq_max
        self._pooling = pooling
        # Pooling needs a whole sequence inside one micro-batch, so both batch sizes are n_ctx.
        super().__init__(
            model,
            tuning,
            n_ctx=n_ctx,
            n_batch=n_ctx,
            n_seq_max=n_seq_max,
            n_threads=n_threads,
            interruptible=interruptible,
        )
        self.n_ctx = n_ctx
        self.n_embd = model.n_embd
        # What llama_get_embeddings_seq holds per sequence: the classifier's outputs under rank
        # pooling, the pooled hidden state otherwise.
        self.n_out = (
            max(1, int(llama_cpp.llama_model_n_cls_out(model.handle)))
            if pooling == RANK_POOLING
            else model.n_embd
        )

    def _settings(self) -> dict[str, Any]:
        return {"embeddings": True, "pooling_type": self._pooling, "kv_unified": True}

    def embed(self, token_lists: Sequence[Sequence[int]]) -> list[npt.NDArray[np.float32]]:
        """One decode over all texts; each must be non-empty and together fit ``n_ctx``.
        Raises ``DecodeInterrupted`` where ``interrupt`` stopped it (embed them again)."""
        assert 0 < len(token_lists) <= self.n_seq_max
        batch = self._batch
        n = 0
        for seq_id, tokens in enumerate(token_lists):
            for pos, token in enumerate(tokens):
                batch.token[n] = token
                batch.pos[n] = pos
                batch.n_seq_id[n] = 1
                batch.seq_id[n][0] = seq_id
                batch.logits[n] = True
                n += 1
        assert n <= self.n_ctx
        batch.n_tokens = n
        if self._memory:
            # Cells only, not data: clearing the data memsets the whole KV buffer (n_ctx cells
            # of every layer) on every decode, a cost that grows with the context, not with the
            # batch. Freed cells are masked out, so stale values there are never read.
            llama_cpp.llama_memory_clear(self._memory, False)
        code = int(llama_cpp.llama_decode(self._ctx, batch))
        if code != 0:
            self._raise_if_interrupted(code)
            raise EngineError(f"llama_decode (embeddings) failed with code {code}")
        vectors: list[npt.NDArray[np.float32]] = []
        for seq_id in range(len(token_lists)):
            ptr = llama_cpp.llama_get_embeddings_seq(self._ctx, seq_id)
            if not ptr:
                raise EngineError("llama.cpp returned no pooled embedding for a sequence")
            vectors.append(np.ctypeslib.as_array(ptr, shape=(self.n_out,)).copy())
        return vectors
