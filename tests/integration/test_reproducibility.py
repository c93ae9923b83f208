"""The same answer every time.

With a KV stream per sequence (``kv_unified=False``), caching never changes a greedy answer: a
prompt asked again (its prefix kept from the cache), asked after another that shares its
beginning (part of it kept), or asked after the cache was cleared (read in full) gets the same
tokens, because prompts are always read in the same position-aligned chunks
(``PrefillLayout``). In deterministic mode (which takes that layout) a request's greedy tokens
also do not depend on what else runs: alone, twelve at once, or beside sampled traffic. A
unified cache (``kv_unified=True``) trades that for memory: ``test_unified_cache.py``.

These tests compare token for token on purpose: the engine guarantees these equalities on any
CPU (same build, same thread count), whatever the kernels' rounding.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from pathlib import Path

import pytest

from llamacpp_integrations.engine import (
    ChatMessage,
    ChatRequest,
    Engine,
    EngineConfig,
    EngineStats,
    SamplingParams,
)
from llamacpp_integrations.engine.batch import PrefillLayout

from .helpers import GREEDY, QUESTIONS, idle_and_freed, wait_for

SYSTEM = (
    "You are the help desk of the Zephyr-9 field station on the northern ridge of Mount Kell. "
    "The station has three laboratories: atmospheric chemistry, glaciology and seismic "
    "monitoring. Visitors sign in at the front desk, wear a badge at all times, and never enter "
    "a laboratory alone. The canteen opens from seven to nine, twelve to two and six to eight. "
    "Answer in one or two short sentences, politely, and say when you do not know."
)
ASKED = [
    "When does the canteen open?",
    "Can I visit the glaciology lab?",
    "Where do visitors sign in?",
    "Do I need a badge?",
    "What labs are there?",
    "Is there seismic monitoring?",
    "Can I bring my dog?",
    "Who runs the station?",
]
EXTRA = [
    "Count from one to ten.",
    "Write two lines about autumn.",
    "What is the opposite of cold?",
    "Spell the word banana backwards.",
    "What do bees make?",
    "Name a fruit that is yellow.",
    "How many legs does a spider have?",
    "What is the boiling point of water?",
]


def _everyday_chats() -> list[ChatRequest]:
    """Twelve everyday chats: plain questions, and help-desk questions under one long system
    prompt (so later ones keep part of the earlier ones' cells)."""
    plain = [[ChatMessage(role="user", content=q)] for q in [*QUESTIONS[:3], *EXTRA[:3]]]
    desk = [
        [ChatMessage(role="system", content=SYSTEM), ChatMessage(role="user", content=q)]
        for q in ASKED[:6]
    ]
    chats = [*plain, *desk]
    assert len(chats) == 12
    return [ChatRequest(messages=m, max_tokens=32, sampling=GREEDY) for m in chats]


def _fresh(request: ChatRequest) -> ChatRequest:
    """The same request under a new id (ids must not repeat while running)."""
    return ChatRequest(
        messages=request.messages, max_tokens=request.max_tokens, sampling=request.sampling
    )


def test_caching_never_changes_a_greedy_answer(smollm_path: Path) -> None:
    requests = _everyday_chats()
    config = EngineConfig(model=str(smollm_path), n_seq_max=4, n_ctx_per_seq=1024, kv_unified=False)
    with Engine(config) as engine:
        first, again = [], []
        for request in requests:
            first.append(engine.generate(_fresh(request)))
            again.append(engine.generate(_fresh(request)))  # kept from the cache
        cold = []
        for request in requests:
            engine.clear_cache()
            cold.append(engine.generate(_fresh(request)))
    differ = [i for i, (a, b, c) in enumerate(zip(first, again, cold, strict=True))
              if not a.token_ids == b.token_ids == c.token_ids]  # fmt: skip
    assert differ == [], [(first[i].text, again[i].text, cold[i].text) for i in differ]
    layout = PrefillLayout(config.prefill_block_size)  # the block grid: edges every layout has
    for repeat, fresh in zip(again, cold, strict=True):
        assert fresh.usage.cached_prompt_tokens == 0
        # Every cell but the last token's; or, when the idle engine realigned the answer in
        # place before the repeat came, the prompt's cells up to its last edge (a block's, or
        # a turn's end after it).
        n = repeat.usage.prompt_tokens - 1
        assert layout.edge_at_or_below(n) <= repeat.usage.cached_prompt_tokens <= n
    # The help-desk chats after the first kept the long system prompt's aligned blocks.
    assert all(a.usage.cached_prompt_tokens >= 64 for a in first[7:])


def test_a_follow_up_keeps_the_answer_read_again_while_idle(smollm_path: Path) -> None:
    """An answer's cells were made one token at a time, so a follow-up could keep none of
    them; while the engine idles they are read again in the prefill layout (into a free slot),
    and the follow-up keeps them up to the last block edge, answering as if read cold."""
    config = EngineConfig(model=str(smollm_path), n_seq_max=2, n_ctx_per_seq=1024, kv_unified=False)
    question = ChatMessage(role="user", content="Write a long story about a lighthouse keeper.")
    with Engine(config) as engine:
        block = config.prefill_block_size
        first = engine.generate(ChatRequest(messages=[question], max_tokens=150, sampling=GREEDY))
        assert first.finish_reason == "length"  # cut, so every token but the last was read
        held = first.usage.prompt_tokens + first.usage.completion_tokens - 1
        edge = held // block * block
        assert edge > first.usage.prompt_tokens  # the answer crosses a block edge

        def realigned(stats: EngineStats) -> bool:
            return any(slot.cached_tokens == edge and not slot.busy for slot in stats.slots)

        assert realigned(wait_for(engine, realigned))
        turns = [question, ChatMessage(role="assistant", content=first.text)]
        follow_up = ChatRequest(
            messages=[*turns, ChatMessage(role="user", content="Once more, shorter.")],
            max_tokens=24,
            sampling=GREEDY,
        )
        kept = engine.generate(follow_up)
        engine.clear_cache()
        cold = engine.generate(_fresh(follow_up))
    # The answer re-rendered may tokenize a little differently from how it was generated:
    # what is kept is the shared prefix cut back to a block edge, beyond the first prompt.
    assert kept.usage.cached_prompt_tokens % block == 0
    assert kept.usage.cached_prompt_tokens > first.usage.prompt_tokens
    assert cold.usage.cached_prompt_tokens == 0
    assert kept.token_ids == cold.token_ids, (kept.text, cold.text)
    # Switched off, the idle engine leaves the answer's cells as they were.
    with Engine(replace(config, realign_when_idle=False)) as idle:
        idle.generate(ChatRequest(messages=[question], max_tokens=150, sampling=GREEDY))
        time.sleep(1)
        assert [slot.cached_tokens for slot in idle.stats().slots] == [held, 0]


HANDBOOK = " ".join(
    f"Rule {i}: questions about topic {i} go to desk {i % 5}, open from {8 + i % 3} to "
    f"{16 + i % 4}, and are answered within {i + 1} days."
    for i in range(14)
)


def _desk(questions: list[str], handbook: str = HANDBOOK) -> list[ChatRequest]:
    """Chats under one long system prompt, each with its own question."""
    return [
        ChatRequest(
            messages=[
                ChatMessage(role="system", content=handbook),
                ChatMessage(role="user", content=q),
            ],
            max_tokens=16,
            sampling=GREEDY,
        )
        for q in questions
    ]


@pytest.fixture(scope="module")
def deterministic(smollm_path: Path) -> Iterator[Engine]:
    config = EngineConfig(
        model=str(smollm_path), n_seq_max=16, n_ctx_per_seq=1024, deterministic=True
    )
    with Engine(config) as engine:
        yield engine


def test_deterministic_tokens_do_not_depend_on_what_else_runs(deterministic: Engine) -> None:
    engine = deterministic
    requests = _everyday_chats()
    alone = []
    for request in requests:
        engine.clear_cache()
        alone.append(engine.generate(_fresh(request)))
    with ThreadPoolExecutor(16) as pool:
        together = list(pool.map(lambda r: engine.generate(_fresh(r)), requests))

    # Sampled chats of other lengths keep running beside the everyday chats.
    stop = threading.Event()

    def traffic(seed: int) -> None:
        while not stop.is_set():
            sampled = SamplingParams(temperature=0.9, seed=seed)
            engine.generate(
                ChatRequest(
                    messages=[ChatMessage(role="user", content=f"Tell story number {seed}.")],
                    max_tokens=24 + seed,
                    sampling=sampled,
                )
            )

    with ThreadPoolExecutor(4) as noise:
        futures = [noise.submit(traffic, seed) for seed in range(4)]
        try:
            with ThreadPoolExecutor(8) as pool:
                mixed = list(pool.map(lambda r: engine.generate(_fresh(r)), requests))
        finally:
            stop.set()
        for future in futures:
            future.result()
    for i, (a, b, c) in enumerate(zip(alone, together, mixed, strict=True)):
        assert a.token_ids == b.token_ids == c.token_ids, (i, a.text, b.text, c.text)


MORE = [
    "What colour is grass?",
    "Name a musical instrument.",
    "What is the first month of the year?",
    "How many days are in a week?",
    "What do cows drink?",
    "Name a shape with three sides.",
    "What is frozen water called?",
    "Which animal says meow?",
]


def test_requests_in_flight_read_a_shared_prefix_once(deterministic: Engine) -> None:
    """Twenty-four chats over one long system prompt sent at once (sixteen run, the rest wait
    for a slot): one reads the prompt, the others take its cells as they appear (or from the cache
    once the first ones end) and read only their questions; each answer is the one it gets
    alone, read cold (deterministic mode: the comparison is the point)."""
    engine = deterministic
    # Half the handbook (still a few blocks): each answer alone reads it cold every time.
    handbook = HANDBOOK[: len(HANDBOOK) // 2]
    requests = _desk([*ASKED, *EXTRA, *MORE], handbook)
    assert len(requests) == 24
    alone = []
    for request in requests:
        engine.clear_cache()
        alone.append(engine.generate(_fresh(request)))
    engine.clear_cache()
    before = engine.stats().shared_prompt_tokens
    handles = [engine.submit(_fresh(r)) for r in requests]
    together = [handle.result() for handle in handles]
    block = engine.config.prefill_block_size
    system = ChatRequest(messages=requests[0].messages[:1], add_generation_prompt=False)
    n_system = len(engine.tokenize(engine.render_chat(system), parse_special=True))
    taken = [c.usage.cached_prompt_tokens for c in together]
    # All but the one that read it took the system prompt's blocks from another's cells: the
    # first sixteen in flight, the rest in flight or from the cells of ones that ended.
    assert sum(t >= n_system // block * block > 0 for t in taken) >= len(requests) - 1, taken
    shared = engine.stats().shared_prompt_tokens - before
    assert sum(taken[1:16]) <= shared <= sum(taken)
    for i, (a, b) in enumerate(zip(alone, together, strict=True)):
        assert a.token_ids == b.token_ids, (i, a.text, b.text)


def test_followers_finish_when_the_reading_request_is_cancelled(deterministic: Engine) -> None:
    engine = deterministic
    requests = _desk(ASKED[:4])
    alone = []
    for request in requests[1:]:
        engine.clear_cache()
        alone.append(engine.generate(_fresh(request)))
    engine.clear_cache()
    handles = [engine.submit(_fresh(r)) for r in requests]
    handles[0].cancel()  # the one reading the shared prompt, most likely mid-way
    followers = [handle.result() for handle in handles[1:]]
    for a, b in zip(alone, followers, strict=True):
        assert a.token_ids == b.token_ids, (a.text, b.text)
    assert idle_and_freed(wait_for(engine, idle_and_freed))
