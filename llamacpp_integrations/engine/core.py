"""One engine's serving state on the worker thread: its contexts, scheduler and requests.

The worker (``host.py``) calls ``take_inbox`` and ``step`` in turn. ``take_inbox`` admits new
work to free slots; ``step`` lets the scheduler plan a step, decodes it in one ``llama_decode``,
samples every sequence that produced logits, and turns tokens into events through each request's
output processor (a speculating engine drafts before the decode and verifies after it, see
``speculation_step.py``). A step may also read one image of a prompt into its sequence, after
the text decode, and embed one batch of texts. Every way a request ends (stop, length, cancel,
timeout, error, engine closing) goes through ``_finish``, which frees its sequence.

Contexts are made on first use: an engine that only embeds never allocates a generation KV cache,
and one that only chats never allocates an embedding context.
"""

from __future__ import annotations

import logging
import time
from collections import deque

from ..errors import (
    EngineClosedError,
    EngineError,
    InvalidRequestError,
    LlamaCppIntegrationError,
    RequestCancelledError,
    RequestTimeoutError,
)
from .active import ActiveRequest
from .config import EngineConfig
from .draft_model import DraftModel
from .embedder import EmbeddingContext
from .embedding_work import EmbeddingWork
from .inbox import Inbox
from .logprobs import LogprobComputer
from .output import OutputProcessor
from .requests import PreparedRequest
from .runner import DecodeStatus, GenerationContext, LoadedModel
from .saved_prompts import SavedPrompts
from .scheduler import ImageStep, Scheduler, SeqState, StepPlan
from .speculation_step import SpeculationStep
from .types import EngineStats, FinishReason, SlotStats, StreamChunk
from .vision import VisionProjector

__all__ = ["EngineCore", "StatsBoard"]

log = logging.getLogger("llamacpp_integrations.engine")

class StatsBoard:
    """Where the worker publishes an engine's latest ``EngineStats`` for callers to read."""

    def __init__(self) -> None:
        self.latest = EngineStats(running=0, waiting=0, steps=0, slots=())


