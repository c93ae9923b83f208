"""The scheduler's bookkeeping, without a model."""

from __future__ import annotations

from llamacpp_integrations.engine.worker.room import give_way
from llamacpp_integrations.engine.worker.scheduler import Scheduler
from llamacpp_integrations.engine.worker.sequences import SeqState, SeqStatus


def _finish(scheduler: Scheduler, seq_index: int = 0) -> None:
    seq = scheduler.running[seq_index]
    scheduler.release(seq, keep_cache=True)


def test_decode_tokens_go_first_then_prompt_chunks_within_the_budget() -> None:
    scheduler = Scheduler(n_seq_max=3, n_batch=8)
    a = scheduler.admit("a", list(range(100, 104)))
    plan = scheduler.plan()
    assert [len(e.tokens) for _, e in plan.entries] == [4]
    assert plan.entries[0][1].logits_last
    scheduler.decoded(plan)
    assert a.status is SeqStatus.DECODE
    a.next_token = 7
    b = scheduler.admit("b", list(range(200, 220)))
    plan = scheduler.plan()
    assert [(s.request_id, len(e.tokens)) for s, e in plan.entries] == [("a", 1), ("b", 7)]
    assert plan.entries[0][1].start_pos == 4
    assert not plan.entries[1][1].logits_last  # the prompt is not finished yet
    scheduler.decoded(plan)
    assert b.n_past == 7 and b.status is SeqStatus.PREFILL
    assert a.slot.cached == [100, 101, 102, 103, 7]


def test_longest_cached_prefix_wins_and_the_last_prompt_token_is_always_evaluated() -> None:
    scheduler = Scheduler(n_seq_max=2, n_batch=64)
    scheduler.admit("a", [1, 2, 3, 4, 5])
    scheduler.decoded(scheduler.plan())
    _finish(scheduler)
    again = scheduler.admit("b", [1, 2, 3, 4, 5])
    assert again.n_reused == 4 and again.copy_from is None
    plan = scheduler.plan()
    assert [list(e.tokens) for _, e in plan.entries] == [[5]]


def test_a_longer_cached_conversation_is_shared_not_overwritten() -> None:
    scheduler = Scheduler(n_seq_max=2, n_batch=64)
    first = scheduler.admit("a", [9, 9, 9, 1, 2, 3])
    scheduler.decoded(scheduler.plan())
    _finish(scheduler)
    other = scheduler.admit("b", [9, 9, 9, 7, 7])
    assert other.slot is not first.slot
    assert other.copy_from is first.slot and other.n_reused == 3
    assert first.slot.cached == [9, 9, 9, 1, 2, 3]
    assert other.slot.cached == [9, 9, 9]


def test_a_busy_slot_can_lend_its_prefix() -> None:
    scheduler = Scheduler(n_seq_max=2, n_batch=64)
    busy = scheduler.admit("a", [5, 5, 5, 5, 1])
    scheduler.decoded(scheduler.plan())
    other = scheduler.admit("b", [5, 5, 5, 5, 2])
    assert other.copy_from is busy.slot and other.n_reused == 4


def test_released_without_cache_forgets_its_tokens() -> None:
    scheduler = Scheduler(n_seq_max=1, n_batch=64)
    seq = scheduler.admit("a", [1, 2, 3])
    scheduler.decoded(scheduler.plan())
    scheduler.release(seq, keep_cache=False)
    assert scheduler.n_free == 1 and seq.slot.cached == []
    fresh = scheduler.admit("b", [1, 2, 3])
    assert fresh.n_reused == 0


