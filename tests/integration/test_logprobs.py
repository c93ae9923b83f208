"""Per-token log-probabilities on the real model: shape, consistency with the tokens, streaming."""

from __future__ import annotations

import math
from concurrent.futures import ThreadPoolExecutor

import pytest

from llamacpp_integrations.engine import (
    Completion,
    CompletionRequest,
    InferenceEngine,
    SamplingParams,
    TokenLogprob,
)
from llamacpp_integrations.errors import InvalidRequestError

from .helpers import chat, idle_and_freed, wait_for


def _check_entries(entries: tuple[TokenLogprob, ...], n_top: int, *, greedy: bool) -> None:
    for entry in entries:
        assert math.isfinite(entry.logprob) and entry.logprob <= 0
        assert bytes(entry.bytes).decode("utf-8", errors="replace") == entry.token
        assert len(entry.top) == n_top
        values = [alt.logprob for alt in entry.top]
        assert values == sorted(values, reverse=True)
        assert all(v <= 0 for v in values)
        assert math.fsum(math.exp(v) for v in values) <= 1 + 1e-6
        assert len({alt.token_id for alt in entry.top}) == n_top
        if entry.top:
            if greedy:
                assert entry.top[0].token_id == entry.token_id
                assert entry.top[0].logprob == entry.logprob
            else:
                assert entry.logprob <= entry.top[0].logprob
        for alt in entry.top:
            assert bytes(alt.bytes).decode("utf-8", errors="replace") == alt.token
            if alt.token_id == entry.token_id:
                assert alt.logprob == entry.logprob and alt.bytes == entry.bytes


def _text_of(entries: tuple[TokenLogprob, ...]) -> str:
    return b"".join(bytes(e.bytes) for e in entries).decode("utf-8", errors="replace")


def test_greedy_answer_has_one_entry_per_token(any_engine: InferenceEngine) -> None:
    engine = any_engine
    result = engine.generate(chat("What is 2 + 2?", max_tokens=64, logprobs=3))
    # Precondition: the answer ends with an end-of-generation token, which gets no entry.
    assert result.finish_reason == "stop"
    assert result.logprobs is not None
    assert len(result.logprobs) == result.usage.completion_tokens == len(result.token_ids) > 0
    assert tuple(e.token_id for e in result.logprobs) == result.token_ids
    _check_entries(result.logprobs, 3, greedy=True)
    assert _text_of(result.logprobs) == result.text


def test_logprobs_zero_gives_the_sampled_tokens_only(any_engine: InferenceEngine) -> None:
    engine = any_engine
    result = engine.generate(chat("Name three colours.", max_tokens=12, logprobs=0))
    assert result.logprobs is not None
    assert tuple(e.token_id for e in result.logprobs) == result.token_ids
    _check_entries(result.logprobs, 0, greedy=True)


def test_top_twenty_under_random_sampling(any_engine: InferenceEngine) -> None:
    engine = any_engine
    sampling = SamplingParams(temperature=1.5, top_k=0, top_p=1.0, min_p=0.0, seed=7)
    request = chat("Write a poem.", sampling=sampling, max_tokens=24, logprobs=20)
    result = engine.generate(request)
    assert result.logprobs is not None
    assert tuple(e.token_id for e in result.logprobs) == result.token_ids
    _check_entries(result.logprobs, 20, greedy=False)


def test_tokens_forced_by_a_grammar_keep_the_models_probabilities(
    any_engine: InferenceEngine,
) -> None:
    engine = any_engine
    request = chat("Is the sky green?", grammar='root ::= ("yes" | "no") "."', logprobs=5)
    result = engine.generate(request)
    assert result.text in ("yes.", "no.")
    assert result.logprobs is not None
    assert tuple(e.token_id for e in result.logprobs) == result.token_ids
    _check_entries(result.logprobs, 5, greedy=False)


