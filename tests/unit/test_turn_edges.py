"""A chat turn's end is a chunk edge: chats over one system prompt keep all of it from the
cache (the second wave) and from the one still reading it (the first), and two prompts sharing
a turn are cut alike up to its end, so what is kept is what reading alone would make."""

from __future__ import annotations

from collections.abc import Sequence

from hypothesis import given
from hypothesis import strategies as st

from llamacpp_integrations.engine.batch import HEADER_SPAN, SHORT_TAIL, PrefillLayout, common_prefix
from llamacpp_integrations.engine.worker.scheduler import Scheduler
from llamacpp_integrations.engine.worker.sequences import SeqState

END = 2  # the turn-end token of these tests
NL = 1  # their line break
# Lead edges every 8 positions (finer than the engine's) show where lead and turn edges meet.
TURNS = PrefillLayout(64, lead_step=8, marks=frozenset({END}))
GRID = PrefillLayout(64, lead_step=8)
HEADERS = PrefillLayout(64, lead_step=8, marks=frozenset({END}), header_ends=frozenset({NL}))
SYSTEM = [*range(10, 110), END]  # a 101-token system turn: its end at position 101


def _chunks(layout: PrefillLayout, prompt: Sequence[int]) -> list[tuple[int, int]]:
    """How a prompt read alone is cut: each chunk's (start, end)."""
    chunks, start = [], 0
    while start < len(prompt):
        end = layout.chunk_end(start, len(prompt), [], 512, prompt)
        assert end is not None
        chunks.append((start, end))
        start = end
    return chunks


def _question(i: int, n: int = 9) -> list[int]:
    return [1000 + 100 * i + k for k in range(n)]


def test_a_chunk_ends_right_after_a_turn_end() -> None:
    prompt = [*SYSTEM, *_question(0)]
    assert _chunks(TURNS, prompt)[-3:] == [(56, 64), (64, 101), (101, 110)]
    assert _chunks(GRID, prompt)[-3:] == [(56, 64), (64, 109), (109, 110)]
    assert TURNS.edge_at_or_below(105, prompt) == 101
    assert TURNS.edge_at_or_below(101, prompt) == 101
    assert TURNS.edge_at_or_below(100, prompt) == 64
    assert TURNS.edge_at_or_below(105) == 64  # without the tokens: the grid's edges only
    # A turn's end in the first block is an edge too, and the lead edges stop there.
    short = [5, 6, 7, END, 8, 9, 10, 11, 12, 13]
    assert _chunks(TURNS, short) == [(0, 4), (4, 10)]
    assert _chunks(GRID, short) == [(0, 8), (8, 10)]


def test_a_short_chat_is_read_in_the_decodes_its_turns_need() -> None:
    # A 20-token preamble, a 15-token question and the assistant's header: lead edges inside
    # the preamble (what another question keeps), then one chunk to each turn's end, and the
    # header with the last token.
    preamble, question = [*range(10, 29), END], [*range(40, 54), END]
    prompt = [*preamble, *question, 7, 8, 9, 6]
    assert _chunks(TURNS, prompt) == [(0, 8), (8, 16), (16, 20), (20, 35), (35, 39)]
    # Another question keeps the preamble, and reads its own in two decodes.
    other = [*preamble, *range(60, 70), END, 7, 8, 9, 6]
    kept = TURNS.kept(21, len(other), {}, exact=38, cached_prompt=39, tokens=other)
    assert kept == 20
    assert [c for c in _chunks(TURNS, other) if c[0] >= kept] == [(20, 31), (31, 35)]
    # The same prompt again keeps up to the question's end and reads the header again: its
    # last token was not read alone.
    assert TURNS.kept(39, 39, {}, exact=38, cached_prompt=39, tokens=prompt) == 35


def test_only_a_long_tail_reads_its_last_token_alone() -> None:
    # A tail longer than SHORT_TAIL after the last edge: the last token alone, and a repeat
    # keeps every cell but its own.
    prompt = [*SYSTEM, *_question(0, SHORT_TAIL + 1)]
    assert _chunks(TURNS, prompt)[-2:] == [(101, 101 + SHORT_TAIL), (101 + SHORT_TAIL, 112)]
    assert TURNS.splits_last(len(prompt), prompt)
    n = len(prompt)
    assert TURNS.kept(n, n, {}, exact=n - 1, cached_prompt=n, tokens=prompt) == n - 1
    # At SHORT_TAIL the tail is read whole; whether to split depends on the tokens before the
    # last one alone, so a repeat decides as the first reading did.
    short = prompt[:-1]
    assert not TURNS.splits_last(len(short), short)
    assert _chunks(TURNS, short)[-1] == (101, 101 + SHORT_TAIL)
    assert TURNS.splits_last(n, [*prompt[:-1], END]) == TURNS.splits_last(n, prompt)


