"""The prefill layout: prompts read in position-aligned chunks and their last token alone, and a
kept prefix always ending where reading the prompt again would have cut it."""

from __future__ import annotations

from llamacpp_integrations.engine.batch import LEAD_PARTS, PrefillLayout
from llamacpp_integrations.engine.worker.scheduler import Scheduler
from llamacpp_integrations.engine.worker.sequences import SeqState

BLOCK = PrefillLayout(64)
LOOSE = PrefillLayout(0)
LEAD = PrefillLayout(64, lead_step=8)  # finer lead edges than the engine's, to see them work


def test_chunks_end_at_block_edges_images_and_before_the_last_token() -> None:
    assert BLOCK.chunk_end(0, 150, [], room=512) == 64
    assert BLOCK.chunk_end(64, 150, [], room=512) == 128
    assert BLOCK.chunk_end(128, 150, [], room=512) == 149  # the last token waits
    assert BLOCK.chunk_end(149, 150, [], room=512) == 150  # ...and goes alone
    assert BLOCK.chunk_end(10, 150, [40], room=512) == 40  # stops where an image starts
    assert BLOCK.chunk_end(100, 150, [40], room=512) == 128


def test_an_aligned_chunk_is_never_cut_by_the_budget() -> None:
    assert BLOCK.chunk_end(0, 150, [], room=63) is None
    assert BLOCK.chunk_end(0, 150, [], room=64) == 64
    assert LOOSE.chunk_end(0, 150, [], room=63) == 63  # the old way: fill the batch
    assert LOOSE.chunk_end(0, 150, [], room=0) is None


def test_a_kept_prefix_ends_on_a_boundary_both_prompts_share() -> None:
    kept = BLOCK.kept
    # The same prompt again: every cell but the last token's, whatever the block.
    assert kept(150, 150, {}, exact=149, cached_prompt=150) == 149
    # Another prompt sharing 100 tokens: back to the last block edge.
    assert kept(100, 150, {}, exact=149, cached_prompt=150) == 64
    # The same first 149 tokens in a longer prompt: the cached prompt's last chunk ended at
    # 149, the longer prompt's chunk runs to 192: back to 128.
    assert kept(149, 300, {}, exact=149, cached_prompt=150) == 128
    # Only what was read in the layout counts (generated tokens' cells do not).
    assert kept(400, 500, {}, exact=149, cached_prompt=150) == 128
    # Image edges are boundaries too; a block edge inside an image is not.
    assert kept(120, 150, {30: 50}, exact=149, cached_prompt=150) == 80
    assert kept(70, 150, {30: 50}, exact=149, cached_prompt=150) == 30
    # Without alignment every shared token but the last is kept, images whole.
    assert LOOSE.kept(100, 150, {}, exact=0, cached_prompt=0) == 100
    assert LOOSE.kept(70, 150, {30: 50}, exact=0, cached_prompt=0) == 30


def test_the_engines_first_block_has_an_edge_halfway() -> None:
    assert LEAD_PARTS == 2 and PrefillLayout.with_lead_edges(64).lead_step == 32
    # A block that does not split evenly: no lead edges.
    assert PrefillLayout.with_lead_edges(63).lead_step == 0
    assert PrefillLayout.with_lead_edges(1).lead_step == 0


def test_lead_edges_cut_the_first_block() -> None:
    assert [LEAD.chunk_end(start, 150, [], room=512) for start in (0, 8, 56, 64)] == [
        8,
        16,
        64,
        128,
    ]
    assert LEAD.chunk_end(20, 150, [], room=512) == 24  # after an image: to the next edge
    # A tail of at most SHORT_TAIL tokens after the last edge is read with its last token;
    # after a longer one the last token is read alone.
    assert LEAD.chunk_end(32, 35, [], room=512) == 35
    assert [LEAD.chunk_end(start, 100, [], room=512) for start in (64, 99)] == [99, 100]
    # A preamble of 27 shared tokens keeps 24 of them, 150 shared keep 128.
    assert LEAD.kept(27, 40, {}, exact=39, cached_prompt=40) == 24
    assert LEAD.kept(150, 300, {}, exact=299, cached_prompt=300) == 128
    assert LEAD.realign_span(list(range(1, 71)), exact=34) == (32, 64)


def test_a_new_question_keeps_the_shared_preamble_up_to_a_lead_edge() -> None:
    scheduler = Scheduler(n_seq_max=2, n_batch=512, layout=LEAD)
    preamble = list(range(1, 28))
    first = scheduler.admit("a", [*preamble, 100, 101, 102, 103, 104, 105, 106, 107])
    assert _read_prompt(scheduler, first) == [
        (0, 8), (8, 16), (16, 24), (24, 32), (32, 35)
    ]  # fmt: skip
    scheduler.release(first, keep_cache=True)
    second = scheduler.admit("b", [*preamble, 200, 201, 202, 203, 204, 205])
    assert second.n_reused == 24
    assert _read_prompt(scheduler, second) == [(24, 32), (32, 33)]


