"""Draft-model speculation on the real model: the same greedy tokens as without it, grammar and
stop strings intact, no cross-talk between sequences, nothing leaked, foreign vocabularies
refused.

The target is SmolLM2-135M. Two drafts: a tiny random-weight llama on SmolLM2's tokenizer
(``tests/builders/tiny_draft.py``), whose drafts are nearly always rejected, and SmolLM2 itself,
whose greedy drafts are nearly always accepted; between them both branches of verification and
of the draft context's bookkeeping (rejected cells dropped, accepted ones kept) run. Exactness is
checked as in ``test_speculative.py``: identical tokens up to the first near-tie.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import pytest

from llamacpp_integrations.engine import (
    ChatMessage,
    ChatRequest,
    Completion,
    Engine,
    EngineConfig,
    EngineStats,
    ImageInput,
    SamplingParams,
)
from llamacpp_integrations.engine.worker.host import loaded_draft_weights
from llamacpp_integrations.errors import ModelLoadError
from tests.builders.tiny_draft import build_tiny_draft

from .helpers import GREEDY, QUESTIONS, agree_up_to_a_tie, idle_and_freed, wait_for
from .test_speculative import (
    GRAMMAR_PROMPTS,
    MAX_TOKENS,
    QUOTES,
    RECORD,
    TIE_NATS,
    greedy_request,
)

N_SEQ = 3


@pytest.fixture(scope="module")
def tiny_draft(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_tiny_draft(tmp_path_factory.mktemp("draft") / "tiny-draft.gguf")


def _config(smollm_path: Path, draft: Path | None, n_batch: int = 512) -> EngineConfig:
    return EngineConfig(
        model=str(smollm_path),
        n_seq_max=N_SEQ,
        n_ctx_per_seq=1024,
        n_batch=n_batch,
        speculative=None if draft is None else "draft",
        speculative_draft_model=None if draft is None else str(draft),
        speculative_max_batch=N_SEQ,  # draft for every running sequence, to test them together
        speculative_grammar=True,  # grammar answers are checked speculating too
    )


@pytest.fixture(scope="module")
def engines(smollm_path: Path, tiny_draft: Path) -> Iterator[tuple[Engine, Engine]]:
    with (
        Engine(_config(smollm_path, None)) as plain,
        Engine(_config(smollm_path, tiny_draft)) as spec,
    ):
        yield plain, spec


def _draft_cells_freed(stats: EngineStats) -> bool:
    """Nothing runs, and no slot without cached tokens keeps draft cells."""
    return idle_and_freed(stats) and all(
        slot.draft_kv_cells == 0 for slot in stats.slots if slot.cached_tokens == 0
    )


def test_greedy_tokens_are_the_same_with_and_without_draft_speculation(
    engines: tuple[Engine, Engine],
) -> None:
    plain, spec = engines
    cases = [greedy_request(q) for q in QUOTES[::3]]
    cases += [greedy_request(q, grammar=RECORD) for q in GRAMMAR_PROMPTS[:2]]
    cases += [greedy_request(q, stop=["."]) for q in QUOTES[1:9:3]]
    cases += [greedy_request(q) for q in QUESTIONS[:4]]
    before = spec.stats()
    same = [agree_up_to_a_tie(plain.generate(r), spec.generate(r), TIE_NATS) for r in cases]
    # Every answer agrees up to its first near-tie (checked above). Fewer are identical token
    # for token than with n-grams: the random draft model drafts at nearly every step, so
    # nearly every step decodes several positions in llama.cpp's batched kernels, whose
    # rounding flips near-ties (where n-gram drafts only run where the text repeats).
    assert sum(same) >= 0.5 * len(same), same
    after = spec.stats()
    assert after.drafted_tokens > before.drafted_tokens  # the draft model did draft
    assert plain.stats().drafted_tokens == 0
    assert _draft_cells_freed(wait_for(spec, _draft_cells_freed))


def test_grammar_and_stop_strings_hold(engines: tuple[Engine, Engine]) -> None:
    _, spec = engines
    result = spec.generate(greedy_request(GRAMMAR_PROMPTS[0], grammar=RECORD, max_tokens=96))
    assert result.text.startswith('{"name": "') and result.text.endswith("}"), result.text
    cut = spec.generate(greedy_request(QUOTES[0], stop=["fox"], max_tokens=48))
    assert "fox" not in cut.text


def test_concurrent_requests_do_not_mix(engines: tuple[Engine, Engine]) -> None:
    """Three sequences draft together in each draft decode; each answer is its own."""
    plain, spec = engines
    requests = [greedy_request(q) for q in (QUOTES[0], QUOTES[9], QUESTIONS[2])]
    alone = [plain.generate(r) for r in requests]
    before = spec.stats().drafted_tokens
    handles = [spec.submit(r) for r in requests]
    together = [handle.result() for handle in handles]
    for a, b in zip(alone, together, strict=True):
        agree_up_to_a_tie(a, b, TIE_NATS)
    assert spec.stats().drafted_tokens > before
    assert _draft_cells_freed(wait_for(spec, _draft_cells_freed))


def test_cancel_mid_generation_frees_both_contexts(engines: tuple[Engine, Engine]) -> None:
    plain, spec = engines
    request = greedy_request(QUOTES[14], max_tokens=200)
    handle = spec.submit(request)
    first = next(iter(handle))
    assert first.finish_reason is None
    handle.cancel()
    chunks = list(handle)
    assert chunks[-1].finish_reason == "cancelled"
    assert _draft_cells_freed(wait_for(spec, _draft_cells_freed))
    # The engine keeps serving, with the same answers as without speculation.
    again = greedy_request(QUOTES[14])
    agree_up_to_a_tie(plain.generate(again), spec.generate(again), TIE_NATS)


def test_sampled_requests_run(engines: tuple[Engine, Engine]) -> None:
    _, spec = engines
    sampled = SamplingParams(temperature=0.8, seed=7)
    result = spec.generate(greedy_request(QUOTES[2], sampling=sampled, max_tokens=24))
    assert 0 < result.usage.completion_tokens <= 24
    assert result.finish_reason in ("stop", "length")
    assert result.text == spec.detokenize(result.token_ids)


def _acceptance(engine: Engine, request: ChatRequest) -> tuple[Completion, float]:
    before = engine.stats()
    result = engine.generate(request)
    after = engine.stats()
    drafted = after.drafted_tokens - before.drafted_tokens
    assert drafted > 0
    return result, (after.accepted_tokens - before.accepted_tokens) / drafted


def test_the_target_as_its_own_draft_has_its_drafts_accepted(smollm_path: Path) -> None:
    """Greedy drafts from the target's own weights agree with the target wherever the draft
    context mirrors the slot's tokens exactly, so a high acceptance shows the mirror right: for
    new prompts, for a conversation continued on a reused cached prefix, and for sequences
    drafting together (a stale or foreign cell would make the drafts miss). Batches of 64
    tokens and prefill blocks of 16: the draft context reads each prompt in several decodes,
    and a follow-up keeps most of the conversation's cells."""
    with (
        Engine(replace(_config(smollm_path, None, n_batch=64), prefill_block=16)) as plain,
        Engine(replace(_config(smollm_path, smollm_path, n_batch=64), prefill_block=16)) as spec,
    ):
        assert str(smollm_path) not in loaded_draft_weights()  # the target's own weights
        first = greedy_request(QUOTES[3])
        answer, rate = _acceptance(spec, first)
        assert rate > 0.7
        agree_up_to_a_tie(plain.generate(first), answer, TIE_NATS)
        turns = [
            *first.messages,
            ChatMessage(role="assistant", content=answer.text),
            ChatMessage(role="user", content="Now say it once more."),
        ]
        follow = ChatRequest(messages=turns, sampling=GREEDY, max_tokens=MAX_TOKENS, logprobs=3)
        answer, rate = _acceptance(spec, follow)
        assert answer.usage.cached_prompt_tokens > 0  # the prefix came from the cache
        assert rate > 0.7
        agree_up_to_a_tie(plain.generate(follow), answer, TIE_NATS)
        requests = [greedy_request(t) for t in (QUESTIONS[6], QUOTES[12], QUOTES[5])]
        before = spec.stats()
        handles = [spec.submit(r) for r in requests]
        for request, handle in zip(requests, handles, strict=True):
            agree_up_to_a_tie(plain.generate(request), handle.result(), TIE_NATS)
        after = spec.stats()
        drafted = after.drafted_tokens - before.drafted_tokens
        assert after.accepted_tokens - before.accepted_tokens > 0.7 * drafted > 0
        assert _draft_cells_freed(wait_for(spec, _draft_cells_freed))


