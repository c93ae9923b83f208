"""A small draft model proposing tokens for speculative decoding (``speculative="draft"``).

The draft model has a context of its own with as many sequences as the target's, sequence ``i``
mirroring slot ``i`` of the target. Its cells are kept in step lazily: before drafting, each
sequence's cells are compared with what the target's slot holds (prompt and accepted tokens),
cut back to their common prefix (``llama_memory_seq_rm``), and the missing tokens evaluated. That
one rule covers a new prompt, a prefix reused from the target's cache (from this slot or copied
from another), a prompt state restored from disk, rejected drafts, and a slot taken over by
another request.

Drafts are greedy (the argmax of the draft's logits), so the draft distribution is one-hot and
the worker's "sample the target, keep the draft while they agree" is exactly the
speculative-sampling rule (see ``drafts.py``). All speculating sequences draft together:
one batched decode per drafted position.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from functools import partial

import numpy as np

from ...errors import EngineError, ModelLoadError
from ..batch import BatchEntry, common_prefix
from ..config import EngineConfig
from ..native.runner import DecodeRun, DecodeStatus, GenerationContext, decode_alone
from ..native.weights import LoadedModel
from ..sizing import ContextChoice
from .drafts import DraftWant

__all__ = ["DraftModel", "check_same_vocab"]

log = logging.getLogger("llamacpp_integrations.engine")


def check_same_vocab(target: LoadedModel, draft: LoadedModel) -> None:
    """Refuse a draft model whose tokens mean something else than the target's.

    Compares the vocabulary size, the BOS and EOS ids, and every token's text.

    Raises:
        ModelLoadError: the vocabularies differ; the message says where.
    """
    reason = None
    if draft.n_vocab != target.n_vocab:
        reason = f"its vocabulary has {draft.n_vocab} tokens, the target's {target.n_vocab}"
    elif (draft.bos_token_id, draft.eos_token_id) != (target.bos_token_id, target.eos_token_id):
        reason = (
            f"its BOS/EOS ids are {draft.bos_token_id}/{draft.eos_token_id}, the target's "
            f"{target.bos_token_id}/{target.eos_token_id}"
        )
    else:
        theirs = target.vocab_texts()
        for token, text in enumerate(draft.vocab_texts()):
            if text != theirs[token]:
                reason = f"token {token} is {text!r} in it but {theirs[token]!r} in the target"
                break
    if reason is not None:
        raise ModelLoadError(
            str(draft.path),
            f"it cannot draft for {target.path.name}: the two vocabularies differ ({reason})",
        )


class DraftModel:
    """One engine's draft context over the draft model's weights, and what each of its
    sequences holds.

    Args:
        weights: The draft model's weights, loaded by the host (one copy per host however
            many engines draft with them; the target's own when it drafts for itself).
        target: The target model (its vocabulary is checked against the draft's).
        config: The engine's configuration (threads, batch size, sequences).
        kv: The KV cache's layout and size, as the target's.
        run: Where given, how each of its decodes is run: under the worker's stall watch,
            which stops a decode whose threads lost their cores and runs it again on fewer
            (``worker/decode_threads.py``); its context is then made ``interruptible``.
            ``None``: each decode runs as it is.

    Raises:
        ModelLoadError: the draft's vocabulary is not the target's.
    """

    def __init__(
        self,
        weights: LoadedModel,
        target: LoadedModel,
        config: EngineConfig,
        *,
        kv: ContextChoice,
        run: DecodeRun | None = None,
    ) -> None:
        check_same_vocab(target, weights)
        self.model = weights  # the host's: shared with other engines, freed by the host
        self._config = config
        self._kv = kv
        self._run = decode_alone if run is None else run
        self._interruptible = run is not None
        self._context: GenerationContext | None = None
        self._held: dict[int, list[int]] = {}  # sequence id -> tokens its cells hold

    @property
    def context(self) -> GenerationContext:
        """The draft context, made on first use (an engine that never drafts needs none)."""
        if self._context is None:
            config = self._config
            # No ``tuning``: the target's LoRA adapters, RoPE and cache settings are the
            # target's; the draft model runs as its GGUF says.
            self._context = GenerationContext(
                self.model,
                n_cells=self._kv.n_cells,
                n_seq_max=config.n_seq_max,
                n_batch=config.n_batch,
                n_threads=config.threads,
                flash_attention=config.flash_attention_for(self.model.n_gpu_layers),
                kv_unified=self._kv.unified,
                interruptible=self._interruptible,
            )
        return self._context

    @property
    def made_context(self) -> GenerationContext | None:
        """The draft context if it was made, else ``None`` (without making it)."""
        return self._context

    def held(self, seq_id: int) -> int:
        """How many tokens the draft context holds for a sequence, by this bookkeeping."""
        return len(self._held.get(seq_id, ()))

    def cells(self, seq_id: int) -> int:
        """How many cells llama.cpp holds for a sequence in the draft context."""
        if self._context is None:
            return 0
        lo, hi = self._context.pos_range(seq_id)
        return 0 if hi < 0 else hi - lo + 1

    def draft(self, wants: Sequence[DraftWant]) -> dict[int, list[int]]:
        """Greedy drafts for every sequence of ``wants`` (up to its ``k`` tokens, fewer when
        the draft model ends its text), by sequence id; empty when drafting failed."""
        try:
            context = self.context
        except ModelLoadError as error:
            log.warning("draft model: no context (%s); not drafting", error)
            return {}
        pending = {want.seq_id: self._sync(context, want) for want in wants}
        limits = {want.seq_id: want.k for want in wants}
        drafts: dict[int, list[int]] = {want.seq_id: [] for want in wants}
        try:
            # Catch up: evaluate what each sequence lacks (its whole prompt, the first time),
            # in batches of at most n_batch tokens; the last token is the target's next one,
            # whose logits give the first draft.
            while pending:
                entries = self._catch_up_batch(pending)
                if not self._decode(context, entries, wants):
                    return {}
                for entry in entries:
                    rest = pending[entry.seq_id][len(entry.tokens) :]
                    if rest:
                        pending[entry.seq_id] = rest
                    else:
                        del pending[entry.seq_id]
                        drafts[entry.seq_id].append(self._pick(context, entry.logits_index))
            # Then one decode per further drafted position, every sequence together.
            while True:
                going = [
                    seq_id
                    for seq_id, out in drafts.items()
                    if len(out) < limits[seq_id] and not self.model.is_eog(out[-1])
                ]
                if not going:
                    return drafts
                entries = [
                    BatchEntry(seq_id, [drafts[seq_id][-1]], self.held(seq_id), True)
                    for seq_id in going
                ]
                if not self._decode(context, entries, wants):
                    return {}
                for entry in entries:
                    drafts[entry.seq_id].append(self._pick(context, entry.logits_index))
        except EngineError as error:
            log.warning("draft model: decode failed (%s); not drafting this step", error)
            for want in wants:
                self.forget(want.seq_id)
            return {}

    def forget(self, seq_id: int) -> None:
        """Drop every cell of a sequence (its request ended, or its cells are unknown)."""
        if self._context is not None:
            self._context.remove(seq_id, 0)
        self._held.pop(seq_id, None)

    def close(self) -> None:
        """Free the draft context (the weights are the host's)."""
        if self._context is not None:
            self._context.close()
            self._context = None
        self._held.clear()

    # ---- helpers ----------------------------------------------------------------------------

    def _sync(self, context: GenerationContext, want: DraftWant) -> list[int]:
        """Cut the sequence's cells back to what it shares with the target; return the tokens
        still to evaluate (ending with the target's next token)."""
        held = self._held.setdefault(want.seq_id, [])
        n = common_prefix(held, want.cached)
        if n < len(held):
            if not context.remove(want.seq_id, n):  # a sliding-window cache can refuse a cut
                context.remove(want.seq_id, 0)
                n = 0
            del held[n:]
        return [*want.cached[n:], want.next_token]

    def _catch_up_batch(self, pending: dict[int, list[int]]) -> list[BatchEntry]:
        budget = self._config.n_batch
        entries = []
        for seq_id, tokens in pending.items():
            if budget <= 0:
                break
            chunk = tokens[:budget]
            last = len(chunk) == len(tokens)
            entries.append(BatchEntry(seq_id, chunk, self.held(seq_id), last))
            budget -= len(chunk)
        return entries

    def _decode(
        self, context: GenerationContext, entries: list[BatchEntry], wants: Sequence[DraftWant]
    ) -> bool:
        """Decode ``entries`` (cells are recorded as held); False when the cache had no room
        even after dropping the sequences not drafting now (the wanted ones are then dropped
        too)."""
        entries.sort(key=lambda entry: entry.seq_id)  # one micro-batch per run of ids
        status = self._run(context, partial(context.decode, entries))
        if status == DecodeStatus.NO_KV_SLOT:
            drafting = {want.seq_id for want in wants}
            for seq_id in [s for s in self._held if s not in drafting]:
                self.forget(seq_id)
            status = self._run(context, partial(context.decode, entries))
        if status == DecodeStatus.NO_KV_SLOT:
            log.warning("draft model: no room in its KV cache; not drafting this step")
            for want in wants:
                self.forget(want.seq_id)
            return False
        for entry in entries:
            self._held[entry.seq_id].extend(entry.tokens)
        return True

    def _pick(self, context: GenerationContext, index: int) -> int:
        return int(np.argmax(context.logits_view(index)))