def _read_prompt(scheduler: Scheduler, seq: SeqState) -> list[tuple[int, int]]:
    """Plan and decode until the prompt is read; the (start, end) of each step's chunk."""
    chunks = []
    while seq.next_token is None and seq.n_past < len(seq.prompt):
        plan = scheduler.plan()
        (_, entry) = plan.entries[0]
        chunks.append((entry.start_pos, entry.start_pos + len(entry.tokens)))
        scheduler.decoded(plan)
    return chunks


def test_a_repeat_reads_only_the_last_token_and_a_neighbour_the_aligned_rest() -> None:
    scheduler = Scheduler(n_seq_max=1, n_batch=512, layout=BLOCK)
    prompt = list(range(1, 151))
    first = scheduler.admit("a", prompt)
    assert _read_prompt(scheduler, first) == [(0, 64), (64, 128), (128, 149), (149, 150)]
    assert first.slot.exact == 149
    first.next_token = 7
    scheduler.decoded(scheduler.plan())  # a generated token: not exact
    assert (first.slot.exact, first.n_past) == (149, 151)
    scheduler.release(first, keep_cache=True)

    again = scheduler.admit("b", prompt)
    assert again.n_reused == 149
    assert _read_prompt(scheduler, again) == [(149, 150)]
    scheduler.release(again, keep_cache=True)

    neighbour = scheduler.admit("c", [*prompt[:100], 999, 998])
    assert neighbour.n_reused == 64
    assert _read_prompt(scheduler, neighbour) == [(64, 101), (101, 102)]


def test_deterministic_plans_decode_each_sequence_alone() -> None:
    for deterministic, groups in ((False, [[0, 1, 2]]), (True, [[0], [1], [2]])):
        scheduler = Scheduler(n_seq_max=3, n_batch=512, layout=BLOCK, deterministic=deterministic)
        for name in "abc":
            scheduler.admit(name, [1, 2, 3])
        assert scheduler.plan().groups == groups


def test_rejected_drafts_and_dropped_cells_shrink_what_is_exact() -> None:
    scheduler = Scheduler(n_seq_max=1, n_batch=512, layout=BLOCK)
    seq = scheduler.admit("a", list(range(1, 100)))
    _read_prompt(scheduler, seq)
    assert seq.slot.exact == 98
    scheduler.rollback(seq, 50)
    assert seq.slot.exact == 50
    scheduler.release(seq, keep_cache=False)
    assert (seq.slot.exact, seq.slot.cached) == (0, [])


# -- reading finished answers again while idle ----------------------------------------------------


def test_the_realign_span_runs_from_the_last_chunk_start_to_the_last_block_edge() -> None:
    answered = list(range(1, 161))  # a 100-token prompt and a 60-token answer
    assert BLOCK.realign_span(answered, exact=99) == (64, 128)
    assert BLOCK.realign_span(answered[:127], exact=99) is None  # no block edge beyond exact
    assert BLOCK.realign_span(answered, exact=128) is None  # already exact to the edge
    with_image = [*answered[:70], *[-5] * 10, *answered[80:]]
    assert BLOCK.realign_span(with_image, exact=99) == (80, 128)  # from the image's end
    late_image = [*answered[:100], *[-5] * 10, *answered[110:]]
    assert BLOCK.realign_span(late_image, exact=99) is None  # its embeddings are gone
    assert LOOSE.realign_span(answered, exact=99) is None


def _answered(scheduler: Scheduler, prompt: list[int], answer: list[int]) -> SeqState:
    """A request whose prompt was read and whose answer was generated, then released."""
    seq = scheduler.admit(f"r{len(scheduler.running)}-{prompt[0]}", prompt)
    _read_prompt(scheduler, seq)
    for token in answer:
        seq.next_token = token
        scheduler.decoded(scheduler.plan())
    scheduler.release(seq, keep_cache=True)
    return seq


def test_an_idle_answer_is_read_again_into_an_empty_slot_and_a_follow_up_keeps_it() -> None:
    scheduler = Scheduler(n_seq_max=2, n_batch=512, layout=BLOCK)
    prompt, answer = list(range(1, 101)), list(range(500, 560))
    first = _answered(scheduler, prompt, answer)
    assert first.slot.exact == 99
    step = scheduler.realign()
    assert step is not None and step.copy_from is first.slot and step.slot is not first.slot
    assert (step.entry.start_pos, list(step.entry.tokens)) == (64, [*prompt, *answer][64:128])
    assert not step.entry.logits_last
    scheduler.realigned(step)
    assert (step.slot.exact, step.slot.cached) == (128, [*prompt, *answer][:128])
    assert first.slot.cached == [*prompt, *answer]  # untouched: a repeat still keeps 99
    assert scheduler.realign() is None  # covered now
    follow_up = scheduler.admit("f", [*prompt, *answer, 7, 8, 9])
    assert (follow_up.slot, follow_up.n_reused) == (step.slot, 128)


