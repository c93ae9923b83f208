"""One engine's generation KV cells, sequence by sequence, on the worker thread.

The scheduler keeps the token bookkeeping (which tokens each slot's cells hold); this module
applies it to the cells themselves. The generation context is made on first use, so an engine
that only embeds never allocates one. A new request keeps the reusable prefix the scheduler
found: its slot's cells cut back, a prefix shared from another slot, or a longer prefix restored
from the prompt cache on disk. Cells of ended requests and of rejected drafts are dropped, and
under pressure idle slots' cells are freed, least recently used block first. While the engine
idles, finished answers are read again block by block (``realign``, planned by
``Scheduler.realign``).

With a stream per sequence, streams start small (``ContextChoice.start_cells``) and grow when
a sequence needs more cells (``grow``): the context is made again with larger streams and every
sequence's cells are carried over byte for byte (``llama_state_seq_get_data`` / ``set_data``).
A stream's size never changes how a sequence's attention is computed (that depends on the cells
it holds, not on the cells it could hold), so growing never changes an answer.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Hashable, Mapping, Sequence

from ...errors import EngineError, LlamaCppIntegrationError
from ..config import EngineConfig
from ..native.runner import DecodeStatus, GenerationContext, LoadedModel
from ..prompt_cache.save_restore import SavedPrompts
from ..sizing import ContextChoice
from .scheduler import Scheduler
from .sequences import Join, SeqState

__all__ = ["SequenceCells"]

log = logging.getLogger("llamacpp_integrations.engine")


class SequenceCells:
    """The KV cells of one engine's sequences.

    Args:
        model: The weights the context is made on.
        config: The engine's configuration (sequences, batch, threads, cache layout, disk).
        scheduler: The engine's scheduler, whose slots say what the cells hold.
        kv: The KV cache's layout and size.
    """

    def __init__(
        self, model: LoadedModel, config: EngineConfig, scheduler: Scheduler, *, kv: ContextChoice
    ) -> None:
        self._model = model
        self._config = config
        self._scheduler = scheduler
        self._kv = kv
        self._context: GenerationContext | None = None
        self._stream_cells = kv.n_cells if kv.unified else kv.first_stream_cells
        self.realigning = config.realign_when_idle
        """Whether finished answers are read again while idle (off when configured so, or
        once it failed: not retried on every idle step)."""
        self.disk = None
        if config.prompt_cache_dir is not None:
            self.disk = SavedPrompts(model, config, index=scheduler.index)

    @property
    def n_cells(self) -> int:
        """Cells of the KV cache now, over all sequences."""
        if self._kv.unified:
            return self._kv.n_cells
        return self._stream_cells * self._config.n_seq_max

    @property
    def stream_cells(self) -> int:
        """Cells one sequence may hold now (unified: the whole cache)."""
        return self._stream_cells

    @property
    def can_grow(self) -> bool:
        """Whether the streams may still grow: one per sequence, not yet ``n_ctx_per_seq``."""
        return not self._kv.unified and self._stream_cells < self._kv.n_ctx_per_seq

    def grow(self, cells: int) -> list[int]:
        """Make room for a sequence of ``cells`` cells: with a stream per sequence, streams
        doubled until they hold it (at most ``n_ctx_per_seq``), every sequence's cells carried
        over. Returns the sequences whose cells could not be carried over (emptied).

        Raises:
            EngineError: the larger context could not be made (the cells stay as they were),
                or not even the old one again (every sequence is then empty: ``made`` is
                False).
        """
        if not self.can_grow or cells <= self._stream_cells:
            return []
        target = max(1, self._stream_cells)
        while target < cells:
            target *= 2
        target = min(target, self._kv.n_ctx_per_seq)  # above the streams: they could grow
        old = self._stream_cells
        if self._context is None:
            self._stream_cells = target
            return []
        started = time.perf_counter()
        saved = {
            seq_id: self._context.seq_state(seq_id)
            for seq_id in range(self._config.n_seq_max)
            if self.held(seq_id) > 0
        }
        self._context.close()
        self._context = None
        self._stream_cells = target
        failure: EngineError | None = None
        try:
            context = self.context
        except EngineError as error:
            failure = error
            self._stream_cells = old
            context = self.context  # raises when even the old size cannot be made again
        lost = [
            seq_id for seq_id, state in saved.items() if not context.set_seq_state(seq_id, state)
        ]
        if failure is not None:
            if lost:
                log.error("KV cells of sequences %s were lost while growing the cache", lost)
            raise failure
        per_cell = self._kv.kv_bytes_per_cell
        size = "" if per_cell is None else f", {per_cell * self.n_cells / 1024**2:.0f} MiB"
        log.info(
            "KV streams grew from %d to %d cells each (%d sequences%s) in %.3f s",
            old,
            target,
            self._config.n_seq_max,
            size,
            time.perf_counter() - started,
        )
        return lost

    @property
    def made(self) -> bool:
        """Whether the generation context exists yet."""
        return self._context is not None

    @property
    def context(self) -> GenerationContext:
        """The generation context, made on first use.

        Raises:
            EngineError: llama.cpp could not make it (most often, not enough memory).
        """
        if self._context is None:
            config = self._config
            try:
                self._context = GenerationContext(
                    self._model,
                    n_cells=self.n_cells,
                    n_seq_max=config.n_seq_max,
                    n_batch=config.n_batch,
                    n_threads=config.threads,
                    flash_attention=config.flash_attention_for(self._model.n_gpu_layers),
                    kv_unified=self._kv.unified,
                    tuning=config,
                )
            except LlamaCppIntegrationError as error:
                raise EngineError(
                    f"could not create the generation context of {self.n_cells} cells "
                    f"({self._kv.describe()}): "
                    f"{error}; lower n_seq_max, n_ctx_per_seq or kv_cells"
                ) from error
        return self._context

    def held(self, seq_id: int) -> int:
        """How many cells a sequence holds (0 before the context exists)."""
        if self._context is None:
            return 0
        lo, hi = self._context.pos_range(seq_id)
        return 0 if hi < 0 else hi - lo + 1

    def lookup(self, prompt: Sequence[int]) -> dict[Hashable, int]:
        """What ``prompt`` shares with everything the engine holds: every slot's cells, the
        prompts being read and the saved prompts on disk (``Scheduler.lookup``), the disk's
        files brought up to date first."""
        if self.disk is not None:
            self.disk.refresh()
        return self._scheduler.lookup(prompt)

    def saved_length(self, prompt: Sequence[int], shared: Mapping[Hashable, int]) -> int:
        """How long a saved prompt ``take_prefix`` might restore for ``prompt`` is (``0``:
        none, no disk cache, or streams that cannot grow, so need not know): the stream must
        hold it whole to take it. ``shared``: ``lookup(prompt)``."""
        if self.disk is None or not self.can_grow:
            return 0
        return self.disk.saved_length(prompt, shared)

    def take_prefix(self, seq: SeqState, shared: Mapping[Hashable, int]) -> None:
        """Give a newly admitted sequence the cells of its reusable prefix (as the scheduler
        chose it), or a longer one from the disk cache; where that fails, the sequence starts
        empty and evaluates its whole prompt. ``shared``: ``lookup(prompt)``, made before the
        sequence was admitted."""
        if not self._keep_prefix(seq):
            self.context.remove(seq.slot.seq_id, 0)
            self._scheduler.forget(seq)
        if self.disk is not None:
            held = self.disk.restore(
                self.context,
                seq.slot.seq_id,
                seq.prompt,
                seq.n_reused,
                self._scheduler.layout,
                seq.image_spans,
                shared,
            )
            if held is None:
                self._scheduler.forget(seq)
            elif held > seq.n_reused:
                self._scheduler.restored(seq, held)

    def _keep_prefix(self, seq: SeqState) -> bool:
        """Keep the reusable prefix of the slot's cells and drop the rest; False if impossible."""
        if seq.n_reused == 0:
            return False
        seq_id = seq.slot.seq_id
        if seq.copy_from is not None:
            self.context.remove(seq_id, 0)
            self.context.share_prefix(seq.copy_from.seq_id, seq_id, seq.n_reused)
        elif not self.context.remove(seq_id, seq.n_reused):
            return False
        return self.context.window_kept(seq_id, seq.n_reused)

    def join(self, joins: Sequence[Join]) -> None:
        """Give each follower's sequence the first cells of its leader's (``StepPlan.joins``)."""
        for join in joins:
            self.context.share_prefix(join.source.seq_id, join.target.seq_id, join.n_tokens)

    def save_prompts(self, seqs: list[SeqState]) -> None:
        """Save to the disk cache the cells of sequences that hold exactly their whole prompt."""
        if self.disk is None:
            return
        read = [(seq.slot.seq_id, seq.prompt) for seq in seqs if seq.n_past == len(seq.prompt)]
        if read:
            self.disk.save(self.context, read)

    @property
    def can_realign(self) -> bool:
        """Whether ``realign`` has a block to read now."""
        return self.realigning and self._scheduler.realign_wanted()

    def realign(self) -> bool:
        """Read the next block of a finished answer again into its slot; False when there was
        none, or it failed (then the slot is emptied, and ``realigning`` turns off: a follow-up
        reads the answer instead)."""
        if not self.realigning or self._context is None:
            return False
        step = self._scheduler.realign()
        if step is None:
            return False
        seq_id, start = step.slot.seq_id, step.entry.start_pos
        try:
            if step.copy_from is not None:
                self._context.remove(seq_id, 0)
                if start > 0:
                    self._context.share_prefix(step.copy_from.seq_id, seq_id, start)
            if step.drop and not self._context.remove(seq_id, start):
                raise EngineError("its cells could not be cut")
            status, reason = self._context.decode([step.entry]), "no room in the KV cache"
        except EngineError as error:
            status, reason = DecodeStatus.NO_KV_SLOT, str(error)
        if status != DecodeStatus.OK:
            log.warning("reading a finished answer again failed (%s); stopped doing so", reason)
            self.realigning = False
            self._context.remove(seq_id, 0)
            self._scheduler.abandon(step.slot)
            return False
        self._scheduler.realigned(step)
        return True

    def evict(self, n_tokens: int) -> bool:
        """Free about ``n_tokens`` cells of idle slots, least recently used block first
        (``Scheduler.evict``); whether any went. Only in a unified cache: with a stream per
        sequence, another sequence's cells never take a sequence's room."""
        if self._context is None or not self._kv.unified:
            return False
        before = self._scheduler.evicted_tokens
        cuts = self._scheduler.evict(n_tokens)
        for seq_id, start in cuts.items():
            self._context.remove(seq_id, start)
        if cuts:
            log.debug(
                "KV cache full: dropped %d idle cached tokens of sequences %s, oldest blocks first",
                self._scheduler.evicted_tokens - before,
                sorted(cuts),
            )
        return bool(cuts)

    def drop_idle(self) -> list[int]:
        """Free the cells of every slot no request holds; the sequence ids freed."""
        if self._context is None:
            return []
        dropped = []
        for slot in self._scheduler.slots:
            if not slot.busy and slot.cached:
                self._context.remove(slot.seq_id, 0)
                slot.cut(0)
                dropped.append(slot.seq_id)
        return dropped

    def close(self) -> None:
        """Free the context and its cells."""
        if self._context is not None:
            self._context.close()
            self._context = None