def test_engines_drafting_with_one_model_share_one_copy(
    engines: tuple[Engine, Engine], smollm_path: Path, tiny_draft: Path
) -> None:
    _, spec = engines
    other = replace(_config(smollm_path, tiny_draft), n_ctx_per_seq=512)
    with Engine(other) as second:
        second.generate(greedy_request(QUOTES[0]))
        spec.generate(greedy_request(QUOTES[0]))
        assert loaded_draft_weights().count(str(tiny_draft)) == 1
    assert loaded_draft_weights().count(str(tiny_draft)) == 1  # still used by ``spec``


def test_a_draft_model_with_another_vocabulary_is_refused(
    smollm_path: Path, gemma_path: Path, tmp_path: Path
) -> None:
    with pytest.raises(ModelLoadError, match="vocabular"):
        Engine(_config(smollm_path, gemma_path))
    renamed = build_tiny_draft(tmp_path / "renamed.gguf", renamed={1234: "not-the-same"})
    with pytest.raises(ModelLoadError, match="token 1234"):
        Engine(_config(smollm_path, renamed))


def test_requests_with_images_do_not_speculate(
    smollm_path: Path, projector: Path, tiny_draft: Path
) -> None:
    config = replace(_config(smollm_path, tiny_draft), mmproj=str(projector))
    image = ImageInput(16, 16, bytes(range(256)) * 3)
    content = [{"type": "image", "image": image}, {"type": "text", "text": "Describe it."}]
    request = ChatRequest(
        messages=[ChatMessage(role="user", content=content)],  # type: ignore[arg-type]
        sampling=GREEDY,
        max_tokens=16,
    )
    with Engine(config) as engine:
        result = engine.generate(request)
        assert result.usage.prompt_image_tokens > 0 and result.usage.completion_tokens > 0
        assert engine.stats().drafted_tokens == 0  # the draft model never saw the image
        engine.generate(greedy_request(QUOTES[0], max_tokens=16))
        assert engine.stats().drafted_tokens > 0  # text requests of the same engine still do
        assert _draft_cells_freed(wait_for(engine, _draft_cells_freed))
