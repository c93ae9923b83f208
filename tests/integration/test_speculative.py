"""Speculative decoding on the real model: the same greedy tokens as without it, grammar,
stop strings and log-probabilities intact, nothing leaked.

Exactness is tested one sequence at a time, greedy, with the same engine settings but for
``speculative``. Verifying drafts decodes several positions of one sequence in one batch, and
llama.cpp's batched kernels round differently from its one-token kernels (see docs/performance.md):
logits differ in the last digits, so a greedy pick between two near-equal tokens can flip. The
test therefore asks for identical tokens up to the first such near-tie: where the outputs first
differ, the token speculation chose must be among the plain run's three most likely, within
``TIE_NATS`` of its top choice. A wrong logits row, an off-by-one in acceptance or a stale KV
cell would diverge at once, at no tie.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import pytest

from llamacpp_integrations.engine import (
    ChatMessage,
    ChatRequest,
    Engine,
    EngineConfig,
    SamplingParams,
)

from .helpers import GREEDY, QUESTIONS, agree_up_to_a_tie, idle_and_freed, wait_for

TIE_NATS = 0.35

DOC = (
    "The Zephyr-9 field station was founded in 1987 on the northern ridge of Mount Kell. "
    "It houses three laboratories: atmospheric chemistry, glaciology and seismic monitoring. "
    "The director is Dr. Amara Okafor, who joined in 2015. The annual budget is 4.2 million "
    "euros. Staff: 14 scientists, 6 technicians and 3 support workers."
)
LINES = [
    "the quick brown fox jumps over the lazy dog",
    "to be or not to be, that is the question",
    "all that glitters is not gold",
    "a journey of a thousand miles begins with a single step",
    "the early bird catches the worm",
    "knowledge is power and power is knowledge",
    "one two three four five six seven eight nine ten",
    "red, green, blue, red, green, blue, red, green, blue",
]
QUOTES = [
    *(f"Repeat this sentence exactly, twice: {line}." for line in LINES),
    *(f"Quote this text word for word: '{line}', then say it again." for line in LINES),
    f"Here is a document:\n{DOC}\nQuote its first sentence exactly.",
    f"Here is a document:\n{DOC}\nWho is the director? Answer with the sentence that says so.",
    f"Here is a document:\n{DOC}\nCopy the sentence about the staff.",
    f"Here is a document:\n{DOC}\nList the three laboratories, as written.",
    f"Document:\n{DOC}\nReturn JSON with fields name, director and founded, copied from it.",
    f"Document:\n{DOC}\nRepeat the document.",
]
RECORD = (
    'root ::= "{\\"name\\": \\"" [A-Za-z0-9 .-]{1,40} "\\", \\"director\\": \\"" '
    '[A-Za-z .]{1,40} "\\", \\"founded\\": " [0-9]{4} "}"'
)
GRAMMAR_PROMPTS = [
    f"Document:\n{DOC}\nGive the station's record as JSON.",
    f"Document:\n{DOC}\nAs JSON: the station, its director, the year it was founded.",
    f"Text:\n{DOC}\nFill in the record for this station.",
    f"{DOC}\nJSON record, please.",
]
MAX_TOKENS = 40


def _config(smollm_path: Path, speculative: str | None) -> EngineConfig:
    return EngineConfig(
        model=str(smollm_path),
        n_seq_max=2,
        n_ctx_per_seq=1024,
        speculative=speculative,  # type: ignore[arg-type]
        speculative_grammar=True,  # the grammar prompts are checked speculating too
    )


@pytest.fixture(scope="module")
def engines(smollm_path: Path) -> Iterator[tuple[Engine, Engine]]:
    with Engine(_config(smollm_path, None)) as plain, Engine(_config(smollm_path, "ngram")) as spec:
        yield plain, spec


def greedy_request(text: str, **kwargs: object) -> ChatRequest:
    kwargs.setdefault("sampling", GREEDY)
    kwargs.setdefault("max_tokens", MAX_TOKENS)
    return ChatRequest(
        messages=[ChatMessage(role="user", content=text)],
        logprobs=3,
        **kwargs,  # type: ignore[arg-type]
    )


@pytest.fixture(scope="module")
def identical(engines: tuple[Engine, Engine]) -> list[bool]:
    """Over 27 prompts: whether each gave identical tokens (quotes, grammar, free chat)."""
    plain, spec = engines
    cases = [greedy_request(q) for q in QUOTES[::2]]
    cases += [greedy_request(q, grammar=RECORD) for q in GRAMMAR_PROMPTS]
    cases += [greedy_request(q, stop=["."]) for q in QUOTES[1:8:2]]
    cases += [greedy_request(q) for q in QUESTIONS[::2]]
    before = spec.stats()
    out = []
    for request in cases:
        out.append(agree_up_to_a_tie(plain.generate(request), spec.generate(request), TIE_NATS))
    after = spec.stats()
    assert after.drafted_tokens > before.drafted_tokens  # speculation did run
    assert after.accepted_tokens > before.accepted_tokens
    assert plain.stats().drafted_tokens == 0
    return out


def test_greedy_tokens_are_the_same_with_and_without_speculation(identical: list[bool]) -> None:
    assert len(identical) >= 25
    # Near-ties are rare: most answers are identical token for token.
    assert sum(identical) >= 0.8 * len(identical), identical


def test_grammar_requests_stay_in_their_grammar(engines: tuple[Engine, Engine]) -> None:
    _, spec = engines
    for prompt in GRAMMAR_PROMPTS:
        result = spec.generate(greedy_request(prompt, grammar=RECORD, max_tokens=96))
        assert result.text.startswith('{"name": "') and result.text.endswith("}"), result.text
        assert '"founded": ' in result.text


def test_log_probabilities_come_one_per_token(engines: tuple[Engine, Engine]) -> None:
    _, spec = engines
    result = spec.generate(greedy_request(QUOTES[0], max_tokens=48))
    assert result.logprobs is not None
    assert tuple(e.token_id for e in result.logprobs) == result.token_ids
    assert all(e.top[0].token_id == e.token_id for e in result.logprobs)
    assert b"".join(bytes(e.bytes) for e in result.logprobs).decode() == result.text


def test_stop_strings_cut_the_text_as_without_speculation(engines: tuple[Engine, Engine]) -> None:
    plain, spec = engines
    request = greedy_request(QUOTES[0], stop=["fox"], max_tokens=48)
    a, b = plain.generate(request), spec.generate(request)
    assert "fox" not in b.text
    assert b.finish_reason == a.finish_reason
    if a.token_ids == b.token_ids:
        assert a.text == b.text


def test_sampled_requests_and_concurrency_leak_nothing(engines: tuple[Engine, Engine]) -> None:
    _, spec = engines
    sampled = SamplingParams(temperature=0.8, seed=3)
    handles = [spec.submit(greedy_request(q, sampling=sampled, max_tokens=32)) for q in QUOTES[:4]]
    for handle in handles:
        assert 0 < handle.result().usage.completion_tokens <= 32
    assert idle_and_freed(wait_for(spec, idle_and_freed))


def test_a_request_can_opt_out(engines: tuple[Engine, Engine]) -> None:
    _, spec = engines
    before = spec.stats().drafted_tokens
    spec.generate(
        greedy_request(QUOTES[0], sampling=SamplingParams(temperature=0.0, allow_speculation=False))
    )
    after = spec.stats()
    assert after.drafted_tokens == before, (before, after)


def test_grammar_constrained_answers_do_not_speculate_by_default(smollm_path: Path) -> None:
    """Without ``speculative_grammar`` a grammar answer drafts nothing; a free one does."""
    config = replace(_config(smollm_path, "ngram"), speculative_grammar=False)
    with Engine(config) as engine:
        engine.generate(greedy_request(GRAMMAR_PROMPTS[0], grammar=RECORD))
        assert engine.stats().drafted_tokens == 0
        engine.generate(greedy_request(QUOTES[0]))
        assert engine.stats().drafted_tokens > 0
