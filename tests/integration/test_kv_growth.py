"""KV streams that start small and grow when a sequence needs more cells.

With a stream per sequence, an engine starts with about the training context in all (a few
hundred cells per stream here) instead of every sequence's whole context, and makes its context
again with larger streams when a prompt or an answer needs them, carrying every sequence's
cells over. These tests check that growing happens when needed and only then, that cached and
running sequences survive it, and that it never changes an answer: in deterministic mode the
tokens equal those of an engine that had the whole context from the start (the comparison is
the point; see ``docs/reproducibility.md``).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from llamacpp_integrations.engine import (
    ChatMessage,
    ChatRequest,
    Completion,
    CompletionRequest,
    Engine,
    EngineConfig,
)
from llamacpp_integrations.engine.worker import cells as cells_module
from llamacpp_integrations.errors import EngineError, KVCacheFullError, ModelLoadError

from .helpers import GREEDY, idle_and_freed, repeat_kept_all, wait_for

RULES = " ".join(
    f"Rule {i}: visitors sign in at desk {i % 7}, wear badge colour {i % 5}, and never enter "
    f"laboratory {i % 3} alone."
    for i in range(24)
)


def chat(question: str, *, system: str | None = None, max_tokens: int = 16) -> ChatRequest:
    messages = [ChatMessage(role="user", content=question)]
    if system is not None:
        messages.insert(0, ChatMessage(role="system", content=system))
    return ChatRequest(messages=messages, max_tokens=max_tokens, sampling=GREEDY)


def again(request: ChatRequest) -> ChatRequest:
    """The same request under a new id."""
    return ChatRequest(
        messages=request.messages, max_tokens=request.max_tokens, sampling=request.sampling
    )


def config(smollm_path: Path, start: int, n_ctx: int = 2048) -> EngineConfig:
    return EngineConfig(
        model=str(smollm_path),
        n_seq_max=2,
        n_ctx_per_seq=n_ctx,
        kv_start_cells=start,
        deterministic=True,
        realign_when_idle=False,
    )


SHORT = chat("Name a yellow fruit.")
LONG = chat("Which desk do I sign in at?", system=RULES)  # ~700 tokens
WRITES_ON = chat("Count from one to two hundred.", max_tokens=300)  # past 256 cells


@pytest.fixture(scope="module")
def whole(smollm_path: Path) -> Iterator[list[Completion]]:
    """The answers of an engine whose streams hold the whole context from the start."""
    with Engine(config(smollm_path, 0)) as engine:
        assert engine.stats().kv_cells_allocated == 0  # made on first use
        answers = [engine.generate(again(r)) for r in (SHORT, LONG, WRITES_ON)]
        assert engine.stats().kv_cells_allocated == 2 * 2048
        yield answers


def test_streams_grow_only_when_a_sequence_needs_more(
    smollm_path: Path, whole: list[Completion]
) -> None:
    with Engine(config(smollm_path, 256)) as engine:
        short = engine.generate(again(SHORT))
        assert engine.stats().kv_cells_allocated == 2 * 256
        long = engine.generate(again(LONG))
        assert long.usage.prompt_tokens > 512
        assert engine.stats().kv_cells_allocated == 2 * 1024  # doubled until the prompt fit
        # The short chat's cells were carried over: asked again, all but its last chunk (the
        # question and the assistant's header) are cached, and the answer is the same.
        repeat = engine.generate(again(SHORT))
        assert repeat_kept_all(repeat)
    assert short.token_ids == repeat.token_ids == whole[0].token_ids
    assert long.token_ids == whole[1].token_ids


def test_an_answer_grows_its_stream_while_others_run(
    smollm_path: Path, whole: list[Completion]
) -> None:
    with Engine(config(smollm_path, 256)) as engine:
        writer = engine.submit(again(WRITES_ON))
        reader = engine.submit(again(LONG))  # its prompt grows the streams mid-answer
        written, read = writer.result(), reader.result()
        assert engine.stats().kv_cells_allocated == 2 * 1024
        assert idle_and_freed(wait_for(engine, idle_and_freed))
    assert written.usage.prompt_tokens + written.usage.completion_tokens > 256
    assert written.token_ids == whole[2].token_ids
    assert read.token_ids == whole[1].token_ids


def test_streams_never_grow_past_the_context(smollm_path: Path) -> None:
    endless = ChatRequest(
        messages=[ChatMessage(role="user", content="Count upwards.")],
        max_tokens=None,
        ignore_eos=True,
        sampling=GREEDY,
    )
    with Engine(config(smollm_path, 256, n_ctx=1024)) as engine:
        answer = engine.generate(endless)
        assert answer.finish_reason == "length"
        assert answer.usage.prompt_tokens + answer.usage.completion_tokens == 1024
        assert engine.stats().kv_cells_allocated == 2 * 1024


def test_a_stream_that_cannot_grow_ends_only_the_request_that_needed_it(
    smollm_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Growing fails as it would for lack of memory: the request that needed the room gets a
    typed error, every other sequence keeps its cells, and the engine serves on."""
    made = cells_module.GenerationContext

    def at_most_256_cells_each(model: Any, *, n_cells: int, **kwargs: Any) -> Any:
        if n_cells > 3 * 256:
            raise ModelLoadError(str(model.path), "not enough memory (simulated)")
        return made(model, n_cells=n_cells, **kwargs)

    monkeypatch.setattr(cells_module, "GenerationContext", at_most_256_cells_each)
    # Three sequences: the short chat's slot stays its own while two others run.
    with Engine(replace(config(smollm_path, 256), n_seq_max=3)) as engine:
        short = engine.generate(again(SHORT))
        with pytest.raises(EngineError, match="could not create the generation context"):
            engine.generate(again(LONG))  # refused when admitted: its prompt does not fit
        writer = engine.submit(again(WRITES_ON))  # outgrows its stream while answering
        beside = engine.submit(chat("What do bees make?"))
        with pytest.raises(KVCacheFullError, match="could not grow"):
            writer.result()
        assert beside.result().finish_reason in ("stop", "length")
        repeat = engine.generate(again(SHORT))  # its cells survived both attempts
        assert repeat_kept_all(repeat)
        assert engine.stats().kv_cells_allocated == 3 * 256
        assert idle_and_freed(wait_for(engine, idle_and_freed))
    assert short.token_ids == repeat.token_ids


def test_a_saved_prompt_longer_than_the_stream_is_restored(
    smollm_path: Path, tmp_path: Path
) -> None:
    """A state on disk is taken whole, then cut back: the stream grows to hold all of it even
    when the new prompt alone would fit a smaller one."""

    def engine(start: int) -> Engine:
        return Engine(
            replace(
                config(smollm_path, start),
                prompt_cache_dir=str(tmp_path),
                prompt_cache_min_tokens=64,
            )
        )

    with engine(0) as first:
        saved = first.generate(CompletionRequest(prompt=RULES, max_tokens=2, sampling=GREEDY))
    assert saved.usage.prompt_tokens > 512
    with engine(256) as second:
        shorter = RULES[: len(RULES) * 2 // 5]  # about 280 tokens: a stream of 512 holds it
        answer = second.generate(CompletionRequest(prompt=shorter, max_tokens=2, sampling=GREEDY))
        assert second.stats().kv_cells_allocated >= 2 * saved.usage.prompt_tokens
    # Restored and cut back to a block edge (without room for the whole state: nothing).
    assert answer.usage.cached_prompt_tokens >= answer.usage.prompt_tokens - 2 * 64