def test_images_are_planned_apart_one_per_step_and_text_chunks_stop_at_them() -> None:
    scheduler = Scheduler(n_seq_max=3, n_batch=64)
    img = -7
    prompt = [1, 2, img, img, img, 3, 4]
    a = scheduler.admit("a", prompt, {2: 3})
    b = scheduler.admit("b", [5, img, img, img, 6], {1: 3})
    plan = scheduler.plan()
    assert [list(e.tokens) for _, e in plan.entries] == [[1, 2], [5]]
    assert plan.image is None
    scheduler.decoded(plan)
    plan = scheduler.plan()
    assert plan.entries == [] and plan.image is not None
    assert (plan.image.seq, plan.image.start, plan.image.n_pos) == (a, 2, 3)
    scheduler.image_decoded(plan.image)
    assert a.slot.cached == [1, 2, img, img, img]
    plan = scheduler.plan()  # a's text after its image, beside b's image
    assert [(s.request_id, list(e.tokens)) for s, e in plan.entries] == [("a", [3, 4])]
    assert plan.image is not None and plan.image.seq is b


def test_an_image_is_reused_whole_or_not_at_all() -> None:
    scheduler = Scheduler(n_seq_max=2, n_batch=64)
    img = -9
    first = scheduler.admit("a", [1, img, img, 2, 3], {1: 2})
    first.slot.hold([1, img, img, 2, 3])
    _finish(scheduler)
    # A prompt that ends inside the same image (only reuse up to its last token is allowed)
    # starts again from the image's first position.
    ends_in_image = scheduler.admit("b", [1, img, img], {1: 2})
    assert ends_in_image.n_reused == 1
    _finish(scheduler)
    same_image = scheduler.admit("c", [1, img, img, 4], {1: 2})
    assert same_image.n_reused == 3


def test_without_room_the_newest_prompt_waits_and_reads_again_when_a_request_ends() -> None:
    scheduler = Scheduler(n_seq_max=3, n_batch=64)
    old = scheduler.admit("a", list(range(100, 110)))
    scheduler.decoded(scheduler.plan())
    old.next_token = 5
    mid = scheduler.admit("b", list(range(200, 300)))
    new = scheduler.admit("c", list(range(300, 400)))
    plan = scheduler.plan()
    scheduler.decoded(plan)
    old.next_token = 6
    # No room for the next step: the newest prompt being read gives way (it may wait, since
    # others hold cells), then the next newest; an answer is never paused.
    seqs = [seq for seq, _ in scheduler.plan().entries]
    victim, waits = _gives_way(scheduler, seqs)
    assert (victim, waits) == (new, True)
    scheduler.pause(new)
    assert new.n_past == 0 and new.paused
    assert all(seq is not new for seq, _ in scheduler.plan().entries)
    victim, waits = _gives_way(scheduler, [old, mid])
    assert (victim, waits) == (mid, True)
    scheduler.pause(mid)
    victim, waits = _gives_way(scheduler, [old])
    assert (victim, waits) == (old, False)  # only an answer left: it ends
    scheduler.release(old, keep_cache=True)
    assert not new.paused and not mid.paused
    (seq, entry), *_ = scheduler.plan().entries  # they read again, from the start
    assert (seq, entry.start_pos) == (mid, 0)


def _gives_way(scheduler: Scheduler, seqs: list[SeqState]) -> tuple[SeqState, bool]:
    """Who gives way for a decode of ``seqs`` with no room left, and whether it waits."""
    seq, decision = give_way(scheduler.running, seqs, n_cells=64)
    return seq, bool(decision.pauses)


def test_a_lone_prompt_that_finds_no_room_cannot_wait() -> None:
    scheduler = Scheduler(n_seq_max=2, n_batch=64)
    only = scheduler.admit("a", list(range(100, 200)))
    assert _gives_way(scheduler, [only]) == (only, False)


def test_beside_generating_streams_a_step_reads_a_bounded_part_of_the_prompts() -> None:
    scheduler = Scheduler(n_seq_max=2, n_batch=512, prefill_per_step=128)
    alone = scheduler.admit("a", list(range(1000, 1400)))
    plan = scheduler.plan()
    assert [len(e.tokens) for _, e in plan.entries] == [400]  # nothing decodes: n_batch
    scheduler.decoded(plan)
    alone.next_token = 1
    scheduler.admit("b", list(range(2000, 2400)))
    plan = scheduler.plan()
    assert [(s.request_id, len(e.tokens)) for s, e in plan.entries] == [("a", 1), ("b", 128)]


