"""One engine's serving state on the worker thread: its contexts, scheduler and requests.

The worker (``host.py``) calls ``take_inbox`` and ``step`` in turn. ``take_inbox`` admits new
work to free slots; ``step`` lets the scheduler plan a step, decodes it in one ``llama_decode``,
samples every sequence that produced logits, and hands each token to its request
(``active.py``), whose output processor turns tokens into events. A speculating engine asks for
drafts before planning and settles them after sampling (``speculation/step.py``: data in, data
out). A step may also read one image of a prompt into its sequence, after the text decode, and
embed one batch of texts. Every way a request ends (stop, length, cancel, timeout, error, engine
closing) goes through ``_finish``, which frees its sequence.

Contexts are made on first use: an engine that only embeds never allocates a generation KV cache,
and one that only chats never allocates an embedding context.
"""

from __future__ import annotations

import logging
import time
from collections import deque
from collections.abc import Callable
from functools import cached_property, partial

from ...errors import (
    EngineClosedError,
    EngineError,
    InvalidRequestError,
    KVCacheFullError,
    LlamaCppIntegrationError,
    RequestCancelledError,
    RequestTimeoutError,
)
from ..batch import BatchEntry
from ..config import EngineConfig
from ..embedding.work import EmbeddingWork
from ..native.embedder import EmbeddingContext
from ..native.runner import DecodeStatus, GenerationContext, LoadedModel
from ..native.vision import VisionProjector
from ..results import FinishReason, StreamChunk
from ..sizing import ContextChoice
from ..speculation.step import DraftAsk, SpeculationStep
from .active import ActiveRequest
from .cells import SequenceCells
from .inbox import Inbox
from .logprobs import LogprobComputer
from .requests import PreparedRequest
from .room import cells_needed, cells_to, drop_ended
from .scheduler import Scheduler
from .sequences import ImageStep, SeqState, SeqStatus, StepPlan
from .stats import StatsBoard, snapshot

__all__ = ["EngineCore"]

log = logging.getLogger("llamacpp_integrations.engine")