@given(st.lists(st.sampled_from([END, NL, 3, 4, 5]), max_size=150))
def test_the_edges_below_a_position_are_those_reading_the_prompt_makes(
    prompt: list[int],
) -> None:
    # What a cached prompt may keep (edge_at_or_below) and where reading it cuts (next_edge)
    # agree, whatever the turn ends and headers: an edge depends on the tokens before it alone.
    for layout in (TURNS, GRID, HEADERS):
        edges, start = {0}, 0
        while start < len(prompt):
            start = min(layout.next_edge(start, prompt), len(prompt))
            edges.add(start)
        for n in range(len(prompt) + 1):
            below = layout.edge_at_or_below(n, prompt)
            assert below == max(e for e in edges if e <= n) or n == len(prompt)
            assert layout.edge_at_or_below(n, prompt[:n]) == below


def test_prompts_sharing_a_turn_are_cut_alike_up_to_its_end() -> None:
    # Whatever follows the system turn (a short question, a long one), the chunks before its
    # end are the same: where an edge falls depends on the tokens before it only.
    for a, b in ((_question(0), _question(1, 90)), (_question(2, 3), _question(3, 200))):
        first, second = _chunks(TURNS, [*SYSTEM, *a]), _chunks(TURNS, [*SYSTEM, *b])
        inside = [chunk for chunk in first if chunk[1] <= len(SYSTEM)]
        assert inside == [chunk for chunk in second if chunk[1] <= len(SYSTEM)]
        assert inside[-1][1] == len(SYSTEM)


def test_a_new_question_keeps_the_whole_system_turn() -> None:
    kept = TURNS.kept
    prompt = [*SYSTEM, *_question(1)]
    # Cells of another chat over the same system prompt, read in this layout.
    assert kept(103, len(prompt), {}, exact=109, cached_prompt=110, tokens=prompt) == 101
    assert GRID.kept(103, len(prompt), {}, exact=109, cached_prompt=110, tokens=prompt) == 64
    # Only cells read in the layout count: exact short of the turn's end keeps the grid edge.
    assert kept(103, len(prompt), {}, exact=90, cached_prompt=110, tokens=prompt) == 64


def _wave(scheduler: Scheduler, wave: int, n: int) -> tuple[list[SeqState], list[int]]:
    """``n`` chats over the system prompt admitted together and read to their first token,
    then released with their cells kept; returns them and how many tokens each read."""
    seqs = [scheduler.admit(f"{wave}-{i}", [*SYSTEM, *_question(n * wave + i)]) for i in range(n)]
    read = {seq.request_id: 0 for seq in seqs}
    while any(seq.n_past < len(seq.prompt) for seq in seqs):
        plan = scheduler.plan()
        for seq, entry in plan.entries:
            read[seq.request_id] += len(entry.tokens)
        scheduler.decoded(plan)
    for seq in seqs:
        scheduler.release(seq, keep_cache=True)
    return seqs, [read[seq.request_id] for seq in seqs]


def test_the_second_wave_reads_only_its_questions() -> None:
    for layout, kept in ((TURNS, len(SYSTEM)), (GRID, 64)):
        scheduler = Scheduler(n_seq_max=8, n_batch=2048, layout=layout)
        cold, _ = _wave(scheduler, 0, 4)
        # The first reads the system prompt; the others wait for its cells up to the edge.
        assert [seq.n_shared for seq in cold[1:]] == [kept] * 3
        assert scheduler.shared_tokens == 3 * kept
        warm, read = _wave(scheduler, 1, 4)
        assert [seq.n_reused for seq in warm] == [kept] * 4
        n_question = len(_question(0))
        assert read == [len(SYSTEM) - kept + n_question] * 4


# ---- turn edges after the next turn's header (a model whose headers end with a line break) ----

START, USER, ASSISTANT = 7, 8, 9  # <|im_start|>, the roles


def _turn(role: int, content: Sequence[int]) -> list[int]:
    """A ChatML-like turn: its header, its content, its end and the line break after it."""
    return [START, role, NL, *content, END, NL]


CHAT_SYSTEM = _turn(USER - 1, range(20, 35))  # 20 tokens: the header, 15 of text, end, break
USER_HEADER = len(CHAT_SYSTEM) + 3  # the edge after the next turn's header
GENERATION = [START, ASSISTANT, NL]  # the assistant's header that ends every chat prompt


def _chat(question: Sequence[int]) -> list[int]:
    """The system turn, one question, and the assistant's header."""
    return [*CHAT_SYSTEM, *_turn(USER, question), *GENERATION]