def test_realigning_waits_for_idle_and_yields_to_admission() -> None:
    scheduler = Scheduler(n_seq_max=2, n_batch=512, layout=BLOCK)
    prompt, answer = list(range(1, 101)), list(range(500, 700))
    _answered(scheduler, prompt, answer)  # 300 positions: 3 blocks from 64 to 256
    running = scheduler.admit("busy", [1, 2, 3])
    assert scheduler.realign() is None and not scheduler.realign_wanted()  # something runs
    scheduler.release(running, keep_cache=False)
    step = scheduler.realign()
    assert step is not None
    scheduler.realigned(step)
    assert len(step.slot.unread) == 128  # two blocks to go, one per step
    # A follow-up takes the slot being realigned as far as it is exact; the rest is its own.
    follow_up = scheduler.admit("f", [*prompt, *answer, 7])
    assert (follow_up.slot, follow_up.n_reused) == (step.slot, 128)
    assert not step.slot.unread


def test_without_a_free_slot_an_answer_is_realigned_in_place() -> None:
    scheduler = Scheduler(n_seq_max=1, n_batch=512, layout=BLOCK)
    prompt, answer = list(range(1, 101)), list(range(500, 560))
    seq = _answered(scheduler, prompt, answer)
    step = scheduler.realign()
    assert step is not None and step.slot is seq.slot and step.copy_from is None and step.drop
    assert (step.entry.start_pos, len(step.entry.tokens)) == (64, 64)
    assert seq.slot.cached == prompt[:64]  # the rest is dropped, then read again
    scheduler.realigned(step)
    assert (seq.slot.exact, seq.slot.cached) == (128, [*prompt, *answer][:128])
    assert scheduler.realign() is None
    repeat = scheduler.admit("again", prompt)  # a repeat now keeps the aligned 64
    assert repeat.n_reused == 64


# -- in-flight sharing ----------------------------------------------------------------------------


def _step(scheduler: Scheduler) -> dict[str, tuple[int, int]]:
    """Plan and decode one step; each reading request's chunk, by request id."""
    plan = scheduler.plan()
    scheduler.decoded(plan)
    return {
        seq.request_id: (entry.start_pos, entry.start_pos + len(entry.tokens))
        for seq, entry in plan.entries
    }


def test_requests_sharing_a_prefix_read_it_once() -> None:
    scheduler = Scheduler(n_seq_max=4, n_batch=512, layout=BLOCK)
    shared = list(range(1, 201))
    leader = scheduler.admit("a", [*shared, 900, 901])
    b = scheduler.admit("b", [*shared, 910])
    c = scheduler.admit("c", list(shared))  # the prefix alone: keeps all but its last token
    assert (b.leader, b.share_until) == (leader, 192)
    assert (c.leader, c.share_until) == (leader, 192)
    assert _step(scheduler) == {"a": (0, 64)}  # the followers wait
    assert _step(scheduler) == {"a": (64, 128)}
    assert _step(scheduler) == {"a": (128, 192)}
    plan = scheduler.plan()  # the leader's cells reach 192: both join and read the rest
    assert [(j.source, j.target, j.n_tokens) for j in plan.joins] == [
        (leader.slot, b.slot, 192),
        (leader.slot, c.slot, 192),
    ]
    chunks = {seq.request_id: (e.start_pos, e.start_pos + len(e.tokens)) for seq, e in plan.entries}
    assert chunks == {"a": (192, 202), "b": (192, 201), "c": (192, 200)}  # short tails
    scheduler.decoded(plan)
    assert (b.n_reused, c.n_reused, scheduler.shared_tokens) == (192, 192, 384)
    assert b.slot.cached == b.prompt and b.slot.exact == 200


def test_an_identical_prompt_takes_all_but_the_last_token() -> None:
    scheduler = Scheduler(n_seq_max=2, n_batch=512, layout=BLOCK)
    prompt = list(range(1, 101))
    leader = scheduler.admit("a", prompt)
    twin = scheduler.admit("b", list(prompt))
    assert twin.share_until == 99
    _step(scheduler), _step(scheduler)  # 0-64, 64-99
    assert _step(scheduler) == {"a": (99, 100), "b": (99, 100)}  # joined; last token alone
    assert twin.n_reused == 99 and leader.slot.exact == 99


