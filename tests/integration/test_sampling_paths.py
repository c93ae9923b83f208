"""The sampler's shortcuts pick what llama.cpp's chain picks.

A greedy request that no penalty, bias or grammar changes takes the argmax of its logits row
without a sampler chain (``engine/native/sampler.py``); with a grammar, the argmax is checked
against it first, then the row's best tokens, and only then the whole vocabulary. A logit bias
of zero changes no logit but makes the request build llama.cpp's chain (bias, then its greedy
sampler), so the two answers of each pair here are the fast path and the chain on the same
prompt, alone on one engine: they must agree token for token.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from llamacpp_integrations.engine import CompletionRequest, Engine, EngineConfig, SamplingParams

from .helpers import GREEDY, QUESTIONS, chat

# A bias of 0.0 on token 0: the chain is built and run, and nothing it sees is changed.
CHAIN_GREEDY = SamplingParams(temperature=0.0, logit_bias={0: 0.0})

DIGITS = 'root ::= "The answer is " [0-9]+ "." [ a-z]*'


@pytest.fixture(scope="module")
def gemma(gemma_path: Path) -> Iterator[Engine]:
    config = EngineConfig(model=str(gemma_path), n_seq_max=2, n_ctx_per_seq=512, kv_unified=False)
    with Engine(config) as engine:
        yield engine


def _tokens(
    engine: Engine, question: str, sampling: SamplingParams, **kwargs: object
) -> tuple[int, ...]:
    return engine.generate(chat(question, sampling=sampling, max_tokens=40, **kwargs)).token_ids


@pytest.mark.parametrize("question", QUESTIONS[:3])
def test_greedy_argmax_is_the_chains_token(engine: Engine, question: str) -> None:
    assert _tokens(engine, question, GREEDY) == _tokens(engine, question, CHAIN_GREEDY)


def test_greedy_argmax_on_gemma(gemma: Engine) -> None:
    """Gemma's 262k vocabulary (this file has no chat template: raw text)."""
    for prompt in ("The capital of France is", "Three colours are"):
        answers = [
            gemma.generate(CompletionRequest(prompt=prompt, sampling=s, max_tokens=40)).token_ids
            for s in (GREEDY, CHAIN_GREEDY)
        ]
        assert answers[0] == answers[1]


def test_greedy_grammar_checks_the_argmax_first(engine: Engine) -> None:
    question = "What is 12 times 3? Answer in words."
    fast = _tokens(engine, question, GREEDY, grammar=DIGITS)
    assert fast == _tokens(engine, question, CHAIN_GREEDY, grammar=DIGITS)
    assert engine.detokenize(list(fast)).startswith("The answer is ")


JSON = (
    r'root ::= "{" ws "\"legs\":" ws [0-9]+ ws "," ws "\"name\":" ws "\"" [a-z ]+ "\"" ws "}"'
    + "\nws ::= [ \\n]*"
)


@pytest.mark.parametrize("question", ["How many legs has a spider?", QUESTIONS[1]])
def test_greedy_grammar_shortlist_is_the_whole_vocabularys_pick(
    engine: Engine, question: str
) -> None:
    """A JSON answer refuses the model's favourite token at nearly every step: the fast path
    then picks among the row's best tokens, the chain among the whole filtered vocabulary."""
    fast = _tokens(engine, question, GREEDY, grammar=JSON)
    assert fast == _tokens(engine, question, CHAIN_GREEDY, grammar=JSON)
    assert engine.detokenize(list(fast)).startswith("{")


def test_seeded_sampling_repeats(engine: Engine) -> None:
    """Sampled requests still go through llama.cpp's chain: a seed repeats its answer."""
    sampled = SamplingParams(temperature=0.8, top_p=0.95, top_k=40, seed=7)
    question = QUESTIONS[5]
    assert _tokens(engine, question, sampled) == _tokens(engine, question, sampled)
