"""Generation on the real model: determinism, streaming, stops, grammars, concurrency, reuse."""

from __future__ import annotations

import asyncio
import itertools
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from pathlib import Path

import pytest

from llamacpp_integrations.engine import (
    ChatMessage,
    ChatRequest,
    Completion,
    CompletionRequest,
    Engine,
    EngineConfig,
    SamplingParams,
)
from llamacpp_integrations.engine.batch import HEADER_SPAN

from .helpers import GREEDY, QUESTIONS, chat


def test_greedy_decoding_is_deterministic_alone(engine: Engine) -> None:
    first = engine.generate(chat("Tell me about the moon.", max_tokens=48))
    second = engine.generate(chat("Tell me about the moon.", max_tokens=48))
    assert first.token_ids == second.token_ids
    assert first.text == second.text
    assert first.usage.completion_tokens == len(first.token_ids) > 0


def test_stream_concatenates_to_the_generated_answer(engine: Engine) -> None:
    request = chat("Name a famous painter.", max_tokens=40)
    whole = engine.generate(request)
    chunks = list(engine.stream(chat("Name a famous painter.", max_tokens=40)))
    assert "".join(c.text for c in chunks) == whole.text
    assert [c.finish_reason for c in chunks[:-1]] == [None] * (len(chunks) - 1)
    final = chunks[-1]
    assert final.finish_reason == whole.finish_reason
    assert (
        final.usage is not None and final.usage.completion_tokens == whole.usage.completion_tokens
    )
    assert tuple(t for c in chunks for t in c.token_ids) == whole.token_ids


def test_length_limit_and_usage(engine: Engine) -> None:
    result = engine.generate(
        chat("Write a long story about a dragon.", max_tokens=7, ignore_eos=True)
    )
    assert result.finish_reason == "length"
    assert result.usage.completion_tokens == 7
    rendered = engine.render_chat(chat("Write a long story about a dragon."))
    assert result.usage.prompt_tokens == len(
        engine.tokenize(rendered, add_special=True, parse_special=True)
    )
    assert result.timings.total_s >= result.timings.generation_s >= 0


def test_stop_strings_end_generation_and_are_never_emitted(engine: Engine) -> None:
    free = engine.generate(chat("Count from one to ten, one number per line.", max_tokens=60))
    assert "\n" in free.text, "precondition: the model writes several lines"
    stopped = engine.generate(
        chat("Count from one to ten, one number per line.", max_tokens=60, stop=["\n"])
    )
    assert stopped.finish_reason == "stop"
    assert "\n" not in stopped.text
    assert free.text.startswith(stopped.text)
    # The engine names the stop string that ended the answer, whole and streamed.
    assert (free.stop_string, stopped.stop_string) == (None, "\n")
    request = chat("Count from one to ten, one number per line.", max_tokens=60, stop=["!", "\n"])
    last = list(engine.stream(request))[-1]
    assert (last.finish_reason, last.stop_string) == ("stop", "\n")


def test_grammar_constrains_the_answer(engine: Engine) -> None:
    grammar = 'root ::= ("yes" | "no") "."'
    for question in QUESTIONS[:4]:
        result = engine.generate(chat(question, grammar=grammar, max_tokens=8))
        assert result.text in ("yes.", "no.")


def test_sampling_with_a_seed_is_reproducible(smollm_path: Path) -> None:
    """Same seed, same engine state: same tokens.

    Only a fresh engine guarantees the same state: with a warm unified cache the cells sit in other
    places, attention sums in another order, and a near tie at temperature 0.9 may flip.
    """
    params = SamplingParams(temperature=0.9, top_k=50, top_p=0.9, seed=1234, repeat_penalty=1.1)
    runs = []
    for _ in range(2):
        with Engine(EngineConfig(model=str(smollm_path), n_seq_max=1, n_ctx_per_seq=256)) as fresh:
            runs.append(fresh.generate(chat("Invent a word.", sampling=params, max_tokens=16)))
    assert runs[0].token_ids == runs[1].token_ids
    assert runs[0].usage.completion_tokens > 0