def _served(scheduler: Scheduler, request_id: str, prompt: list[int]) -> None:
    """Admit a request, read its prompt, and end it with its cells kept."""
    seq = scheduler.admit(request_id, prompt)
    while seq.status is SeqStatus.PREFILL:
        scheduler.decoded(scheduler.plan())
    scheduler.release(seq, keep_cache=True)


def test_eviction_drops_the_oldest_idle_blocks_and_keeps_a_prefix_just_reused() -> None:
    scheduler = Scheduler(n_seq_max=3, n_batch=512)
    system = list(range(1000, 1064))
    _served(scheduler, "old", list(range(2000, 2064)))
    _served(scheduler, "hot", [*system, 1, 2, 3])
    running = scheduler.admit("new", [*system, 7, 8, 9])  # keeps the system prompt's cells
    assert running.n_reused == 64
    old = next(slot for slot in scheduler.slots if slot.cached[:1] == [2000])
    cuts = scheduler.evict(32)
    assert cuts == {old.seq_id: 32} and len(old.cached) == 32
    assert scheduler.evicted_tokens == 32
    # What the running request holds is never dropped, however much is asked.
    scheduler.evict(10_000)
    assert not old.cached
    hot = next(slot for slot in scheduler.slots if slot not in (old, running.slot))
    assert list(hot.cached[:64]) == system
    assert list(running.slot.cached) == system


def test_eviction_keeps_the_blocks_a_prompt_being_read_will_take() -> None:
    scheduler = Scheduler(n_seq_max=2, n_batch=16)
    _served(scheduler, "cached", list(range(300, 364)))
    # A prompt that starts with those cells but is admitted into the other slot is still
    # reading; the idle slot's blocks it shares are pinned.
    reader = scheduler.admit("reader", [*range(300, 348), *range(900, 1000)])
    assert reader.n_reused == 48 and reader.status is SeqStatus.PREFILL
    scheduler.evict(10_000)
    held = [slot for slot in scheduler.slots if not slot.busy]
    assert [list(slot.cached) for slot in held] == [list(range(300, 348))]


def test_what_an_admitted_sequence_holds_after_its_cells_were_set_up() -> None:
    scheduler = Scheduler(n_seq_max=2, n_batch=512)
    _served(scheduler, "first", list(range(100, 180)))
    seq = scheduler.admit("again", [*range(100, 180), 1, 2])
    assert seq.n_reused == 80
    scheduler.prefix_taken(seq, 80)  # kept as chosen: nothing changes
    assert seq.n_reused == 80 and seq.n_past == 80
    scheduler.prefix_taken(seq, 81)  # a longer prefix restored from disk
    assert seq.n_reused == 81 and seq.slot.exact == 81 and seq.n_past == 81
    scheduler.prefix_taken(seq, 0)  # its cells could not be kept: the prompt is read whole
    assert seq.n_reused == 0 and seq.n_past == 0


def test_lost_cells_are_forgotten_by_idle_slots_only_and_idle_slots_can_be_dropped() -> None:
    scheduler = Scheduler(n_seq_max=3, n_batch=512)
    _served(scheduler, "idle", list(range(100, 140)))
    running = scheduler.admit("running", list(range(500, 540)))
    scheduler.decoded(scheduler.plan())
    idle = next(slot for slot in scheduler.slots if slot.cached and not slot.busy)
    scheduler.lost({idle.seq_id, running.slot.seq_id})
    assert not idle.cached  # forgotten
    assert running.n_past == 40  # a running request's end forgets it (the core ends it)
    _served(scheduler, "idle again", list(range(100, 140)))
    dropped = scheduler.drop_idle()
    assert len(dropped) == 1 and not scheduler.slots[dropped[0]].cached
    assert running.n_past == 40 and scheduler.drop_idle() == []
