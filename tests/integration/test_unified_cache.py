"""``kv_unified=True``: one KV cache for all sequences, sized like llama-server's.

Its cells are shared: the training context's worth for every sequence together, a prefix that
requests share held once, and a request that finds no room waiting (or, when running answers
hold every cell, the newest one ending with ``KVCacheFullError``) while the others go on.
Answers are not compared across runs here: in a unified cache where a sequence's cells lie
changes its rounding (``test_reproducibility.py`` covers the split layout's guarantee).
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from pathlib import Path

from llamacpp_integrations.engine import ChatMessage, ChatRequest, Engine, EngineConfig
from llamacpp_integrations.engine.batch import common_prefix
from llamacpp_integrations.engine.types import new_request_id
from llamacpp_integrations.errors import KVCacheFullError

from .helpers import GREEDY, idle_and_freed, wait_for

LONG = " ".join(
    f"Fact {i}: the depot on street {i} opens at {6 + i % 4} o'clock." for i in range(30)
)


def _chat(question: str, *, max_tokens: int = 8, system: str = LONG) -> ChatRequest:
    return ChatRequest(
        messages=[
            ChatMessage(role="system", content=system),
            ChatMessage(role="user", content=question),
        ],
        max_tokens=max_tokens,
        sampling=GREEDY,
    )


def _n_tokens(engine: Engine, request: ChatRequest) -> int:
    return len(engine.tokenize(engine.render_chat(request), parse_special=True))


def test_one_cache_of_the_training_context_for_all(smollm_path: Path) -> None:
    with Engine(EngineConfig(model=str(smollm_path), kv_unified=True)) as engine:
        choice = engine.context_choice
        assert choice.unified and choice.n_cells == engine.info.n_ctx_train == 8192
        assert engine.info.n_ctx_per_seq == 8192  # one request may fill it
        first = engine.generate(_chat("When does depot 3 open?"))
        again = engine.generate(_chat("When does depot 3 open?"))
        turns = [*_chat("When does depot 3 open?").messages]
        follow_up = engine.generate(
            ChatRequest(
                messages=[
                    *turns,
                    ChatMessage(role="assistant", content=first.text),
                    ChatMessage(role="user", content="And depot 4?"),
                ],
                max_tokens=8,
                sampling=GREEDY,
            )
        )
    # Every cached token is kept, not only up to a block edge: no layout to preserve.
    assert again.usage.cached_prompt_tokens == again.usage.prompt_tokens - 1
    assert follow_up.usage.cached_prompt_tokens >= first.usage.prompt_tokens


def test_requests_that_find_no_room_wait_for_cells(smollm_path: Path) -> None:
    """Four prompts of about 400 tokens in a cache of 1024 cells: they cannot all be read at
    once, so those that find no room give their cells back and read again once one ends.
    Every one finishes, and the engine ends idle with nothing leaked."""
    config = EngineConfig(
        model=str(smollm_path), n_seq_max=4, n_ctx_per_seq=1024, kv_cells=1024, kv_unified=True
    )
    systems = [f"Depot list {k}. " + LONG for k in range(4)]  # unrelated from the first token
    requests = [_chat("Which depot opens first?", system=s, max_tokens=16) for s in systems]
    with Engine(config) as engine:
        n_prompt = _n_tokens(engine, requests[0])
        assert 3 * n_prompt > 1024 >= n_prompt + 16
        with ThreadPoolExecutor(4) as pool:
            answers = list(pool.map(engine.generate, requests))
        assert all(a.finish_reason in ("stop", "length") for a in answers)
        assert idle_and_freed(wait_for(engine, idle_and_freed))
        assert engine.generate(_chat("Which depot opens last?")).text is not None


def test_when_answers_hold_every_cell_the_newest_ends(smollm_path: Path) -> None:
    """Two answers that grow until the cache is full: the newest ends with the typed error,
    the other finishes at its own limit, and the engine serves the next request."""
    config = EngineConfig(
        model=str(smollm_path), n_seq_max=2, n_ctx_per_seq=512, kv_cells=512, kv_unified=True
    )
    question = ChatRequest(
        messages=[ChatMessage(role="user", content="Count to a thousand.")],
        sampling=GREEDY,
        ignore_eos=True,
    )
    with Engine(config) as engine:
        handles = [
            engine.submit(question),
            engine.submit(replace(question, request_id=new_request_id())),
        ]
        outcomes: list[object] = []
        for handle in handles:
            try:
                outcomes.append(handle.result().finish_reason)
            except KVCacheFullError as error:
                outcomes.append(error)
        assert sum(isinstance(o, KVCacheFullError) for o in outcomes) == 1, outcomes
        assert "length" in outcomes
        assert idle_and_freed(wait_for(engine, idle_and_freed))
        assert engine.generate(_chat("Hi?", system="Be brief.")).finish_reason in ("stop", "length")


def test_a_shared_prefix_is_read_once_in_flight(smollm_path: Path) -> None:
    """Sixteen chats over one long system prompt at once: all but the one that reads it take
    its cells (tagged for each sequence, not copied) and read only their questions."""
    config = EngineConfig(
        model=str(smollm_path), n_seq_max=16, n_ctx_per_seq=1024, kv_cells=4096, kv_unified=True
    )
    n_requests = 16
    requests = [_chat(f"When does depot {i} open?") for i in range(n_requests)]
    with Engine(config) as engine:
        n_prompt = _n_tokens(engine, requests[0])
        handles = [engine.submit(r) for r in requests]
        answers = [h.result() for h in handles]
        shared = engine.stats().shared_prompt_tokens
    taken = [a.usage.cached_prompt_tokens for a in answers]
    assert sum(t >= n_prompt - 16 for t in taken) >= n_requests - 1, (n_prompt, taken)
    assert shared == sum(taken)


def test_out_of_cells_the_least_recently_used_blocks_go_first(smollm_path: Path) -> None:
    """A full cache drops idle cells by block, oldest first: a long chat cached long ago loses
    its tail blocks, a chat cached since keeps every cell, and a new question over its system
    prompt still takes that prompt from the cache. (Before, every idle cell went at once.)"""
    config = EngineConfig(
        model=str(smollm_path), n_seq_max=3, n_ctx_per_seq=1024, kv_cells=1024, kv_unified=True
    )
    old = _chat("Which depot opens first?", system="Old list. " + LONG)
    hot_system = "You answer in one word. " + LONG[:400]
    hot = _chat("When does depot 2 open?", system=hot_system)
    big = _chat("Which depot opens last?", system="Other list. " + LONG[:1500])
    with Engine(config) as engine:
        n_old, n_hot, n_big = (_n_tokens(engine, r) for r in (old, hot, big))
        assert n_old + n_hot + 8 < 1024 < n_old + n_hot + n_big, (n_old, n_hot, n_big)
        engine.generate(old)
        engine.generate(hot)
        assert engine.generate(big).finish_reason in ("stop", "length")
        stats = engine.stats()
        assert stats.evicted_cached_tokens > 0
        assert idle_and_freed(stats)  # the cells dropped are the tokens forgotten
        kept = sorted(slot.cached_tokens for slot in stats.slots)
        assert any(0 < n < n_old for n in kept), (kept, n_old)  # cut by blocks, not whole
        follow = _chat("When does depot 5 open?", system=hot_system)
        again = engine.generate(follow)
        tokens = [engine.tokenize(engine.render_chat(r), parse_special=True) for r in (hot, follow)]
    # A unified cache keeps every shared token: all of what the two prompts share.
    assert again.usage.cached_prompt_tokens == common_prefix(*tokens) > n_hot - 16