def test_raw_completion_with_token_ids(engine: Engine) -> None:
    prompt = engine.tokenize("The alphabet starts with A, B,", add_special=True)
    result = engine.generate(
        CompletionRequest(prompt=prompt, max_tokens=5, sampling=SamplingParams(temperature=0))
    )
    assert result.usage.prompt_tokens == len(prompt)
    assert result.text


def _well_formed(result: Completion) -> None:
    assert result.finish_reason in ("stop", "length")
    assert 0 < result.usage.completion_tokens <= 32
    assert result.usage.completion_tokens == len(result.token_ids)
    assert isinstance(result.text, str)


def test_sixteen_concurrent_requests_from_threads(engine: Engine) -> None:
    requests = [chat(q, max_tokens=32) for q in QUESTIONS]
    with ThreadPoolExecutor(max_workers=16) as pool:
        results = list(pool.map(engine.generate, requests))
    assert len(results) == 16
    for request, result in zip(requests, results, strict=True):
        assert result.request_id == request.request_id
        _well_formed(result)


async def test_sixteen_concurrent_requests_from_asyncio(engine: Engine) -> None:
    requests = [chat(q, max_tokens=32) for q in QUESTIONS]
    results = await asyncio.gather(*(engine.agenerate(r) for r in requests))
    for request, result in zip(requests, results, strict=True):
        assert result.request_id == request.request_id
        _well_formed(result)


async def test_concurrent_streams_do_not_cross_talk(engine: Engine) -> None:
    """Each stream's chunks carry its own id, and greedy solo answers match batched ones' start."""
    solo = {q: engine.generate(chat(q, max_tokens=12)).token_ids for q in QUESTIONS[:8]}

    async def run(question: str) -> tuple[str, tuple[int, ...]]:
        request = chat(question, max_tokens=12)
        tokens: list[int] = []
        async for chunk in engine.astream(request):
            assert chunk.request_id == request.request_id
            tokens.extend(chunk.token_ids)
        return question, tuple(tokens)

    batched = dict(await asyncio.gather(*(run(q) for q in QUESTIONS[:8])))
    # Batched kernels round differently, so a near tie may flip even the first token of one
    # answer (seen: "Cats are" vs "The cat"); crossed wires would flip nearly all of them, since
    # the prompts all differ. test_isolation.py checks the logits themselves.
    agreeing = sum(tokens[:2] == solo[q][:2] for q, tokens in batched.items())
    assert agreeing >= 6, batched


async def test_event_loop_keeps_ticking_while_streaming(engine: Engine) -> None:
    gaps: list[float] = []
    done = asyncio.Event()

    async def heartbeat() -> None:
        last = time.perf_counter()
        while not done.is_set():
            await asyncio.sleep(0.005)
            now = time.perf_counter()
            gaps.append(now - last)
            last = now

    ticker = asyncio.create_task(heartbeat())
    start = time.perf_counter()
    n_chunks = 0
    async for _ in engine.astream(
        chat("Write a poem about rivers.", max_tokens=150, ignore_eos=True)
    ):
        n_chunks += 1
    elapsed = time.perf_counter() - start
    done.set()
    await ticker
    assert n_chunks > 10
    # The reference LlamaIndex class stalls the loop for the whole call (gap == elapsed).
    assert max(gaps) < 0.2 * elapsed, (max(gaps), elapsed)
    assert len(gaps) > 20