class EngineCore:
    """Runs on the worker thread; built there, so the contexts never leave it."""

    def __init__(
        self,
        model: LoadedModel,
        config: EngineConfig,
        inbox: Inbox,
        *,
        kv: ContextChoice,
        embedding_pooling: int,
        vision: VisionProjector | None = None,
        draft_weights: LoadedModel | None = None,
    ) -> None:
        self.model = model
        self.vision = vision
        self.draft_weights = draft_weights
        self.config = config
        self.inbox = inbox
        self.board = StatsBoard()
        self._n_ctx_per_seq = kv.n_ctx_per_seq
        self.scheduler = Scheduler.of(config)
        self.cells = SequenceCells(model, config, self.scheduler, kv=kv)
        self.active: dict[str, ActiveRequest] = {}
        embedder = partial(
            EmbeddingContext,
            model,
            pooling=embedding_pooling,
            n_ctx=config.embedding_n_ctx,
            n_seq_max=config.embedding_n_seq_max,
            n_threads=config.threads,
            tuning=config,
        )
        self.embeds = EmbeddingWork(
            embedder,
            n_ctx=config.embedding_n_ctx,
            n_batch=config.n_batch,
            on_cpu=model.n_gpu_layers == 0,
        )
        self.closing = False
        self.steps = 0
        self._taken: deque[PreparedRequest] = deque()  # out of the inbox, not yet admitted
        # Last: the draft context (made here, on the worker) is freed by ``shutdown`` only.
        self.speculation: SpeculationStep | None = None
        if config.speculative is not None:
            self.speculation = SpeculationStep.for_engine(config, model, draft_weights, kv=kv)

    @property
    def busy(self) -> bool:
        """Whether a step has anything to do."""
        return not self.closing and bool(self.scheduler.running or self.embeds)

    @property
    def n_free(self) -> int:
        return self.scheduler.n_free

    @property
    def context(self) -> GenerationContext:
        """The generation context, made when the first request is admitted."""
        return self.cells.context

    # ---- the worker's calls ---------------------------------------------------------------

    def take_inbox(self, now: float) -> None:
        """Admit what waits in the inbox, as far as slots are free; apply cancellations."""
        if self.closing:
            return
        batch = self.inbox.take(self.scheduler.n_free, now=now)
        if batch.closed:
            self.closing = True
            return
        # Held here until admitted, so that if anything below raises, shutdown still answers
        # them: taken out of the inbox, they would otherwise be nobody's.
        self._taken.extend(batch.requests)
        self.embeds.add(batch.embeds)
        for call in batch.calls:
            call(self)
        for request_id in batch.cancels:
            self._cancel(request_id)
        while self._taken:
            self._admit(self._taken[0], now)
            self._taken.popleft()
        self._expire(now)
        if batch.requests or batch.cancels or batch.calls:
            self.publish()

    def step(self) -> None:
        """One generation step and one embedding batch, each if there is work for it."""
        if self.closing:
            return
        chatting = bool(self.scheduler.running)
        if chatting:
            start = time.perf_counter()
            self._step()
            self.publish()
            self.embeds.chat_stepped(time.perf_counter() - start)
        self.embeds.step(chatting=chatting)

    @property
    def can_realign(self) -> bool:
        """Whether a finished answer waits to be read again (``SequenceCells.realign``)."""
        return not self.closing and self.cells.can_realign

    def realign(self) -> bool:
        """Read one block of a finished answer again, if one waits; only while the worker has
        no work. Whether it did."""
        if self.closing or not self.cells.realign():
            return False
        self.steps += 1
        self.publish()
        return True

    def publish(self) -> None:
        """Put a fresh ``EngineStats`` on the board (cheap: a few calls per slot)."""
        self.board.latest = snapshot(
            self.scheduler, self.cells, self.speculation, running=len(self.active), steps=self.steps
        )

    def drop_idle_caches(self) -> None:
        """Free the cells of every slot no request holds."""
        for seq_id in self.cells.drop_idle():
            if self.speculation is not None:
                self.speculation.forget(seq_id)
        self.publish()

    # ---- admission ------------------------------------------------------------------------

    def _admit(self, request: PreparedRequest, now: float) -> None:
        if request.request_id in self.active:
            # The same request object submitted twice at once: ids key cancellation and the
            # active table, so the second would orphan the first's sequence.
            request.refuse(
                InvalidRequestError(
                    f"a request with id {request.request_id!r} is already running; give each "
                    "concurrent request its own request_id",
                    request_id=request.request_id,
                )
            )
            return
        try:
            # Room for the whole prompt now, and for a saved prompt it may restore from disk
            # (a state is taken whole, then cut back); before the context is first made, this
            # only sizes it.
            prompt = request.prompt_tokens
            shared = self.cells.lookup(prompt)
            room = max(cells_to(request, len(prompt)), self.cells.saved_length(prompt, shared))
            if self._grow(room):  # some slots lost their cells: what they share changed
                shared = self.cells.lookup(prompt)
            self.context  # noqa: B018 -- made on first use; may fail for lack of memory
        except EngineError as error:
            error.request_id = request.request_id
            request.refuse(error)
            return
        media = request.media
        spans = {} if media is None else {s: span.n_pos for s, span in media.spans.items()}
        seq = self.scheduler.admit(request.request_id, prompt, spans, shared)
        self.cells.take_prefix(seq, shared)
        spec = None
        if self.speculation is not None:
            spec = self.speculation.start(
                request.prompt_tokens,
                allowed=request.speculative,
                constrained=request.constrained,
                has_images=media is not None,
            )
        self.active[request.request_id] = ActiveRequest.start(request, seq, now, spec)

    # ---- one step -------------------------------------------------------------------------

    def _step(self) -> None:
        plan = self.scheduler.plan(self._drafts())
        self._fit(plan)
        self.cells.join(plan.joins)
        if plan.entries:
            self._decode_text(plan)
        if plan.image is not None:
            self._decode_image(plan.image)

    def _fit(self, plan: StepPlan) -> None:
        """Grow the KV streams if a sequence of the plan needs more cells than they hold. If
        they cannot grow, the requests that needed it end with ``KVCacheFullError``; requests
        whose cells were lost end with ``EngineError``, and so do followers that were to copy
        lost cells; all of them leave the plan."""
        if not self.cells.can_grow:  # the usual case once streams are whole: no work per step
            return
        needs = cells_needed(plan, {r: a.prepared for r, a in self.active.items()})
        if not needs or max(needs.values()) <= self.cells.stream_cells:
            return
        try:
            gone = self._grow(max(needs.values()))
        except EngineError as error:
            gone = set() if self.cells.made else set(range(self.config.n_seq_max))
            for request_id, cells in needs.items():
                active = self.active.get(request_id)
                if active is not None and cells > self.cells.stream_cells:
                    gone.add(active.seq.slot.seq_id)
                    full = KVCacheFullError(
                        f"the KV cache could not grow to {cells} cells per sequence: {error}"
                    )
                    self._finish(active, "error", error=full)
        for join in plan.joins:
            if join.source.seq_id in gone:
                self._lose({join.target.seq_id}, EngineError("the prefix it was to copy was lost"))
        plan.joins = [j for j in plan.joins if j.source.seq_id not in gone and j.target.busy]
        drop_ended(plan, set(self.active))

    def _grow(self, cells: int) -> set[int]:
        """``SequenceCells.grow``; the requests whose cells it lost end with an error. The
        sequences whose cells were lost.

        Raises:
            EngineError: the streams could not grow (if not even the old context came back,
                every request ended).
        """
        try:
            lost = set(self.cells.grow(cells))
        except EngineError as error:
            if not self.cells.made:  # every cell is gone
                self._lose(set(range(self.config.n_seq_max)), error)
            raise
        if lost:
            self._lose(lost, EngineError("its KV cells were lost while the cache grew"))
        return lost

    def _lose(self, seq_ids: set[int], error: EngineError) -> None:
        """The cells of ``seq_ids`` are gone: idle slots forget them, requests end."""
        for slot in self.scheduler.slots:
            if slot.seq_id in seq_ids and not slot.busy:
                self.scheduler.abandon(slot)
        for active in list(self.active.values()):
            if active.seq.slot.seq_id in seq_ids:
                self._finish(active, "error", error=EngineError(str(error)))

    def _decode_text(self, plan: StepPlan) -> None:
        """Decode the plan's groups in turn, sampling each before the next overwrites the
        logits."""
        for group in plan.groups:
            self._decode_group(plan, group)

    def _decode_group(self, plan: StepPlan, group: list[int]) -> None:
        def decode() -> int:
            return self.context.decode([plan.entries[index][1] for index in group])

        try:
            status = decode()
            if status == DecodeStatus.NO_KV_SLOT:
                needed = sum(len(plan.entries[index][1].tokens) for index in group)
                status = self._retry_with_room(decode, needed)
            while status == DecodeStatus.NO_KV_SLOT and group:
                group = self._make_room(plan, group)
                status = decode()
        except EngineError as error:
            self._fail([plan.entries[index] for index in group], error)
            return
        if not group:
            return
        pairs = [plan.entries[index] for index in group]
        self.steps += 1
        self.scheduler.decoded(plan, group)
        read_prompt = [
            seq
            for seq, entry in pairs
            if entry.logits_last and entry.start_pos + len(entry.tokens) == len(seq.prompt)
        ]
        now = time.monotonic()
        for seq, entry in pairs:
            if entry.logits_all:
                self._verify(self.active[seq.request_id], entry, now)
            elif entry.logits_last:
                active = self.active[seq.request_id]
                token = self._next_token(active, entry.logits_index)
                self._take(active, token, now, entry.logits_index)
        if read_prompt:
            # After sampling, so the first token is not held up by the write.
            self.cells.save_prompts([seq for seq in read_prompt if seq.request_id in self.active])

    def _retry_with_room(self, decode: Callable[[], int], needed: int) -> int:
        """After a decode found no room for ``needed`` cells: free idle cached cells, least
        recently used block first, and decode again, until it fits or none are left (then
        every idle slot's cells go, in case a few partial blocks were what it lacked). The
        last status."""
        status = DecodeStatus.NO_KV_SLOT
        while status == DecodeStatus.NO_KV_SLOT and self.cells.evict(needed):
            self.publish()
            status = decode()
        if status == DecodeStatus.NO_KV_SLOT:
            self.drop_idle_caches()
            status = decode()
        return status

    def _make_room(self, plan: StepPlan, group: list[int]) -> list[int]:
        """The unified cache has no room for the group even with idle cells freed: one of its
        sequences gives up its cells (a prompt being read waits to read again, or else the
        newest answer ends with ``KVCacheFullError``). The rest of the group."""
        seq, waits = self.scheduler.make_room([plan.entries[index][0] for index in group])
        self.context.remove(seq.slot.seq_id, 0)
        if waits:
            self.scheduler.pause(seq)
        else:
            error = KVCacheFullError(
                f"the KV cache ({self.cells.n_cells} cells) is full with running requests' "
                "cells; set a larger kv_cells or a smaller n_seq_max"
            )
            self._finish(self.active[seq.request_id], "error", error=error)
        return [index for index in group if plan.entries[index][0] is not seq]

    def _decode_image(self, step: ImageStep) -> None:
        """Encode one image and decode its embeddings into its sequence.

        This runs after the step's text decode and sampling: its own decode replaces the
        logits, and prompts never end on an image, so nothing samples from it.
        """
        active = self.active.get(step.seq.request_id)
        if active is None:  # ended earlier in this step
            return
        media = active.prepared.media
        assert self.vision is not None and media is not None
        span = media.spans[step.start]
        seq_id = step.seq.slot.seq_id

        def evaluate_again() -> int:
            assert self.vision is not None
            # Whatever part of the image got in before the cache ran out goes first.
            self.context.remove(seq_id, step.start)
            return self.vision.evaluate(self.context, span, seq_id=seq_id, n_past=step.start)

        code = self.vision.evaluate(self.context, span, seq_id=seq_id, n_past=step.start)
        if code == DecodeStatus.NO_KV_SLOT:
            code = self._retry_with_room(evaluate_again, step.n_pos)
        if code != 0:
            why = "no room in the KV cache" if code == DecodeStatus.NO_KV_SLOT else f"code {code}"
            log.error("image evaluation failed: %s", why)
            self._finish(active, "error", error=EngineError(f"evaluating an image failed: {why}"))
            return
        self.steps += 1
        self.scheduler.image_decoded(step)

    def _next_token(self, active: ActiveRequest, logits_index: int) -> int:
        """The sampled token, or the next forced one (a reasoning budget that ran out)."""
        forced = active.next_forced()
        return forced if forced is not None else active.sampler.sample(self.context, logits_index)

    def _take(
        self, active: ActiveRequest, token: int, now: float, logits_index: int, *, send: bool = True
    ) -> bool:
        """Hand one generated token to its request; False when it ended the request. Without
        ``send`` the text waits for the caller to send it (a speculative step sends once)."""
        request = active.prepared
        if active.first_token_at is None:
            active.first_token_at = now
        if self.model.is_eog(token) and not request.ignore_eos:
            self._finish(active, "stop")
            return False
        logprob = None
        if request.logprobs is not None:
            # The raw row is still that of this step's decode: sampling only reads it.
            logprob = self._logprobs.compute(
                self.context.logits_view(logits_index),
                token,
                request.logprobs,
                special=request.special,
            )
        piece = self.model.token_to_piece(token, special=request.special)
        ended = active.take(token, piece, logprob)
        if ended is not None:
            self._finish(active, ended)
            return False
        if send and not self._send(active):
            self._finish(active, "cancelled")
            return False
        return True

    def _send(self, active: ActiveRequest) -> bool:
        """Send what became certain; False when the caller went away."""
        chunk = active.pending_chunk()
        return chunk is None or active.prepared.channel.put(chunk)

    # ---- speculation ----------------------------------------------------------------------

    def _drafts(self) -> dict[int, list[int]]:
        """This step's drafts by slot id, from the sequences that speculate."""
        if self.speculation is None:
            return {}
        asks: list[DraftAsk] = []
        n_decoding = 0
        for seq in self.scheduler.running:
            if seq.status is not SeqStatus.DECODE or seq.next_token is None:
                continue
            n_decoding += 1
            active = self.active[seq.request_id]
            if active.spec is None or active.forced:
                continue
            room = active.draft_room(self._n_ctx_per_seq)
            asks.append(
                DraftAsk(seq.slot.seq_id, seq.slot.cached, seq.next_token, active.spec, room)
            )
        return self.speculation.propose(asks, n_decoding=n_decoding)

    def _verify(self, active: ActiveRequest, entry: BatchEntry, now: float) -> None:
        """Sample a speculating sequence's positions in order while its sampler agrees with
        the drafts, settle them, take the tokens, and drop the cells of rejected drafts."""
        assert self.speculation is not None and active.spec is not None
        draft = entry.tokens[1:]
        sampled: list[int] = []
        for i in range(len(draft) + 1):
            token = active.sampler.sample(self.context, entry.first_index + i)
            sampled.append(token)
            if i == len(draft) or token != draft[i] or self.model.is_eog(token):
                break
        # Settled before the tokens are taken: a token that ends the request publishes the
        # stats, and a caller that sees the request gone then sees its drafts too.
        accepted = self.speculation.settle(active.spec, draft, sampled)
        for i, token in enumerate(sampled):
            if not self._take(active, token, now, entry.first_index + i, send=False):
                # Ended: its cells (drafts included) still hold exactly the tokens the slot
                # lists, so they stay valid for prefix reuse.
                return
        n_keep = entry.start_pos + 1 + accepted
        if accepted < len(draft):
            seq = active.seq
            if not self.context.remove(seq.slot.seq_id, n_keep):
                self._finish(active, "error", EngineError("could not drop rejected draft cells"))
                return
            self.scheduler.rollback(seq, n_keep)
        if not self._send(active):
            self._finish(active, "cancelled")

    @cached_property
    def _logprobs(self) -> LogprobComputer:
        """Made when a request first asks for log-probabilities."""
        return LogprobComputer(self.model)

    # ---- endings --------------------------------------------------------------------------

    def _finish(
        self,
        active: ActiveRequest,
        reason: FinishReason,
        error: LlamaCppIntegrationError | None = None,
    ) -> None:
        request = active.prepared
        event: StreamChunk | LlamaCppIntegrationError
        if error is None:
            event = active.last_chunk(reason, time.monotonic())
        else:
            event = active.failure(error)
        keep = reason in ("stop", "length")
        self.scheduler.release(active.seq, keep_cache=keep)
        if not keep:
            if self.cells.made:
                self.context.remove(active.seq.slot.seq_id, 0)
            if self.speculation is not None:
                self.speculation.forget(active.seq.slot.seq_id)
        active.sampler.close()
        if request.media is not None:
            request.media.close()
        del self.active[request.request_id]
        # The stats show the request gone before its caller hears it ended.
        self.publish()
        request.channel.put(event)

    def _cancel(self, request_id: str) -> None:
        active = self.active.get(request_id)
        if active is not None:
            self._finish(active, "cancelled")
            return
        self.embeds.cancel(request_id, RequestCancelledError("cancelled"))

    def _expire(self, now: float) -> None:
        for active in list(self.active.values()):
            deadline = active.prepared.deadline
            if deadline is not None and deadline <= now:
                self._finish(active, "error", error=RequestTimeoutError("the request timed out"))
        self.embeds.expire(now)

    def _fail(self, pairs: list[tuple[SeqState, BatchEntry]], error: EngineError) -> None:
        log.error("decode failed: %s", error)
        for seq, _ in pairs:
            active = self.active.get(seq.request_id)
            if active is not None:
                self._finish(active, "error", error=EngineError(str(error)))

    # ---- shutdown -------------------------------------------------------------------------

    def shutdown(self, reason: str = "the engine was closed") -> None:
        """Fail everything still running or waiting with ``EngineClosedError(reason)``; free
        the contexts (the weights and projector belong to the host)."""
        self.closing = True
        self.inbox.close(reason)  # first: nothing new gets in while the running ones end
        while self._taken:
            request = self._taken.popleft()
            request.refuse(EngineClosedError(reason, request_id=request.request_id))
        for active in list(self.active.values()):
            self._finish(active, "error", error=EngineClosedError(reason))
        self.embeds.close(lambda: EngineClosedError(reason))
        self.cells.close()
        if self.speculation is not None:
            self.speculation.close()
