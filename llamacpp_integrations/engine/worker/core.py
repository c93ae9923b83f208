"""One engine's serving state on the worker thread: its contexts, scheduler and requests.

The worker (``host.py``) calls ``take_inbox`` and ``step`` in turn. ``take_inbox`` admits new
work to free slots; ``step`` lets the scheduler plan a step, decodes it in one ``llama_decode``,
and has every sequence that produced logits sampled and its tokens taken into its request
(``sampling.py``, which asks for drafts before planning and settles them after, when the engine
speculates). A step may also read one image of a prompt into its sequence, after the text
decode, and embed one batch of texts. What needs deciding comes back as data, and the core
applies it: room in the KV cache (``room.py`` decides how far the streams grow, who gives
way, who ends; ``keep_room.py`` carries it out and hands back who ends) and the requests that
ended while their tokens were taken. Every way a request ends (stop, length, cancel, timeout,
error, no room, engine closing) goes through ``_finish``, which frees its sequence. Contexts
are made on first use: an engine that only embeds never allocates a generation KV cache, one
that only chats no embedding context.
"""

from __future__ import annotations

import logging
import time
from collections import deque
from collections.abc import Iterator, Mapping, Sequence
from functools import partial

from ...errors import (
    EngineClosedError,
    EngineError,
    InvalidRequestError,
    LlamaCppIntegrationError,
    RequestCancelledError,
    RequestTimeoutError,
)
from ..batch import BatchEntry
from ..channel import EventChannel
from ..config import EngineConfig
from ..embedding.work import Embedder, EmbeddingWork, Vectors
from ..native.embedder import EmbeddingContext
from ..native.runner import DecodeStatus, GenerationContext, NativeContext
from ..native.vision import VisionProjector
from ..native.weights import LoadedModel
from ..results import FinishReason, StreamChunk
from ..sizing import ContextChoice
from ..speculation.step import SpeculationStep
from .active import ActiveRequest
from .cells import SequenceCells
from .decode_threads import DecodeThreads
from .inbox import Inbox
from .keep_room import RoomKeeper
from .requests import PreparedRequest
from .room import cells_needed, cells_to, drop_ended
from .sampling import Sampling, readers_gone
from .scheduler import Scheduler
from .sequences import ImageStep, SeqState, StepPlan
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
        self.scheduler = Scheduler.of(config, model.turn_ends(), model.line_breaks())
        # Only a count left to the engine follows the machine's load, and only on the CPU;
        # deterministic mode keeps every run's settings the same.
        self.threads = DecodeThreads(
            config.threads,  # read once: it reads the machine's files
            follow_load=config.n_threads is None
            and not config.deterministic
            and model.n_gpu_layers == 0,
            contexts=self._contexts,
            publish=self.publish,
        )
        watched = self.threads.watched
        self.cells = SequenceCells(
            model,
            config,
            kv=kv,
            layout=self.scheduler.layout,
            index=self.scheduler.index,
            interruptible=watched,
        )
        self.active: dict[str, ActiveRequest] = {}
        embedder = partial(
            EmbeddingContext,
            model,
            pooling=embedding_pooling,
            n_ctx=config.embedding_n_ctx,
            n_seq_max=config.embedding_n_seq_max,
            n_threads=self.threads.target,
            tuning=config,
            interruptible=watched,
        )
        self.embeds = EmbeddingWork(
            embedder,
            n_ctx=config.embedding_n_ctx,
            n_batch=config.n_batch,
            on_cpu=model.n_gpu_layers == 0,
            run=self._embed,
        )
        self.closing = False
        self.steps = 0
        self._taken: deque[PreparedRequest] = deque()  # out of the inbox, not yet admitted
        self._orphaned: set[EventChannel] = set()  # channels whose event loop is gone
        # Last: the draft context (made here, on the worker) is freed by ``shutdown`` only.
        self.speculation: SpeculationStep | None = None
        if config.speculative is not None:
            self.speculation = SpeculationStep.for_engine(
                config, model, draft_weights, kv=kv, run=self.threads.run if watched else None
            )
        self.sampling = Sampling(model, self.scheduler, self.speculation, kv.n_ctx_per_seq)
        self.room = RoomKeeper(
            self.cells,
            self.scheduler,
            config.n_seq_max,
            end=self._end_for_room,
            forget=self._forget_drafts,
            publish=self.publish,
        )
        self.threads.start()  # last: nothing above may leave the watch's thread running

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
        self._end_orphans()
        if batch.requests or batch.cancels or batch.calls or batch.embeds:
            self.publish()
        self.hand_over()  # what a cancel or a timeout ended

    def step(self) -> None:
        """One generation step and one embedding batch, each if there is work for it."""
        if self.closing:
            return
        start = time.perf_counter()
        chatting = bool(self.scheduler.running)
        if chatting:
            self._step()
            if self.board.due(start):  # at most every few ms; what ends a request publishes
                self.publish()
            self.embeds.chat_stepped(time.perf_counter() - start)
        if self.embeds or not self.scheduler.running:
            self.hand_over()  # no chat decode comes next: the step's events go now
        self.embeds.step(chatting=chatting)
        self.threads.stepped(time.perf_counter() - start)

    def _contexts(self) -> Iterator[NativeContext]:
        """Every context made so far that decodes run on (``DecodeThreads`` sets their count)."""
        if self.cells.made:
            yield self.cells.context
        if isinstance(self.embeds.embedder, EmbeddingContext):
            yield self.embeds.embedder
        draft = None if self.speculation is None else self.speculation.draft_model
        if draft is not None and draft.made_context is not None:
            yield draft.made_context

    def _embed(self, embedder: Embedder, token_lists: list[Sequence[int]]) -> Vectors:
        """One embedding decode (``EmbeddingWork``'s ``run``), under the stall watch."""
        if isinstance(embedder, EmbeddingContext):
            return self.threads.run(embedder, partial(embedder.embed, token_lists))
        return embedder.embed(token_lists)

    def hand_over(self) -> None:
        """Hand the events gathered since the last hand-over to their callers (``Outbox``).
        Called right before a decode, so that the callers read while the kernels run, and
        before the worker would wait. A request whose caller's event loop is gone is noted
        here and cancelled before the next plan (``_end_orphans``): right before a decode, the
        plan being decoded still holds its sequence."""
        self._orphaned.update(self.sampling.outbox.flush())

    def _end_orphans(self) -> None:
        """Cancel the running requests whose caller's event loop is gone."""
        if self._orphaned:
            gone, self._orphaned = list(self._orphaned), set()
            for ending in readers_gone(self.active, gone):
                self._finish(ending.active, ending.reason)

    @property
    def can_realign(self) -> bool:
        """Whether a finished answer waits to be read again (``Scheduler.realign``)."""
        return not self.closing and self.cells.realigning and self.scheduler.realign_wanted()

    def realign(self) -> bool:
        """Read one block of a finished answer again, if one waits; only while the worker has
        no work. Whether it did."""
        if self.closing or not (self.cells.realigning and self.cells.made):
            return False
        step = self.scheduler.realign()
        if step is None:
            return False
        self.context.use_lora(step.slot.lora)  # the adapters its cells were made with
        if not self.cells.realign(step, run=self.threads.run):
            self.scheduler.abandon(step.slot)
            return False
        self.scheduler.realigned(step)
        self.steps += 1
        self.publish()
        return True

    def publish(self) -> None:
        """Put a fresh ``EngineStats`` on the board (cheap: a few calls per slot)."""
        self.board.latest = snapshot(
            self.scheduler,
            self.cells,
            self.speculation,
            running=len(self.active),
            steps=self.steps,
            threads=self.threads.count,
        )

    def drop_idle_caches(self) -> None:
        """Free the cells of every slot no request holds."""
        self.room.drop_idle()

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
            prompt = request.prompt_tokens
            self.cells.refresh()
            shared = self.scheduler.lookup(prompt, request.lora)
            if self.cells.can_grow:
                # Room for the whole prompt now, and for a saved prompt it may restore from
                # disk (a state is taken whole, then cut back); before the context is first
                # made, this only sizes it.
                needs = max(cells_to(request, len(prompt)), self.cells.saved_length(prompt, shared))
                decision = self.room.grow({request.request_id: needs})
                if decision.failure is not None:
                    raise decision.failure
                if decision.lost:  # what the prompt shares changed
                    shared = self.scheduler.lookup(prompt, request.lora)
            self.context  # noqa: B018 -- made on first use; may fail for lack of memory
        except EngineError as error:
            error.request_id = request.request_id
            request.refuse(error)
            return
        media = request.media
        spans = {} if media is None else {s: span.n_pos for s, span in media.spans.items()}
        seq = self.scheduler.admit(request.request_id, prompt, spans, shared, request.lora)
        self.scheduler.prefix_taken(seq, self.cells.take_prefix(seq, shared))
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
        self._end_orphans()
        if self.speculation is not None:
            self.hand_over()  # drafting decodes with the draft model first
        plan = self.scheduler.plan(self.sampling.drafts(self.active))
        if self.cells.can_grow:  # not once streams are whole: no work per step then
            needs = cells_needed(plan, {r: a.prepared for r, a in self.active.items()})
            lost = self.room.grow(needs, plan.joins).lost
            drop_ended(plan, set(self.active), lost)  # what ended leaves the plan
        self.cells.join(plan.joins)
        for group in plan.groups:  # each sampled before the next decode overwrites the logits
            self._decode_group(plan, group)
        if plan.image is not None:
            self._decode_image(plan.image)
        if not plan.groups and plan.image is None:
            self.hand_over()  # nothing decoded (every stream paused): nothing to wait for

    # ---- decoding ---------------------------------------------------------------------------

    def _decode_group(self, plan: StepPlan, group: list[int]) -> None:
        def decode() -> int:
            if group:  # the scheduler groups rows by the adapters they are decoded with
                self.context.use_lora(plan.entries[group[0]][0].lora)
            context = self.context
            entries = [plan.entries[index][1] for index in group]
            return self.threads.run(context, partial(context.decode, entries))

        self.hand_over()
        try:
            status = decode()
            if status == DecodeStatus.NO_KV_SLOT:
                needed = sum(len(plan.entries[index][1].tokens) for index in group)
                status = self.room.retry(decode, needed)
            while status == DecodeStatus.NO_KV_SLOT and group:
                group = self.room.give_way(plan, group)
                status = decode()
        except EngineError as error:
            self._fail([plan.entries[index] for index in group], error)
            return
        if not group:
            return
        pairs = [plan.entries[index] for index in group]
        self.steps += 1
        self.scheduler.decoded(plan, group)
        disk = self.scheduler.disk_lora  # the adapters of the states saved on disk
        read_prompt = [
            seq
            for seq, entry in pairs
            if entry.logits_last and entry.start_pos + len(entry.tokens) == len(seq.prompt)
            if seq.lora == disk
        ]
        for ending in self.sampling.take(self.context, pairs, self.active, time.monotonic()):
            self._finish(ending.active, ending.reason, ending.error)
        if read_prompt:
            # After sampling, so the first token is not held up by the write.
            self.cells.save_prompts([seq for seq in read_prompt if seq.request_id in self.active])

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

        self.context.use_lora(step.seq.lora)
        self.hand_over()
        code = self.vision.evaluate(self.context, span, seq_id=seq_id, n_past=step.start)
        if code == DecodeStatus.NO_KV_SLOT:
            code = self.room.retry(evaluate_again, step.n_pos)
        if code != 0:
            why = "no room in the KV cache" if code == DecodeStatus.NO_KV_SLOT else f"code {code}"
            log.error("image evaluation failed: %s", why)
            self._finish(active, "error", error=EngineError(f"evaluating an image failed: {why}"))
            return
        self.steps += 1
        self.scheduler.image_decoded(step)

    # ---- endings --------------------------------------------------------------------------

    def _finish(
        self,
        active: ActiveRequest,
        reason: FinishReason,
        error: LlamaCppIntegrationError | None = None,
    ) -> None:
        request = active.prepared
        event: StreamChunk | LlamaCppIntegrationError = (
            active.last_chunk(reason, time.monotonic()) if error is None else active.failure(error)
        )
        keep = reason in ("stop", "length")
        self.scheduler.release(active.seq, keep_cache=keep)
        if not keep:
            self.cells.drop(active.seq.slot.seq_id)
            self._forget_drafts(active.seq.slot.seq_id)
        active.sampler.close()
        if request.media is not None:
            request.media.close()
        del self.active[request.request_id]
        # The stats show the request gone before its caller hears it ended; the event follows
        # the request's chunks through the outbox, handed over with them.
        self.publish()
        self.sampling.outbox.put(request.channel, event)

    def _end_for_room(self, ends: Mapping[str, EngineError]) -> None:
        """End the requests keeping room ended (``RoomKeeper``), with their errors."""
        for active in list(self.active.values()):
            error = ends.get(active.prepared.request_id)
            if error is not None:
                self._finish(active, "error", error=error)

    def _forget_drafts(self, seq_id: int) -> None:
        if self.speculation is not None:
            self.speculation.forget(seq_id)

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
        try:
            self.hand_over()
        finally:
            self.sampling.outbox.close()
        self.embeds.close(lambda: EngineClosedError(reason))
        self.cells.close()
        self.threads.close()
        if self.speculation is not None:
            self.speculation.close()