class EngineCore:
    """Runs on the worker thread; built there, so the contexts never leave it."""

    def __init__(
        self,
        model: LoadedModel,
        config: EngineConfig,
        inbox: Inbox,
        *,
        n_ctx_per_seq: int,
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
        self._n_ctx_per_seq = n_ctx_per_seq
        self._context: GenerationContext | None = None
        self.scheduler = Scheduler(config.n_seq_max, config.n_batch)
        self.active: dict[str, ActiveRequest] = {}
        self._embedding_pooling = embedding_pooling
        self.embeds = EmbeddingWork(
            self._make_embedder,
            n_ctx=config.embedding_n_ctx,
            n_batch=config.n_batch,
            on_cpu=model.n_gpu_layers == 0,
        )
        self._logprobs: LogprobComputer | None = None  # made when a request first asks
        self.closing = False
        self.steps = 0
        self._taken: deque[PreparedRequest] = deque()  # out of the inbox, not yet admitted

        self.disk: SavedPrompts | None = None
        if config.prompt_cache_dir is not None:
            self.disk = SavedPrompts(model, config, self.scheduler)
        # Last: the draft context (made here, on the worker) is freed by ``shutdown`` only.
        self.speculation: SpeculationStep | None = None
        if config.speculative is not None:
            self.speculation = self._make_speculation()

    def _make_speculation(self) -> SpeculationStep:
        draft = None
        if self.config.speculative == "draft":
            assert self.draft_weights is not None
            draft = DraftModel(
                self.draft_weights,
                self.model,
                self.config,
                n_ctx_per_seq=self._n_ctx_per_seq,
            )
        return SpeculationStep(
            self.config,
            self.scheduler,
            n_ctx_per_seq=self._n_ctx_per_seq,
            context=lambda: self.context,
            sample=self._next_token,
            take=self._on_token,
            finish=self._finish,
            send=self._send,
            draft_model=draft,
        )

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
        if self._context is None:
            self._context = GenerationContext(
                self.model,
                n_ctx_per_seq=self._n_ctx_per_seq,
                n_seq_max=self.config.n_seq_max,
                n_batch=self.config.n_batch,
                n_threads=self.config.threads,
                flash_attention=self.config.flash_attention_for(self.model.n_gpu_layers),
                kv_unified=self.config.kv_unified,
                tuning=self.config,
            )
        return self._context

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

    def publish(self) -> None:
        """Put a fresh ``EngineStats`` on the board (cheap: a few calls per slot)."""
        slots = []
        for slot in self.scheduler.slots:
            cells = 0
            if self._context is not None:
                lo, hi = self._context.pos_range(slot.seq_id)
                cells = 0 if hi < 0 else hi - lo + 1
            draft = self.speculation.draft_cells(slot.seq_id) if self.speculation else 0
            slots.append(SlotStats(slot.seq_id, slot.busy, len(slot.cached), cells, draft))
        self.board.latest = EngineStats(
            running=len(self.active),
            waiting=0,
            steps=self.steps,
            slots=tuple(slots),
            drafted_tokens=0 if self.speculation is None else self.speculation.stats.drafted,
            accepted_tokens=0 if self.speculation is None else self.speculation.stats.accepted,
        )

    def drop_idle_caches(self) -> None:
        """Free the cells of every slot no request holds."""
        if self._context is None:
            return
        for slot in self.scheduler.slots:
            if not slot.busy and slot.cached:
                self._context.remove(slot.seq_id, 0)
                slot.cached.clear()
                if self.speculation is not None:
                    self.speculation.forget(slot.seq_id)
        self.publish()

    # ---- admission ------------------------------------------------------------------------

    def _admit(self, request: PreparedRequest, now: float) -> None:
        if request.request_id in self.active:
            # The same request object submitted twice at once: ids key cancellation and the
            # active table, so the second would orphan the first's sequence.
            self._refuse(
                request,
                InvalidRequestError(
                    f"a request with id {request.request_id!r} is already running; give each "
                    "concurrent request its own request_id",
                    request_id=request.request_id,
                ),
            )
            return
        try:
            self.context  # noqa: B018 -- made on first use; may fail for lack of memory
        except LlamaCppIntegrationError as error:
            self._refuse(
                request,
                EngineError(
                    f"could not create the generation context ({self.config.n_seq_max} "
                    f"sequences of {self._n_ctx_per_seq} tokens): {error}; lower n_seq_max or "
                    "n_ctx_per_seq",
                    request_id=request.request_id,
                ),
            )
            return
        spans = (
            {}
            if request.media is None
            else {start: span.n_pos for start, span in request.media.spans.items()}
        )
        seq = self.scheduler.admit(request.request_id, request.prompt_tokens, spans)
        if not self._cut_cache(seq):
            self.context.remove(seq.slot.seq_id, 0)
            self.scheduler.forget(seq)
        if self.disk is not None and request.media is None:
            self.disk.restore(seq, self.context)
        spec = None if self.speculation is None else self.speculation.start(request)
        self.active[request.request_id] = ActiveRequest(
            prepared=request,
            seq=seq,
            sampler=request.sampler,
            output=OutputProcessor(request.stop),
            admitted_at=now,
            splitter=None if request.reasoning is None else request.reasoning.splitter(),
            spec=spec,
        )

    def _refuse(self, request: PreparedRequest, error: LlamaCppIntegrationError) -> None:
        """End a request that was never admitted."""
        request.sampler.close()
        if request.media is not None:
            request.media.close()
        request.channel.put(error)

    def _cut_cache(self, seq: SeqState) -> bool:
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

    # ---- one step -------------------------------------------------------------------------

    def _step(self) -> None:
        if self.speculation is not None:
            self.speculation.draft(self.active)
        plan = self.scheduler.plan()
        if plan.entries:
            self._decode_text(plan)
        if plan.image is not None:
            self._decode_image(plan.image)

    def _decode_text(self, plan: StepPlan) -> None:
        entries = [entry for _, entry in plan.entries]
        try:
            status = self.context.decode(entries)
            if status == DecodeStatus.NO_KV_SLOT:
                self.drop_idle_caches()
                status = self.context.decode(entries)
            if status == DecodeStatus.NO_KV_SLOT:
                raise EngineError("the KV cache has no room for this step")
        except EngineError as error:
            self._fail_plan(plan, error)
            return
        self.steps += 1
        self.scheduler.decoded(plan)
        read_prompt = [
            seq
            for seq, entry in plan.entries
            if entry.logits_last and entry.start_pos + len(entry.tokens) == len(seq.prompt)
        ]
        now = time.monotonic()
        for seq, entry in plan.entries:
            if entry.logits_all:
                assert self.speculation is not None
                self.speculation.verify(self.active[seq.request_id], seq, entry, now)
            elif entry.logits_last:
                active = self.active[seq.request_id]
                token = self._next_token(active, entry.logits_index)
                self._on_token(active, token, now, entry.logits_index)
        if self.disk is not None and read_prompt:
            # After sampling, so the first token is not held up by the write.
            self.disk.save(
                [seq for seq in read_prompt if seq.request_id in self.active], self.context
            )

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
        code = self.vision.evaluate(self.context, span, seq_id=seq_id, n_past=step.start)
        if code == DecodeStatus.NO_KV_SLOT:
            # Out of cells: drop what idle slots cache (and any part of the image that got
            # in), then try once more.
            self.context.remove(seq_id, step.start)
            self.drop_idle_caches()
            code = self.vision.evaluate(self.context, span, seq_id=seq_id, n_past=step.start)
        if code != 0:
            why = "no room in the KV cache" if code == DecodeStatus.NO_KV_SLOT else f"code {code}"
            log.error("image evaluation failed: %s", why)
            self._finish(active, "error", error=EngineError(f"evaluating an image failed: {why}"))
            return
        self.steps += 1
        self.scheduler.image_decoded(step)

    def _next_token(self, active: ActiveRequest, logits_index: int) -> int:
        """The sampled token, or the next forced one (a reasoning budget that ran out)."""
        while active.forced:
            token = active.forced.popleft()
            if active.sampler.force(token):
                return token
            # A grammar that cannot take the forced text: stop forcing, let the model go on.
            log.warning("request %s: forced token refused", active.prepared.request_id)
            active.forced.clear()
        return active.sampler.sample(self.context, logits_index)

    def _on_token(
        self, active: ActiveRequest, token: int, now: float, logits_index: int, *, send: bool = True
    ) -> bool:
        """Take one generated token; False when it ended the request. Without ``send`` the
        text waits for the caller to send it (a speculative step sends once)."""
        request = active.prepared
        if active.first_token_at is None:
            active.first_token_at = now
        if self.model.is_eog(token) and not request.ignore_eos:
            self._finish(active, "stop")
            return False
        active.generated.append(token)
        active.unsent_ids.append(token)
        if active.spec is not None:
            active.spec.push(token)
        if request.logprobs is not None:
            # The raw row is still that of this step's decode: sampling only reads it.
            computer = self._logprobs or self._make_logprob_computer()
            active.unsent_logprobs.append(
                computer.compute(
                    self.context.logits_view(logits_index),
                    token,
                    request.logprobs,
                    special=request.special,
                )
            )
        piece = self.model.token_to_piece(token, special=request.special)
        active.take_token_text(active.output.feed(piece))
        active.check_budget()
        if active.output.stopped:
            self._finish(active, "stop")
            return False
        if len(active.generated) >= request.max_new_tokens:
            self._finish(active, "length")
            return False
        if send and (active.unsent_text or active.unsent_reasoning) and not self._send(active):
            self._finish(active, "cancelled")
            return False
        active.seq.next_token = token
        return True

    def _send(self, active: ActiveRequest) -> bool:
        text, reasoning = active.take_unsent()
        chunk = StreamChunk(
            request_id=active.prepared.request_id,
            text=text,
            token_ids=tuple(active.unsent_ids),
            logprobs=tuple(active.unsent_logprobs),
            reasoning=reasoning,
        )
        active.unsent_ids = []
        if active.unsent_logprobs:
            active.unsent_logprobs = []
        return active.prepared.channel.put(chunk)

    def _make_logprob_computer(self) -> LogprobComputer:
        self._logprobs = LogprobComputer(self.model)
        return self._logprobs

    # ---- endings --------------------------------------------------------------------------

    def _finish(
        self,
        active: ActiveRequest,
        reason: FinishReason,
        error: LlamaCppIntegrationError | None = None,
    ) -> None:
        request = active.prepared
        now = time.monotonic()
        event: StreamChunk | LlamaCppIntegrationError
        if error is None:
            active.take_final_text(active.output.flush())
            text, reasoning = active.take_unsent()
            event = StreamChunk(
                request_id=request.request_id,
                text=text,
                token_ids=tuple(active.unsent_ids),
                finish_reason=reason,
                usage=active.usage(),
                timings=active.timings(now),
                logprobs=tuple(active.unsent_logprobs),
                reasoning=reasoning,
            )
        else:
            error.request_id = request.request_id
            if hasattr(error, "partial_text"):
                error.partial_text = active.output.text
            event = error
        keep = reason in ("stop", "length")
        self.scheduler.release(active.seq, keep_cache=keep)
        if not keep:
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

    def _fail_plan(self, plan: StepPlan, error: EngineError) -> None:
        log.error("decode failed: %s", error)
        for seq, _ in plan.entries:
            active = self.active.get(seq.request_id)
            if active is not None:
                self._finish(active, "error", error=EngineError(str(error)))

    # ---- embeddings -----------------------------------------------------------------------

    def _make_embedder(self) -> EmbeddingContext:
        return EmbeddingContext(
            self.model,
            pooling=self._embedding_pooling,
            n_ctx=self.config.embedding_n_ctx,
            n_seq_max=self.config.embedding_n_seq_max,
            n_threads=self.config.threads,
            tuning=self.config,
        )

    # ---- shutdown -------------------------------------------------------------------------

    def shutdown(self, reason: str = "the engine was closed") -> None:
        """Fail everything still running or waiting with ``EngineClosedError(reason)``; free
        the contexts (the weights and projector belong to the host)."""
        self.closing = True
        self.inbox.close(reason)  # first: nothing new gets in while the running ones end
        while self._taken:
            request = self._taken.popleft()
            self._refuse(request, EngineClosedError(reason, request_id=request.request_id))
        for active in list(self.active.values()):
            self._finish(active, "error", error=EngineClosedError(reason))
        self.embeds.close(lambda: EngineClosedError(reason))
        if self._context is not None:
            self._context.close()
        if self.speculation is not None:
            self.speculation.close()