def test_followers_take_a_shared_image_whole_and_never_evaluate_it() -> None:
    scheduler = Scheduler(n_seq_max=4, n_batch=512, layout=BLOCK)
    img, other_img = -9, -10
    head = list(range(1, 41))  # then a 100-position image at 40
    leader = scheduler.admit("a", [*head, *[img] * 100, 500, 501], {40: 100})
    b = scheduler.admit("b", [*head, *[img] * 100, 600], {40: 100})
    # Another image in the same place: only the text before it is shared, too little to wait.
    c = scheduler.admit("c", [*head, *[other_img] * 100, 700], {40: 100})
    assert (b.leader, b.share_until) == (leader, 140)  # the image's end, past the last edge
    assert c.leader is None
    images, joins = [], []
    for _ in range(6):
        plan = scheduler.plan()
        scheduler.decoded(plan)
        joins += [(j.source, j.target, j.n_tokens) for j in plan.joins]
        if plan.image is not None:
            images.append(plan.image.seq.request_id)
            scheduler.image_decoded(plan.image)
    assert sorted(images) == ["a", "c"]  # b took a's image cells
    assert joins == [(leader.slot, b.slot, 140)] and b.n_reused == 140
    assert b.slot.cached == b.prompt and scheduler.shared_tokens == 140


def test_a_shared_image_is_worth_waiting_for_under_a_block() -> None:
    scheduler = Scheduler(n_seq_max=2, n_batch=512, layout=BLOCK)
    img = -9
    leader = scheduler.admit("a", [*range(1, 9), *[img] * 16, 30, 31], {8: 16})
    follower = scheduler.admit("b", [*range(1, 9), *[img] * 16, 40], {8: 16})
    assert (follower.leader, follower.share_until) == (leader, 24)


def test_a_short_overlap_is_read_by_each() -> None:
    scheduler = Scheduler(n_seq_max=2, n_batch=512, layout=BLOCK)
    scheduler.admit("a", [*range(1, 50), 7])
    other = scheduler.admit("b", [*range(1, 50), 8])  # 49 shared tokens: not a block
    assert other.leader is None
    assert _step(scheduler) == {"a": (0, 49), "b": (0, 49)}


def test_followers_of_a_cancelled_leader_regroup() -> None:
    scheduler = Scheduler(n_seq_max=3, n_batch=512, layout=BLOCK)
    shared = list(range(1, 201))
    leader = scheduler.admit("a", [*shared, 900])
    b = scheduler.admit("b", [*shared, 910])
    c = scheduler.admit("c", [*shared, 920])
    _step(scheduler)
    scheduler.release(leader, keep_cache=False)  # cancelled mid-prompt: its cells are gone
    assert _step(scheduler) == {"b": (0, 64)}  # the first orphan reads, the other follows it
    # The tail after 192 is short: b reads it with its last token, so c takes 192, not 200.
    assert b.leader is None and c.leader is b and c.share_until == 192
    _step(scheduler), _step(scheduler)  # b: 64-128, 128-192
    assert _step(scheduler) == {"b": (192, 201), "c": (192, 201)}
    assert c.n_reused == 192


SHARED_CELLS = PrefillLayout(64, exact_keeps=False)


def test_a_unified_cache_keeps_every_shared_cell_but_still_reads_in_blocks() -> None:
    """Where cells lie in a unified cache changes an answer's rounding anyway, so a prompt keeps
    every cell it shares (generated ones too), images whole; chunks still end at block edges
    (followers join there), and nothing is read again while idle."""
    assert SHARED_CELLS.kept(100, 150, {}, exact=0, cached_prompt=0) == 100
    assert SHARED_CELLS.kept(400, 500, {}, exact=149, cached_prompt=150) == 400
    assert SHARED_CELLS.kept(70, 150, {30: 50}, exact=149, cached_prompt=150) == 30
    assert SHARED_CELLS.chunk_end(0, 150, [], room=512) == 64
    assert SHARED_CELLS.realign_span(list(range(300)), 100) is None
    scheduler = Scheduler(n_seq_max=2, n_batch=512, layout=SHARED_CELLS)
    shared = list(range(1, 101))
    leader = scheduler.admit("a", [*shared, 900])
    follower = scheduler.admit("b", [*shared, 910])
    assert (follower.leader, follower.share_until) == (leader, 100)  # to the token
    assert _step(scheduler) == {"a": (0, 64)}
    assert _step(scheduler) == {"a": (64, 100)}
    assert _step(scheduler) == {"a": (100, 101), "b": (100, 101)}
    assert follower.n_reused == 100
    scheduler.release(leader, keep_cache=True)
    scheduler.release(follower, keep_cache=True)
    assert scheduler.realign() is None
