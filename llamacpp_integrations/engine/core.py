"""One engine's serving state on the worker thread: its contexts, scheduler and requests.

The worker (``host.py``) calls ``take_inbox`` and ``step`` in turn. ``take_inbox`` admits new
work to free slots; ``step`` lets the scheduler plan a step, decodes it in one ``llama_decode``,
samples every sequence that produced logits, and turns tokens into events through each request's
output processor. A step may also read one image of a prompt into its sequence, after the text
decode, and embed one batch of texts. Every way a request ends (stop, length, cancel, timeout,
error, engine closing) goes through ``_finish``, which frees its sequence.

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
from .batch import BatchEntry
from .config import EngineConfig
from .embedder import EmbeddingContext
from .embedding_queue import EmbeddingQueue, TimeShare
from .inbox import Inbox
from .logprobs import LogprobComputer
from .output import OutputProcessor
from .prompt_disk_cache import PromptDiskCache
from .requests import PreparedRequest
from .runner import DecodeStatus, GenerationContext, LoadedModel
from .scheduler import ImageStep, Scheduler, SeqState, SeqStatus, StepPlan
from .speculative import SeqSpeculation, SpecStats
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
    ) -> None:
        self.model = model
        self.vision = vision
        self.config = config
        self.inbox = inbox
        self.board = StatsBoard()
        self._n_ctx_per_seq = n_ctx_per_seq
        self._context: GenerationContext | None = None
        self.scheduler = Scheduler(config.n_seq_max, config.n_batch)
        self.active: dict[str, ActiveRequest] = {}
        self.embeds = EmbeddingQueue()
        self._embedding_pooling = embedding_pooling
        self._embedder: EmbeddingContext | None = None
        self._share = TimeShare()
        self._logprobs: LogprobComputer | None = None  # made when a request first asks
        self.closing = False
        self.steps = 0
        self._taken: deque[PreparedRequest] = deque()  # out of the inbox, not yet admitted

        self.spec_stats = SpecStats()  # drafts verified by every request of this engine
        self.disk: PromptDiskCache | None = None
        if config.prompt_cache_dir is not None:
            self.disk = PromptDiskCache(
                config.prompt_cache_dir,
                self._state_identity(),
                max_bytes=config.prompt_cache_max_bytes,
                min_tokens=config.prompt_cache_min_tokens,
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
            self._share.chat(time.perf_counter() - start)
        if self.embeds and self._share.embedding_may_run(chatting):
            start = time.perf_counter()
            self._embed_step()
            self._share.embedded(time.perf_counter() - start)
        if not (self.scheduler.running and self.embeds):
            self._share.reset()  # credit only counts while both kinds of work wait

    def publish(self) -> None:
        """Put a fresh ``EngineStats`` on the board (cheap: a few calls per slot)."""
        slots = []
        for slot in self.scheduler.slots:
            cells = 0
            if self._context is not None:
                lo, hi = self._context.pos_range(slot.seq_id)
                cells = 0 if hi < 0 else hi - lo + 1
            slots.append(SlotStats(slot.seq_id, slot.busy, len(slot.cached), cells))
        self.board.latest = EngineStats(
            running=len(self.active),
            waiting=0,
            steps=self.steps,
            slots=tuple(slots),
            drafted_tokens=self.spec_stats.drafted,
            accepted_tokens=self.spec_stats.accepted,
        )

    def drop_idle_caches(self) -> None:
        """Free the cells of every slot no request holds."""
        if self._context is None:
            return
        for slot in self.scheduler.slots:
            if not slot.busy and slot.cached:
                self._context.remove(slot.seq_id, 0)
                slot.cached.clear()
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
            self._restore(seq)
        spec = None
        if self.config.speculative == "ngram" and request.speculative:
            spec = SeqSpeculation(
                request.prompt_tokens,
                max_draft=self.config.speculative_max_draft,
                ngram_size=self.config.speculative_ngram_size,
            )
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

    # ---- the prompt cache on disk ---------------------------------------------------------

    def _state_identity(self) -> str:
        """What a saved state depends on: the weights, and the settings that shape the KV
        cells (their types, layout, adapters and RoPE)."""
        model, config = self.model, self.config
        parts = {
            "file": str(model.path.name),
            "size": model.size_bytes,
            "params": model.n_params,
            "desc": model.description,
            "type_k": config.type_k,
            "type_v": config.type_v,
            "flash": config.flash_attention_for(model.n_gpu_layers),
            "lora": [(a.path, a.scale) for a in config.lora_adapters],
            "rope": [config.rope_freq_base, config.rope_freq_scale, config.rope_scaling_type],
        }
        return repr(sorted(parts.items()))

    def _restore(self, seq: SeqState) -> None:
        """Restore a saved prompt sharing a longer prefix than the slots offer, if any."""
        assert self.disk is not None
        prompt = seq.prompt
        if len(prompt) <= self.disk.min_tokens:
            return
        found = self.disk.find(prompt)
        if found is None:
            return
        n = min(found.n_shared, len(prompt) - 1)  # the last token is always evaluated
        if n <= seq.n_reused:
            return
        state = self.disk.load(found)
        if state is None:
            return
        seq_id = seq.slot.seq_id
        if not self.context.set_seq_state(seq_id, state):
            log.warning("prompt cache: llama.cpp refused %s; evaluating instead", found.path.name)
            self.scheduler.forget(seq)
            return
        if not self.context.remove(seq_id, n) or not self._window_kept(seq_id, n):
            self.context.remove(seq_id, 0)
            self.scheduler.forget(seq)
            return
        self.scheduler.restored(seq, n)

    def _save_prompts(self, seqs: list[SeqState]) -> None:
        """Save the state of sequences that just read a long prompt not saved yet."""
        assert self.disk is not None
        for seq in seqs:
            prompt = seq.prompt
            # Only the prompt's cells: the first token is sampled, not decoded yet.
            if seq.request_id not in self.active or seq.n_past != len(prompt):
                continue
            if any(t < 0 for t in prompt) or self.disk.has(prompt):
                continue
            self.disk.save(prompt, self.context.seq_state(seq.slot.seq_id))

    def _window_kept(self, seq_id: int, n_reused: int) -> bool:
        """Sliding-window caches prune old cells: reuse needs the window before the cut."""
        if self.model.n_swa <= 0:
            return True
        pos_min, _ = self.context.pos_range(seq_id)
        return pos_min <= max(0, n_reused - self.model.n_swa)

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
        if self.model.n_swa > 0:
            # Sliding-window caches prune old cells: reuse needs the window before the cut.
            pos_min, _ = self.context.pos_range(seq.slot.seq_id)
            if pos_min > max(0, seq.n_reused - self.model.n_swa):
                return False
        return True

    # ---- one step -------------------------------------------------------------------------

    def _step(self) -> None:
        if self.config.speculative is not None:
            self._draft()
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
                self._verify(self.active[seq.request_id], seq, entry, now)
            elif entry.logits_last:
                active = self.active[seq.request_id]
                token = self._next_token(active, entry.logits_index)
                self._on_token(active, token, now, entry.logits_index)
        if self.disk is not None and read_prompt:
            # After sampling, so the first token is not held up by the write.
            self._save_prompts(read_prompt)

    # ---- speculation ----------------------------------------------------------------------

    def _draft(self) -> None:
        """Give each decoding sequence that speculates its drafts for this step.

        Only while few sequences decode: a batch of many already keeps the CPU busy, and
        verifying drafts there would cost more than the steps it saves.
        """
        decoding = [
            seq
            for seq in self.scheduler.running
            if seq.status is SeqStatus.DECODE and seq.next_token is not None
        ]
        if not decoding or len(decoding) > self.config.speculative_max_batch:
            return
        for seq in decoding:
            active = self.active[seq.request_id]
            if active.spec is None or active.forced:
                continue
            # Drafts never go past the request's token limit or the sequence's context.
            limit = min(
                active.prepared.max_new_tokens - 1 - len(active.generated),
                self._n_ctx_per_seq - 1 - seq.n_past,
            )
            seq.draft = active.spec.draft(limit) if limit > 0 else []

    def _verify(self, active: ActiveRequest, seq: SeqState, entry: BatchEntry, now: float) -> None:
        """Sample a speculating sequence position by position, keeping drafts while they
        equal what its sampler picks (see ``speculative.py``); drop the cells of the rest."""
        draft = entry.tokens[1:]
        # Counted as found, before a token that ends the request publishes the stats: a
        # caller that sees the request gone then sees its drafts too.
        self.spec_stats.add(len(draft), 0)
        accepted = 0
        running = True
        for i in range(len(draft) + 1):
            index = entry.first_index + i
            token = self._next_token(active, index)
            matched = i < len(draft) and token == draft[i]
            if matched:
                self.spec_stats.accepted += 1
            running = self._on_token(active, token, now, index, send=False)
            if not running or not matched:
                break
            accepted += 1
        assert active.spec is not None
        active.spec.verified(len(draft), accepted)
        if not running:
            # Ended: its cells (drafts included) still hold exactly the tokens the slot
            # lists, so they stay valid for prefix reuse.
            return
        n_keep = entry.start_pos + 1 + accepted
        if accepted < len(draft):
            if not self.context.remove(seq.slot.seq_id, n_keep):
                self._finish(
                    active, "error", error=EngineError("could not drop rejected draft cells")
                )
                return
            self.scheduler.rollback(seq, n_keep)
        if (active.unsent_text or active.unsent_reasoning) and not self._send(active):
            self._finish(active, "cancelled")

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
            active.spec.drafter.push(token)
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

    def _embed_step(self) -> None:
        """Embed one batch: texts from the oldest jobs, as many as fit one decode."""
        embedder = self._embedder or self._make_embedder()
        # Packed to one micro-batch of tokens (n_batch), not the whole context: every token
        # attends over all the cells of its decode, so on SmolLM2 512- and 1024-token decodes
        # index a corpus 9-13% faster than 2048-token ones, and a chat that arrives while one
        # runs waits for a quarter of the time. A longer text still goes, alone.
        budget = min(embedder.n_ctx, self.config.n_batch)
        self.embeds.step(embedder.embed, max_tokens=budget, max_texts=embedder.n_seq_max)

    def _make_embedder(self) -> EmbeddingContext:
        self._embedder = EmbeddingContext(
            self.model,
            pooling=self._embedding_pooling,
            n_ctx=self.config.embedding_n_ctx,
            n_seq_max=self.config.embedding_n_seq_max,
            n_threads=self.config.threads,
            tuning=self.config,
        )
        return self._embedder

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
        self.embeds.fail_all(lambda: EngineClosedError(reason))
        if self._embedder is not None:
            self._embedder.close()
        if self._context is not None:
            self._context.close()