def test_a_turn_edge_falls_after_the_next_turns_header() -> None:
    prompt = _chat(range(40, 52))
    user_header = USER_HEADER
    assert prompt[user_header - 1] == NL and prompt[user_header - 3] == START
    # Lead edges up to the system turn's end, a chunk through the user's header, then the
    # question, its end and the assistant's header in one decode: the prompt ends on an edge.
    assert _chunks(HEADERS, prompt) == [(0, 8), (8, 16), (16, user_header), (user_header, 40)]
    assert HEADERS.edge_at_or_below(40, prompt) == 40
    assert HEADERS.edge_at_or_below(39, prompt) == user_header
    assert not HEADERS.splits_last(len(prompt), prompt)
    # The mark's own edge is gone: a turn end and a header are read together.
    assert HEADERS.edge_at_or_below(user_header - 1, prompt) == 16


def test_a_new_question_keeps_the_next_header_and_reads_in_one_decode() -> None:
    first, other = _chat(range(40, 52)), _chat(range(60, 75))
    shared = common_prefix(first, other)
    assert shared == USER_HEADER  # the system turn and the user's header
    kept = HEADERS.kept(shared, len(other), {}, exact=40, cached_prompt=40, tokens=other)
    assert kept == USER_HEADER
    assert [c for c in _chunks(HEADERS, other) if c[0] >= kept] == [(kept, len(other))]


def test_a_chat_prompt_counts_its_last_cell_as_exact() -> None:
    prompt = _chat(range(40, 52))
    n = len(prompt)
    # Read whole to an edge: a longer prompt cuts there too, so every cell is exact...
    assert HEADERS.exact_after(n, n, prompt) == n
    assert HEADERS.exact_after(USER_HEADER, n, prompt) == USER_HEADER
    # ... and the follow-up (the answer, the next question) keeps all of the first prompt.
    answer = [100, 101, 102, END, NL]
    follow_up = [*prompt, *answer, *_turn(USER, range(80, 90)), *GENERATION]
    kept = HEADERS.kept(n + 3, len(follow_up), {}, exact=n, cached_prompt=n, tokens=follow_up)
    assert kept == n
    # The same prompt again reads its question with the header (its last token's logits).
    assert HEADERS.kept(n, n, {}, exact=n, cached_prompt=n, tokens=prompt) == USER_HEADER
    # Without the headers' line breaks the last cell is never exact.
    assert TURNS.exact_after(n, n, prompt) == n - 1
    # A prompt that stops inside a header is not on an edge: its last cell is not exact.
    cut = prompt[:-1]
    assert not HEADERS.splits_last(len(cut), cut)
    assert HEADERS.exact_after(len(cut), len(cut), cut) == len(cut) - 1


def test_whether_a_header_is_read_whole_depends_on_the_tokens_before_the_last() -> None:
    long_question = range(40, 40 + 2 * SHORT_TAIL)
    prompt = _chat(long_question)
    n = len(prompt)
    assert not HEADERS.splits_last(n, prompt)
    assert HEADERS.splits_last(n, [*prompt[:-1], 3]) == HEADERS.splits_last(n, prompt)
    # A long tail with no turn end before it reads its last token alone, as before.
    plain = [*CHAT_SYSTEM, *range(40, 40 + 2 * SHORT_TAIL)]
    assert HEADERS.splits_last(len(plain), plain)


def test_a_model_without_line_breaks_keeps_the_turn_end_edge() -> None:
    prompt = _chat(range(40, 52))
    assert HEADERS.edge_at_or_below(USER_HEADER - 1, prompt) == 16
    assert TURNS.edge_at_or_below(USER_HEADER - 1, prompt) == 19  # right after the turn's end
    # Too far from its mark, a line break is no header's end: no turn edge at all.
    far = [*range(10, 20), END, *range(30, 30 + HEADER_SPAN), NL, 5, 6]
    assert HEADERS.edge_at_or_below(len(far), far) == 8


def test_a_follow_up_keeps_the_whole_prompt_before_it() -> None:
    # Through the scheduler: the first prompt read (its last cell counted exact), released
    # with its answer cached; the next turn keeps the whole first prompt and reads the rest.
    scheduler = Scheduler(n_seq_max=2, n_batch=512, layout=HEADERS)
    prompt = _chat(range(40, 52))
    seq = scheduler.admit("first", prompt)
    while seq.n_past < len(prompt):
        scheduler.decoded(scheduler.plan())
    assert seq.slot.exact == len(prompt)
    scheduler.release(seq, keep_cache=True)
    follow_up = [*prompt, 100, 101, END, NL, *_turn(USER, range(80, 90)), *GENERATION]
    assert scheduler.admit("next", follow_up).n_reused == len(prompt)
