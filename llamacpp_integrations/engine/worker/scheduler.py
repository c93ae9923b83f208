"""Which tokens of which sequences go into the next decode. Pure bookkeeping: no llama.cpp here.

Each of the ``n_seq_max`` slots is one KV sequence. A slot remembers the tokens its cells hold,
so a new request takes the free slot sharing the longest prefix with its prompt and evaluates
only the rest, as far as the prefill layout lets it keep cells (``batch.PrefillLayout``: a kept
prefix never changes an answer; the choice is ``admission.choose_slot``). One prefix index
(``prefix_index.PrefixIndex``, a trie of token blocks) holds what every slot's cells hold,
running or idle, the prompts still being read, and (put there by the prompt cache) the prompts
saved on disk, so admission finds what a prompt shares with all of them in one walk of its
blocks (``lookup``). When a unified cache runs out of cells, idle cells go least recently used
block first (``evict``), never a block a running request holds or is reading toward.

A step holds one token of every generating sequence first (so streams keep flowing), then
whole prompt chunks of the sequences still reading their prompt, then drafts, up to ``n_batch``
tokens in all. A step is one decode per set of LoRA adapters (``engine/lora.py``), or in
deterministic mode one decode per sequence, so that no sequence's rows share a batch with
another's; cells serve only requests with the adapters they were made with (``lookup``).

Requests admitted while another is still reading a prompt that shares their beginning wait
for its cells instead of reading that prefix themselves (in-flight sharing): a follower names
its ``leader`` and how far it will take from it (``share_until``, a prefix the layout lets it
keep: ``admission.leader_for``), and once the leader's exact cells reach that far, a step
copies them into the follower's sequence (``StepPlan.joins``) and the follower reads only the
rest. A follower whose leader ended before that finds another leader (the first orphan reads,
the others follow it).

While nothing runs, finished answers are read again (``realign``, planned in ``realign.py``),
so that a follow-up turn keeps the answer's cells up to its last block boundary; one block per
step, so new work waits for one block at most.

Images in a prompt are spans of positions holding a negative key (see ``native/vision.py``).
They are evaluated apart from the batched text decode, one image per step, so running streams
keep flowing while an image is read; a text chunk never crosses into an image.
"""

from __future__ import annotations

from collections.abc import Hashable, Mapping, Sequence, Set

from ..batch import BatchEntry, PrefillLayout, common_prefix
from ..config import EngineConfig
from ..lora import LoraKey, by_adapters, lora_key, only_under
from ..prefix_index import PrefixIndex
from .admission import choose_slot, leader_for
from .realign import realign_choice, realign_step
from .sequences import ImageStep, Join, RealignStep, SeqState, SeqStatus, Slot, StepPlan

__all__ = ["INDEX_BLOCK", "Scheduler"]

# Tokens per level of the prefix index, and so the smallest unit eviction drops.
INDEX_BLOCK = 16