def test_second_turn_reuses_the_first_turns_cache(engine: Engine) -> None:
    system = ChatMessage(role="system", content="You are a terse assistant. " * 20)
    turn1 = [system, ChatMessage(role="user", content="Name a fruit.")]
    first = engine.generate(
        ChatRequest(messages=turn1, max_tokens=16, sampling=SamplingParams(temperature=0))
    )
    turn2 = [
        *turn1,
        ChatMessage(role="assistant", content=first.text),
        ChatMessage(role="user", content="And a vegetable?"),
    ]
    second = engine.generate(
        ChatRequest(messages=turn2, max_tokens=16, sampling=SamplingParams(temperature=0))
    )
    # The second prompt keeps the cached cells up to their last chunk edge (a block boundary,
    # or the header after a chat turn's end): the cells after it, and the answer's, were made
    # in other batch shapes than a cold read of the second prompt would use
    # (docs/reproducibility.md). The first prompt ends on such an edge (the assistant's
    # header), so all of it is kept.
    block = engine.config.prefill_block_size
    assert first.usage.prompt_tokens > block
    kept = second.usage.cached_prompt_tokens
    assert kept >= first.usage.prompt_tokens
    prompt = engine.prompt_tokens(ChatRequest(messages=turn2))
    before = [engine.token_piece(t) for t in prompt[max(0, kept - HEADER_SPAN - 1) : kept]]
    assert kept % block == 0 or (before[-1] == b"\n" and b"<|im_end|>" in before)
    assert second.usage.cached_prompt_tokens < second.usage.prompt_tokens


@pytest.mark.parametrize("kv_unified", [False, True], ids=["split", "unified"])
def test_requests_sharing_a_system_prompt_share_its_cells(
    smollm_path: Path, kv_unified: bool
) -> None:
    """A new conversation reuses the system prompt another slot holds (tagged cells when the
    KV cache is unified, a copied stream when it is split), and answers as if from scratch."""
    system = ChatMessage(role="system", content="You answer in French only. " * 15)
    users = ["Hello", "Goodbye", "Thank you", "Good night", "See you"]
    requests = [
        ChatRequest(
            messages=[system, ChatMessage(role="user", content=u)], max_tokens=4, sampling=GREEDY
        )
        for u in users
    ]
    config = EngineConfig(model=str(smollm_path), n_seq_max=4, n_ctx_per_seq=512)
    fresh = []
    for request in requests[1:]:
        with Engine(replace(config, n_seq_max=1)) as alone:
            fresh.append(alone.generate(request).token_ids)
    with Engine(replace(config, kv_unified=kv_unified)) as engine:
        n_system = len(
            engine.tokenize(
                engine.render_chat(ChatRequest(messages=[system], add_generation_prompt=False)),
                add_special=True,
                parse_special=True,
            )
        )
        block = engine.config.prefill_block_size
        engine.generate(requests[0])
        shared = [engine.generate(r) for r in requests[1:]]
        stats = engine.stats()
    assert n_system > block
    for result in shared:  # kept up to the system prompt's last block boundary
        assert result.usage.cached_prompt_tokens >= n_system // block * block
    assert sum(slot.cached_tokens > 0 for slot in stats.slots) == 4  # shared, not overwritten
    # Allow one near tie to round the other way, as in the cross-talk test.
    agreeing = sum(r.token_ids[:2] == f[:2] for r, f in zip(shared, fresh, strict=True))
    assert agreeing >= len(shared) - 1


def test_a_long_prompt_is_chunked_so_running_streams_keep_flowing(smollm_path: Path) -> None:
    config = EngineConfig(model=str(smollm_path), n_seq_max=2, n_ctx_per_seq=2048, n_batch=64)
    with Engine(config) as engine:
        stream = engine.submit(chat("Write a long essay.", max_tokens=1500, ignore_eos=True))
        arrivals: list[float] = []

        def read() -> None:
            for _ in stream:
                arrivals.append(time.perf_counter())

        reader = threading.Thread(target=read)
        reader.start()
        while len(arrivals) < 5:
            time.sleep(0.01)
        started = time.perf_counter()
        long_prompt = "Summarise the history of Rome in detail. " * 80
        result = engine.generate(chat(long_prompt, max_tokens=1))
        finished = time.perf_counter()
        stream.cancel()
        reader.join()
    assert result.usage.prompt_tokens > 640  # more than ten steps of 64 tokens
    during = [t for t in arrivals if started <= t <= finished]
    gaps = [b - a for a, b in itertools.pairwise(during)]
    assert len(during) >= 5, "the stream stalled while the long prompt was read"
    # Unchunked, the stream would wait for the whole prompt in one step.
    assert max(gaps) < 0.5 * result.timings.prompt_eval_s, (max(gaps), result.timings)
