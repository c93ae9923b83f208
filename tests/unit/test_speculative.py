"""Speculative decoding's pure parts: n-gram drafts, draft length, the acceptance rule, and
the scheduler's handling of drafts."""

from __future__ import annotations

import random
from collections import Counter

import pytest

from llamacpp_integrations.engine.config import EngineConfig
from llamacpp_integrations.engine.speculation.drafts import (
    DraftLength,
    NgramDrafter,
    SeqSpeculation,
    accept_draft,
    residual,
)
from llamacpp_integrations.engine.speculation.step import DraftAsk, SpeculationStep
from llamacpp_integrations.engine.worker.scheduler import Scheduler

# ---- n-gram drafts ------------------------------------------------------------------------


def test_drafts_continue_the_latest_earlier_occurrence_of_the_tail() -> None:
    drafter = NgramDrafter([1, 2, 3, 4, 5, 9, 1, 2, 3, 7, 8, 1, 2], max_n=3, min_n=2)
    # "1 2" occurred twice before the tail; the latest one was followed by 3 7 8.
    assert drafter.draft(3) == [3, 7, 8]
    assert drafter.draft(1) == [3]
    assert drafter.draft(0) == []


def test_longer_ngrams_win_over_shorter_ones() -> None:
    # "5 1 2" is followed by 6; the later, shorter "1 2" by 7.
    drafter = NgramDrafter([5, 1, 2, 6, 0, 1, 2, 7, 5, 1, 2], max_n=3, min_n=2)
    assert drafter.draft(1) == [6]


def test_the_tail_never_matches_itself_and_nothing_matches_without_a_repeat() -> None:
    drafter = NgramDrafter([1, 2, 3, 4], max_n=3, min_n=2)
    assert drafter.draft(4) == []
    drafter.push(1)
    drafter.push(2)
    assert drafter.draft(4) == [3, 4, 1, 2]  # the match runs on into the recent tokens


def test_image_positions_are_never_drafted_and_break_ngrams() -> None:
    drafter = NgramDrafter([1, 2, -5, -5, 1, 2], max_n=2, min_n=2)
    assert drafter.draft(3) == []  # what followed "1 2" was an image
    drafter = NgramDrafter([7, -5, 8, 9, 4, 7, -5], max_n=2, min_n=2)
    assert drafter.draft(2) == []


def test_bad_ngram_sizes_are_refused() -> None:
    with pytest.raises(ValueError):
        NgramDrafter(max_n=1, min_n=2)


# ---- draft length -------------------------------------------------------------------------


def test_draft_length_grows_on_full_acceptance_and_shrinks_on_rejection() -> None:
    length = DraftLength(8)
    k = length.next()
    length.update(k, k)
    assert length.next() == min(8, k + 2)
    length.update(6, 1)
    assert length.next() == 2


def test_draft_length_pauses_a_sequence_whose_drafts_keep_failing() -> None:
    length = DraftLength(8)
    skipped = 0
    for _ in range(40):
        k = length.next()
        if k == 0:
            skipped += 1
        else:
            length.update(k, 0)
    assert skipped > 20  # most steps draft nothing
    assert DraftLength(0).next() == 0


def test_seq_speculation_respects_the_limit_and_counts() -> None:
    spec = SeqSpeculation([1, 2, 3, 4, 5, 6, 1, 2], max_draft=8, ngram_size=3)
    assert spec.draft(2) == [3, 4]
    assert spec.draft(0) == []
    spec.verified(2, 1)
    assert (spec.stats.drafted, spec.stats.accepted, spec.stats.steps) == (2, 1, 1)
    assert spec.stats.acceptance == 0.5


# ---- the acceptance rule ------------------------------------------------------------------


def _distribution(counts: Counter[int], n: int, total: int) -> list[float]:
    return [counts[i] / total for i in range(n)]


@pytest.mark.parametrize(
    ("p", "q"),
    [
        ([0.5, 0.3, 0.2], [0.2, 0.3, 0.5]),
        ([0.1, 0.1, 0.8], [0.6, 0.3, 0.1]),
        ([0.25, 0.25, 0.25, 0.25], [1.0, 0.0, 0.0, 0.0]),  # a deterministic (n-gram) draft
        ([0.7, 0.3], [0.7, 0.3]),  # the draft model is the target: never rejected
    ],
)
def test_the_rule_leaves_the_target_distribution_unchanged(p: list[float], q: list[float]) -> None:
    rng = random.Random(1234)
    n = 40_000
    counts: Counter[int] = Counter()
    accepted = 0
    for _ in range(n):
        draft = rng.choices(range(len(q)), weights=q)[0]
        ok, token = accept_draft(p, q, draft, rng)
        accepted += ok
        counts[token] += 1
    observed = _distribution(counts, len(p), n)
    assert observed == pytest.approx(p, abs=0.012)
    # The acceptance rate is sum(min(p, q)).
    assert accepted / n == pytest.approx(
        sum(min(a, b) for a, b in zip(p, q, strict=True)), abs=0.012
    )


def test_a_one_hot_draft_is_accepted_with_the_targets_probability() -> None:
    p = [0.2, 0.5, 0.3]
    q = [0.0, 1.0, 0.0]
    rng = random.Random(7)
    n = 40_000
    accepted = sum(accept_draft(p, q, 1, rng)[0] for _ in range(n))
    assert accepted / n == pytest.approx(0.5, abs=0.012)
    # The residual is the target without the drafted token: what sampling the target and
    # rejecting on a different token gives (the engine's way of verifying n-gram drafts).
    assert residual(p, q) == pytest.approx([0.4, 0.0, 0.6])