def test_stream_chunks_carry_the_logprobs_of_their_tokens(any_engine: InferenceEngine) -> None:
    engine = any_engine
    request = chat("Describe a tree in one sentence.", max_tokens=40, logprobs=2)
    chunks = list(engine.stream(request))
    for chunk in chunks:
        assert tuple(e.token_id for e in chunk.logprobs) == chunk.token_ids
    streamed = tuple(e for chunk in chunks for e in chunk.logprobs)
    whole = engine.generate(request)
    assert whole.logprobs == streamed
    assert tuple(e.token_id for e in streamed) == whole.token_ids
    final = chunks[-1].usage
    assert final is not None and len(streamed) == final.completion_tokens
    _check_entries(streamed, 2, greedy=True)


def test_a_stop_string_keeps_the_logprobs_of_every_token_up_to_it(
    any_engine: InferenceEngine,
) -> None:
    engine = any_engine
    request = chat(
        "Count from one to ten, one number per line.", max_tokens=60, stop=["\n"], logprobs=1
    )
    result = engine.generate(request)
    assert result.finish_reason == "stop" and "\n" not in result.text
    assert result.logprobs is not None
    assert tuple(e.token_id for e in result.logprobs) == result.token_ids
    assert len(result.logprobs) == result.usage.completion_tokens
    # The last token completed the stop string: its text is cut from the answer, not its entry.
    listed = _text_of(result.logprobs)
    assert listed.startswith(result.text) and "\n" in listed[len(result.text) :]


def test_raw_completion_with_logprobs(any_engine: InferenceEngine) -> None:
    engine = any_engine
    request = CompletionRequest(
        prompt="The capital of France is",
        sampling=SamplingParams(temperature=0.0),
        max_tokens=6,
        ignore_eos=True,
        logprobs=4,
    )
    result = engine.generate(request)
    assert result.logprobs is not None and len(result.logprobs) == 6
    _check_entries(result.logprobs, 4, greedy=True)


def test_not_asking_costs_nothing_and_returns_none(any_engine: InferenceEngine) -> None:
    engine = any_engine
    request = chat("Say hello in Spanish.", max_tokens=16)
    assert all(chunk.logprobs == () for chunk in engine.stream(request))
    assert engine.generate(request).logprobs is None


def test_requests_with_and_without_logprobs_run_together(any_engine: InferenceEngine) -> None:
    engine = any_engine
    asks = [None, 5, 0, None, 3, None]

    def run(index: int) -> Completion:
        question = ["Name a fruit.", "What is a river?", "Say a number."][index % 3]
        return engine.generate(chat(question, max_tokens=24, logprobs=asks[index]))

    with ThreadPoolExecutor(max_workers=len(asks)) as pool:
        results = list(pool.map(run, range(len(asks))))
    for asked, result in zip(asks, results, strict=True):
        assert result.usage.completion_tokens > 0
        if asked is None:
            assert result.logprobs is None
        else:
            assert result.logprobs is not None
            assert tuple(e.token_id for e in result.logprobs) == result.token_ids
            _check_entries(result.logprobs, asked, greedy=True)


async def test_async_generation_returns_logprobs(any_engine: InferenceEngine) -> None:
    engine = any_engine
    result = await engine.agenerate(chat("What is water made of?", max_tokens=10, logprobs=1))
    assert result.logprobs is not None
    assert tuple(e.token_id for e in result.logprobs) == result.token_ids


@pytest.mark.parametrize("value", [-1, 21, 1.5, True, "3"])
def test_bad_values_are_refused_and_the_engine_keeps_serving(
    any_engine: InferenceEngine, value: object
) -> None:
    engine = any_engine
    with pytest.raises(InvalidRequestError, match="logprobs"):
        engine.generate(chat("x", logprobs=value))
    assert engine.generate(chat("Say hi.", max_tokens=4, logprobs=2)).logprobs is not None
    assert idle_and_freed(wait_for(engine, idle_and_freed))