class Scheduler:
    """The slots of one engine and the plan of each step.

    Args:
        n_seq_max: Slots (KV sequences).
        n_batch: Most tokens in one step.
        layout: How prompts are cut and what a new prompt keeps of cached cells.
        deterministic: Decode each sequence on its own, never beside another's rows.
        prefix_sharing: Let requests wait for the cells of one still reading their prefix.
        prefill_per_step: Most prompt tokens in a step that also decodes (``None``: no limit
            beyond ``n_batch``).
    """

    def __init__(
        self,
        n_seq_max: int,
        n_batch: int,
        layout: PrefillLayout | None = None,
        *,
        deterministic: bool = False,
        prefix_sharing: bool = True,
        prefill_per_step: int | None = None,
        disk_lora: LoraKey = (),
    ) -> None:
        # Slots under their sequence ids, prompts being read under their request ids.
        self.index: PrefixIndex[Hashable] = PrefixIndex(block=INDEX_BLOCK)
        self.slots = [Slot(seq_id=i, index=self.index) for i in range(n_seq_max)]
        self.n_batch = n_batch
        self.layout = layout or PrefillLayout(0)
        self.deterministic = deterministic
        self.prefix_sharing = prefix_sharing
        self.prefill_per_step = prefill_per_step
        self.disk_lora = disk_lora  # the adapters of the prompt cache's saved states
        self.running: list[SeqState] = []
        self.shared_tokens = 0  # prompt tokens followers took from their leaders' cells
        self.evicted_tokens = 0  # idle cached tokens dropped to make room
        self._clock = 0

    @classmethod
    def of(
        cls,
        config: EngineConfig,
        turn_ends: frozenset[int] = frozenset(),
        header_ends: frozenset[int] = frozenset(),
    ) -> Scheduler:
        """The scheduler of an engine made with ``config``; ``turn_ends``: the model's
        end-of-turn tokens, ``header_ends``: its line breaks (a chunk edge falls after each
        turn's end, or after the next turn's header: see ``batch.py``)."""
        return cls(
            config.n_seq_max,
            config.n_batch,
            PrefillLayout.with_lead_edges(
                config.prefill_block_size,
                exact_keeps=not config.kv_unified,
                marks=turn_ends,
                header_ends=header_ends,
            ),
            deterministic=config.deterministic,
            prefix_sharing=config.prefix_sharing,
            prefill_per_step=config.prefill_step_tokens,
            disk_lora=lora_key((a.path, a.scale) for a in config.lora_adapters),
        )

    @property
    def n_free(self) -> int:
        return sum(not slot.busy for slot in self.slots)

    def lookup(self, prompt: Sequence[int], lora: LoraKey = ()) -> dict[Hashable, int]:
        """How many leading tokens ``prompt`` shares with every key of the index: slots (by
        sequence id), prompts being read (by request id), and whatever else was put there
        (saved prompts); nothing where the cells were made with other adapters than ``lora``."""
        made_with: dict[Hashable, LoraKey] = {slot.seq_id: slot.lora for slot in self.slots}
        made_with.update((seq.request_id, seq.lora) for seq in self.running)
        return only_under(self.index.shared(prompt), lora, made_with, self.disk_lora)

    def admit(
        self,
        request_id: str,
        prompt: Sequence[int],
        image_spans: Mapping[int, int] | None = None,
        shared: Mapping[Hashable, int] | None = None,
        lora: LoraKey = (),
    ) -> SeqState:
        """Bind a request to a free slot, reusing the longest cached prefix of its prompt.

        The prefix may come from any slot, busy ones included: if taking over that slot would
        throw away a longer cached conversation (or it is busy), the prefix is shared into another
        free slot instead (``copy_from``). What is kept follows the prefill layout (at least the
        last prompt token is evaluated, an image is kept whole or not at all). The caller then
        applies the cache changes. ``shared``: ``lookup(prompt)``, when the caller made it
        (nothing in the index changed since); ``lora``: the adapters it is decoded with.
        """
        image_spans = image_spans or {}
        if shared is None:
            shared = self.lookup(prompt, lora)
        choice = choose_slot(self.slots, shared, prompt, image_spans, self.layout)
        target, copy_from, n_reused = choice.target, choice.copy_from, choice.n_reused
        source = target if copy_from is None else copy_from  # whose cells the prefix is
        if copy_from is not None:
            target.hold(source.cached[:n_reused])
            target.exact, target.prompt_len = source.exact, source.prompt_len
        target.cut(n_reused)
        if n_reused:
            self.index.touch(source.seq_id, n_reused)
        target.prompt_len = len(prompt)
        target.lora = lora
        target.busy = True
        self._clock += 1
        target.last_used = self._clock
        seq = SeqState(
            request_id=request_id,
            prompt=prompt,
            slot=target,
            n_reused=n_reused,
            copy_from=copy_from,
            image_spans=image_spans,
            lora=lora,
        )
        if copy_from is not None and copy_from.busy:
            self._shared(seq, n_reused)
        self._follow(seq, shared)
        self.running.append(seq)
        if seq.n_past < len(prompt):
            self.index.add(request_id, prompt)  # for later requests to follow
        return seq

    def _shared(self, seq: SeqState, n: int) -> None:
        """``seq`` now holds ``n`` prompt tokens taken from a running request's cells."""
        self.shared_tokens += n - seq.n_shared
        seq.n_shared = n

    def _follow(self, seq: SeqState, shared: Mapping[Hashable, int] | None = None) -> None:
        """Make ``seq`` wait for the request still reading the longest prefix it may keep
        (``admission.leader_for``), if any; ``shared``: what the index holds in common with its
        prompt, when already looked up."""
        seq.leader, seq.share_until = None, 0
        if not (self.prefix_sharing and self.layout.aligned):
            return
        if shared is None:
            shared = self.lookup(seq.prompt, seq.lora)
        seq.leader, seq.share_until = leader_for(seq, self.running, self.layout, shared)

    def prefix_taken(self, seq: SeqState, n_held: int) -> None:
        """The admitted sequence's cells hold its first ``n_held`` prompt tokens
        (``SequenceCells.take_prefix``): the prefix admission chose, a longer one restored from
        a saved state (read in the prefill layout, cut where the layout lets this prompt keep
        it), or none (its cells could not be cut at ``n_reused``: the prompt is read whole)."""
        if n_held == 0:
            seq.slot.cut(0)
            seq.n_reused = 0
        elif n_held > seq.n_reused:
            seq.slot.hold(seq.prompt[:n_held])
            seq.slot.exact = n_held
            seq.n_reused = n_held
            seq.copy_from = None
        else:
            return
        self._shared(seq, 0)  # what it held from a running request was replaced

    def plan(self, drafts: Mapping[int, Sequence[int]] | None = None) -> StepPlan:
        """The next step: every decoding sequence's next token, then whole prompt chunks,
        then the ``drafts`` (by slot id) that still fit."""
        plan = StepPlan([])
        budget = self.n_batch
        decoding = [
            seq
            for seq in self.running
            if seq.status is SeqStatus.DECODE and seq.next_token is not None
        ]
        budget -= len(decoding)
        # Beside generating streams a step reads a bounded part of the prompts: each token in
        # it lengthens the step, and so the pause before every stream's next token.
        prompt_room = budget
        if decoding and self.prefill_per_step is not None:
            prompt_room = min(budget, self.prefill_per_step)
        for seq in self.running:
            if seq.status is not SeqStatus.PREFILL or seq.paused:
                continue
            if seq.leader is not None and not self._join(seq, plan):
                continue  # its leader's cells are not there yet
            start = seq.n_past
            n_image = seq.image_spans.get(start)
            if n_image is not None:
                if plan.image is None:
                    plan.image = ImageStep(seq, start, n_image)
                continue
            end = self.layout.chunk_end(
                start, len(seq.prompt), list(seq.image_spans), prompt_room, seq.prompt
            )
            if end is None:
                continue
            done = end == len(seq.prompt)
            plan.entries.append(
                (seq, BatchEntry(seq.slot.seq_id, seq.prompt[start:end], start, done))
            )
            budget -= end - start
            prompt_room -= end - start
        for seq in decoding:
            # Drafts only take room no prompt chunk or other sequence's next token needs.
            draft = list((drafts or {}).get(seq.slot.seq_id, ()))[: max(0, budget)]
            budget -= len(draft)
            assert seq.next_token is not None
            entry = BatchEntry(
                seq.slot.seq_id, [seq.next_token, *draft], seq.n_past, True, logits_all=bool(draft)
            )
            plan.entries.append((seq, entry))
        # With one KV stream per sequence llama.cpp cuts a batch into micro-batches of
        # consecutive sequence ids: in id order the decode tokens of a step make one, not many.
        plan.entries.sort(key=lambda pair: pair[1].seq_id)
        indices = list(range(len(plan.entries)))
        groups = by_adapters([seq.lora for seq, _ in plan.entries])  # a decode per adapter set
        plan.groups = [[i] for i in indices] if self.deterministic else groups
        return plan

    def _join(self, seq: SeqState, plan: StepPlan) -> bool:
        """Whether the follower ``seq`` reads this step: joined now (a ``Join`` planned, its
        slot's bookkeeping updated), or orphaned and reading (or following) anew."""
        leader = seq.leader
        assert leader is not None
        source, n = leader.slot, seq.share_until
        if n <= seq.n_past:  # it holds as much already (restored from disk)
            seq.leader = None
            return True
        if source.exact >= n and common_prefix(source.cached[:n], seq.prompt) == n:
            plan.joins.append(Join(source, seq.slot, n))
            seq.slot.hold(seq.prompt[:n])
            seq.slot.exact, seq.slot.unread[:] = n, []
            self._shared(seq, n)
            seq.n_reused, seq.copy_from, seq.leader = n, None, None
            return True
        if leader in self.running and leader.status is SeqStatus.PREFILL:
            return False  # still reading toward it
        self._follow(seq)  # the leader ended without the cells: another, or read alone
        return seq.leader is None

    def decoded(self, plan: StepPlan, group: Sequence[int] | None = None) -> None:
        """The tokens of the plan's ``group`` of entries (all of them by default) are now in
        the cache."""
        picked = range(len(plan.entries)) if group is None else group
        for index in picked:
            seq, entry = plan.entries[index]
            slot = seq.slot
            if seq.status is SeqStatus.PREFILL and entry.start_pos == slot.exact:
                # The last prompt token's cell counts only where a longer prompt would make
                # it alike: the prompt ends on an edge, its last chunk read whole.
                end = entry.start_pos + len(entry.tokens)
                slot.exact = self.layout.exact_after(end, len(seq.prompt), seq.prompt)
            slot.extend(entry.tokens)
            if seq.status is SeqStatus.PREFILL and seq.n_past == len(seq.prompt):
                seq.status = SeqStatus.DECODE
                self.index.remove(seq.request_id)
            seq.next_token = None

    def rollback(self, seq: SeqState, n_keep: int) -> None:
        """The sequence's cells from position ``n_keep`` on were dropped (rejected drafts)."""
        seq.slot.cut(n_keep)

    def image_decoded(self, step: ImageStep) -> None:
        """The image's embeddings are now in the cache (made the same way however the prompt
        around them is read, so they extend the exact cells they follow)."""
        slot = step.seq.slot
        if slot.exact == step.start:
            slot.exact = step.start + step.n_pos
        slot.extend(step.seq.prompt[step.start : step.start + step.n_pos])

    def realign(self) -> RealignStep | None:
        """While nothing runs: the next block to read again of a finished answer
        (``realign.py``), or ``None`` when there is none. The caller decodes it and calls
        ``realigned``, or ``abandon`` when that failed."""
        choice = None if self.running else realign_choice(self.slots, self.layout, self.index)
        if choice is None:
            return None
        if choice.source is not None:  # a new one: its slot counts as used now
            self._clock += 1
            choice.target.last_used = self._clock
        return realign_step(choice, self.layout)

    def realign_wanted(self) -> bool:
        """Whether ``realign`` has a block to read now."""
        return not self.running and realign_choice(self.slots, self.layout, self.index) is not None

    def realigned(self, step: RealignStep) -> None:
        """The block's cells are in the cache, made as a longer prompt's chunk would make them."""
        slot, tokens = step.slot, step.entry.tokens
        slot.extend(tokens)
        del slot.unread[: len(tokens)]
        slot.exact = len(slot.cached)

    def abandon(self, slot: Slot) -> None:
        """The slot's cells were dropped (reading a block again failed)."""
        slot.cut(0)

    def lost(self, seq_ids: Set[int]) -> None:
        """The cells of ``seq_ids`` are gone: the idle slots among them forget what they held
        (a running request there ends, and its release forgets it)."""
        for slot in self.slots:
            if slot.seq_id in seq_ids and not slot.busy:
                slot.cut(0)

    def drop_idle(self) -> list[int]:
        """Forget what every idle slot holds; the slots that held something (the caller drops
        their cells)."""
        dropped = [slot.seq_id for slot in self.slots if not slot.busy and slot.cached]
        for seq_id in dropped:
            self.slots[seq_id].cut(0)
        return dropped

    def release(self, seq: SeqState, *, keep_cache: bool) -> None:
        """Free the request's slot; its cells stay for prefix reuse unless ``keep_cache`` is off."""
        self.running.remove(seq)
        self.index.remove(seq.request_id)
        seq.slot.busy = False
        if not keep_cache:
            seq.slot.cut(0)
        self._resume()  # its cells may be what a paused request waits for

    def evict(self, n_tokens: int) -> dict[int, int]:
        """Drop about ``n_tokens`` of idle slots' cached tokens, least recently used block
        first, never a block a running request holds or is reading toward (its cells stay
        however many idle slots share them). The slots cut, with the position each was cut
        at; the caller drops their cells from there on."""
        pinned: set[Hashable] = {seq.slot.seq_id for seq in self.running}
        pinned.update(seq.request_id for seq in self.running)
        held = {slot.seq_id: len(slot.cached) for slot in self.slots}
        idle = [slot.seq_id for slot in self.slots if not slot.busy]
        cuts: dict[int, int] = {}
        found = self.index.evict(n_tokens, cuttable=idle, holders=held, pinned=pinned)
        for key, n in found.items():
            assert isinstance(key, int)
            self.evicted_tokens += held[key] - n
            self.slots[key].cut(n)
            cuts[key] = n
        return cuts

    def pause(self, seq: SeqState) -> None:
        """``seq``'s cells were dropped to make room: it reads its prompt again from the start
        once a request ends (its followers wait for it meanwhile)."""
        seq.slot.cut(0)
        seq.n_reused, seq.copy_from, seq.leader, seq.share_until = 0, None, None, 0
        self._shared(seq, 0)
        seq.paused = True

    def _resume(self) -> None:
        for seq in self.running:
            seq.paused = False