def test_sampling_the_target_and_comparing_is_the_rule_for_one_hot_drafts() -> None:
    p = [0.1, 0.6, 0.3]
    draft = 2
    rng = random.Random(99)
    n = 40_000
    rule: Counter[tuple[bool, int]] = Counter()
    compare: Counter[tuple[bool, int]] = Counter()
    q = [1.0 if i == draft else 0.0 for i in range(3)]
    for _ in range(n):
        rule[accept_draft(p, q, draft, rng)] += 1
        token = rng.choices(range(3), weights=p)[0]
        compare[(token == draft, token)] += 1
    for key in set(rule) | set(compare):
        assert rule[key] / n == pytest.approx(compare[key] / n, abs=0.012)


def test_residual_of_identical_distributions_is_the_target() -> None:
    assert residual([0.5, 0.5], [0.5, 0.5]) == [0.5, 0.5]


# ---- drafts in the scheduler --------------------------------------------------------------


def _decoding(scheduler: Scheduler, request_id: str, prompt: list[int]) -> None:
    seq = scheduler.admit(request_id, prompt)
    plan = scheduler.plan()
    scheduler.decoded(plan)
    seq.next_token = 50


def test_drafts_ride_with_the_next_token_and_keep_every_logit() -> None:
    scheduler = Scheduler(n_seq_max=2, n_batch=16)
    _decoding(scheduler, "a", [1, 2, 3])
    seq = scheduler.running[0]
    plan = scheduler.plan({seq.slot.seq_id: [51, 52, 53]})
    (_, entry) = plan.entries[0]
    assert list(entry.tokens) == [50, 51, 52, 53]
    assert entry.logits_all and entry.start_pos == 3
    scheduler.decoded(plan)
    assert seq.slot.cached == [1, 2, 3, 50, 51, 52, 53] and seq.next_token is None
    scheduler.rollback(seq, 5)  # 51 accepted, 52 and 53 rejected
    assert seq.slot.cached == [1, 2, 3, 50, 51] and seq.n_past == 5


def test_drafts_only_take_room_other_sequences_do_not_need() -> None:
    scheduler = Scheduler(n_seq_max=3, n_batch=8)
    _decoding(scheduler, "a", [1, 2])
    _decoding(scheduler, "b", [3, 4])
    a = scheduler.running[0]
    a.next_token = 50
    plan = scheduler.plan({a.slot.seq_id: list(range(60, 70))})  # more than the batch holds
    sizes = {seq.request_id: len(entry.tokens) for seq, entry in plan.entries}
    assert sizes == {"a": 7, "b": 1}  # b's next token kept its place
    assert sum(sizes.values()) == 8


def test_a_sequence_drafted_by_a_model_keeps_only_its_length_and_counters() -> None:
    spec = SeqSpeculation.without_ngrams(max_draft=3)
    assert spec.drafter is None
    spec.push(5)  # nothing to index
    assert spec.draft(8) == []
    assert spec.budget(8) == 3  # starts at min(max_draft, 4)
    assert spec.budget(2) == 2
    spec.verified(3, 0)
    assert spec.budget(8) == 1  # one more than were accepted
    assert (spec.stats.drafted, spec.stats.accepted) == (3, 0)


# ---- the step's data in and out -----------------------------------------------------------


def _step(**settings: object) -> SpeculationStep:
    config = EngineConfig(model="unused.gguf", speculative="ngram", **settings)  # type: ignore[arg-type]
    return SpeculationStep(config)


def _ask(seq_id: int, state: SeqSpeculation, room: int = 8) -> DraftAsk:
    return DraftAsk(seq_id, cached=[], next_token=3, state=state, room=room)


def test_proposals_are_n_gram_drafts_within_each_sequences_room() -> None:
    step = _step()
    repeating = step.start(
        [1, 2, 3, 4, 5, 1, 2, 3], allowed=True, constrained=False, has_images=False
    )
    fresh = step.start([9, 8, 7], allowed=True, constrained=False, has_images=False)
    assert repeating is not None and fresh is not None
    drafts = step.propose([_ask(0, repeating, room=2), _ask(1, fresh)], n_decoding=2)
    assert drafts == {0: [4, 5]}  # no match for the fresh one: left out
    assert step.propose([_ask(0, repeating, room=0)], n_decoding=1) == {}


def test_no_drafts_while_many_sequences_decode() -> None:
    step = _step(speculative_max_batch=2)
    state = step.start([1, 2, 3, 4, 1, 2, 3], allowed=True, constrained=False, has_images=False)
    assert state is not None
    assert step.propose([_ask(0, state)], n_decoding=3) == {}
    assert step.propose([_ask(0, state)], n_decoding=2) != {}


def test_who_does_not_speculate() -> None:
    step = _step()
    assert step.start([1, 2], allowed=False, constrained=False, has_images=False) is None
    assert step.start([1, 2], allowed=True, constrained=True, has_images=False) is None
    assert _step(speculative_grammar=True).start(
        [1, 2], allowed=True, constrained=True, has_images=False
    )


def test_settling_counts_the_drafts_the_sampler_agreed_with() -> None:
    step = _step()
    state = step.start([1, 2, 3], allowed=True, constrained=False, has_images=False)
    assert state is not None
    assert step.settle(state, [4, 5, 6], [4, 5, 9]) == 2  # 9 is the correction
    assert step.settle(state, [4, 5], [4, 5, 7]) == 2  # all accepted, 7 the bonus token
    assert step.settle(state, [4, 5], [8]) == 0
    assert (step.stats.drafted, step.stats.accepted, step.stats.steps) == (7, 4, 3)
    assert (state.stats.drafted, state.stats.accepted) == (7, 4)
