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
