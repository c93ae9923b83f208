"""The prefill layout: prompts read in position-aligned chunks and their last token alone, and a
kept prefix always ending where reading the prompt again would have cut it."""

from __future__ import annotations

from llamacpp_integrations.engine.batch import PrefillLayout
from llamacpp_integrations.engine.worker.scheduler import Scheduler, SeqState

BLOCK = PrefillLayout(64)
LOOSE = PrefillLayout(0)


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


def test_realigning_waits_for_idle_needs_an_empty_slot_and_yields_to_admission() -> None:
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
    full = Scheduler(n_seq_max=1, n_batch=512, layout=BLOCK)
    _answered(full, prompt, list(range(500, 560)))
    assert full.realign() is None  # never evicts a cached conversation to realign
