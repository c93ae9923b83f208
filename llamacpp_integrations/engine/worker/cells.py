"""One engine's generation KV cells, sequence by sequence, on the worker thread.

The scheduler keeps the token bookkeeping (which tokens each slot's cells hold); this module
applies it to the cells themselves and knows nothing of the scheduler: the core hands it what
the scheduler decided, and hands the scheduler what happened here (how much of a prompt a
sequence holds, whether a block read again got in, which sequences' cells were lost). The
generation context is made on first use, so an engine that only embeds never allocates one. A
new request keeps the reusable prefix the scheduler found: its slot's cells cut back, a prefix
shared from another slot, or a longer prefix restored from the prompt cache on disk. Cells of
ended requests and of rejected drafts are dropped, and under pressure idle slots' cells are
freed, least recently used block first. While the engine idles, finished answers are read
again block by block (``realign``, planned by ``Scheduler.realign``).

With a stream per sequence, streams start small (``ContextChoice.start_cells``) and grow when
a sequence needs more cells (``grow``, to the size ``room.plan_growth`` chose): the context is
made again with larger streams and every sequence's cells are carried over byte for byte
(``llama_state_seq_get_data`` / ``set_data``). A stream's size never changes how a sequence's
attention is computed (that depends on the cells it holds, not on the cells it could hold), so
growing never changes an answer.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Hashable, Mapping, Sequence
from functools import partial

from ...errors import EngineError, LlamaCppIntegrationError
from ..batch import PrefillLayout
from ..config import EngineConfig
from ..native.runner import DecodeRun, DecodeStatus, GenerationContext, decode_alone
from ..native.weights import LoadedModel
from ..prefix_index import PrefixIndex
from ..prompt_cache.save_restore import SavedPrompts
from ..sizing import ContextChoice
from .sequences import Join, RealignStep, SeqState

__all__ = ["SequenceCells"]

log = logging.getLogger("llamacpp_integrations.engine")


class SequenceCells:
    """The KV cells of one engine's sequences.

    Args:
        model: The weights the context is made on.
        config: The engine's configuration (sequences, batch, threads, cache layout, disk).
        kv: The KV cache's layout and size.
        layout: How prompts are read (what a restored prompt may keep).
        index: The engine's prefix index, where the saved prompts on disk are listed.
    """

    def __init__(
        self,
        model: LoadedModel,
        config: EngineConfig,
        *,
        kv: ContextChoice,
        layout: PrefillLayout,
        index: PrefixIndex[Hashable],
        interruptible: bool = False,
    ) -> None:
        self._model = model
        self._interruptible = interruptible
        self._config = config
        self._kv = kv
        self._layout = layout
        self._context: GenerationContext | None = None
        self._stream_cells = kv.n_cells if kv.unified else kv.first_stream_cells
        self.realigning = config.realign_when_idle
        """Whether finished answers are read again while idle (off when configured so, or
        once it failed: not retried on every idle step)."""
        self.disk = None
        if config.prompt_cache_dir is not None:
            self.disk = SavedPrompts(model, config, index=index)

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
        """Whether the streams may still grow: one per sequence, not yet ``stream_limit``."""
        return not self._kv.unified and self._stream_cells < self._kv.n_ctx_per_seq

    @property
    def stream_limit(self) -> int:
        """The most cells a sequence's stream grows to: ``n_ctx_per_seq``."""
        return self._kv.n_ctx_per_seq

    def grow(self, stream_cells: int) -> tuple[list[int], EngineError | None]:
        """Make the streams ``stream_cells`` cells each, every sequence's cells carried over.
        Returns the sequences whose cells could not be carried over (emptied), and why the
        streams could not grow if they could not: then the old size is made again, or, if not
        even that could be made, there is no context and every cell is gone (``made`` is
        False)."""
        old = self._stream_cells
        if self._context is None:
            self._stream_cells = stream_cells
            return [], None
        started = time.perf_counter()
        saved = {
            seq_id: self._context.seq_state(seq_id)
            for seq_id in range(self._config.n_seq_max)
            if self.held(seq_id) > 0
        }
        self._context.close()
        self._context = None
        self._stream_cells = stream_cells
        failure = None
        try:
            context = self.context
        except EngineError as error:
            failure, self._stream_cells = error, old
            try:
                context = self.context
            except EngineError as again:  # no context at all: every cell is gone
                return list(saved), again
        lost = [s for s, state in saved.items() if not context.set_seq_state(s, state)]
        if failure is not None:
            if lost:
                log.error("KV cells of sequences %s were lost while growing the cache", lost)
            return lost, failure
        per_cell = self._kv.kv_bytes_per_cell
        size = "" if per_cell is None else f", {per_cell * self.n_cells / 1024**2:.0f} MiB"
        log.info(
            "KV streams grew from %d to %d cells each (%d sequences%s) in %.3f s",
            old,
            stream_cells,
            self._config.n_seq_max,
            size,
            time.perf_counter() - started,
        )
        return lost, None

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
                    interruptible=self._interruptible,
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

    def refresh(self) -> None:
        """Bring the saved prompts' entries in the prefix index up to date with the disk
        (before a lookup)."""
        if self.disk is not None:
            self.disk.refresh()

    def saved_length(self, prompt: Sequence[int], shared: Mapping[Hashable, int]) -> int:
        """How long a saved prompt ``take_prefix`` might restore for ``prompt`` is (``0``:
        none, no disk cache, or streams that cannot grow, so need not know): the stream must
        hold it whole to take it. ``shared``: ``Scheduler.lookup(prompt)``."""
        if self.disk is None or not self.can_grow:
            return 0
        return self.disk.saved_length(prompt, shared)

    def take_prefix(self, seq: SeqState, shared: Mapping[Hashable, int]) -> int:
        """Give a newly admitted sequence the cells of its reusable prefix (as the scheduler
        chose it), or a longer one from the disk cache; where that fails, the sequence starts
        empty and evaluates its whole prompt. How many prompt tokens its cells now hold (for
        ``Scheduler.prefix_taken``). ``shared``: ``Scheduler.lookup(prompt)``, made before the
        sequence was admitted."""
        held = seq.n_reused
        if not self._keep_prefix(seq):
            self.context.remove(seq.slot.seq_id, 0)
            held = 0
        if self.disk is not None:
            restored = self.disk.restore(
                self.context,
                seq.slot.seq_id,
                seq.prompt,
                held,
                self._layout,
                seq.image_spans,
                shared,
            )
            held = 0 if restored is None else restored
        return held

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

    def realign(self, step: RealignStep, *, run: DecodeRun = decode_alone) -> bool:
        """Read a block of a finished answer again into its slot (``Scheduler.realign``);
        whether it got in. If not, the slot's cells are dropped and ``realigning`` turns off
        (not retried on every idle step: a follow-up reads the answer instead). ``run`` runs
        the decode (the worker's under its stall watch)."""
        context = self.context
        seq_id, start = step.slot.seq_id, step.entry.start_pos
        try:
            if step.copy_from is not None:
                context.remove(seq_id, 0)
                if start > 0:
                    context.share_prefix(step.copy_from.seq_id, seq_id, start)
            if step.drop and not context.remove(seq_id, start):
                raise EngineError("its cells could not be cut")
            status = run(context, partial(context.decode, [step.entry]))
            reason = "no room in the KV cache"
        except EngineError as error:
            status, reason = DecodeStatus.NO_KV_SLOT, str(error)
        if status != DecodeStatus.OK:
            log.warning("reading a finished answer again failed (%s); stopped doing so", reason)
            self.realigning = False
            context.remove(seq_id, 0)
            return False
        return True

    @property
    def evicts(self) -> bool:
        """Whether idle slots' cells may go to make room for others: only in a unified cache
        (with a stream per sequence, another sequence's cells never take a sequence's room)."""
        return self._context is not None and self._kv.unified

    def cut(self, cuts: Mapping[int, int]) -> bool:
        """Drop each sequence's cells from the position given on (``Scheduler.evict``);
        whether there were any."""
        dropped = 0
        for seq_id, start in cuts.items():
            before = self.held(seq_id)
            self.context.remove(seq_id, start)
            dropped += before - self.held(seq_id)
        if cuts:
            log.debug(
                "KV cache full: dropped %d idle cached cells of sequences %s, oldest blocks first",
                dropped,
                sorted(cuts),
            )
        return bool(cuts)

    def drop(self, seq_id: int) -> None:
        """Drop all of a sequence's cells (nothing to do before the context exists)."""
        if self._context is not None:
            self._context.remove(seq_id, 0)

    def close(self) -> None:
        """Free the context and its cells."""
        if self._context is not None:
            self._context.close()
            self._context = None
