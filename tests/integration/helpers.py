"""Small builders and checks shared by the integration tests."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, Protocol, TypeVar

from llamacpp_integrations.engine import (
    ChatMessage,
    ChatRequest,
    Completion,
    EngineStats,
    SamplingParams,
)
from llamacpp_integrations.engine.batch import HEADER_SPAN
from llamacpp_integrations.errors import OutputTruncatedError

GREEDY = SamplingParams(temperature=0.0)
T = TypeVar("T")


def finished(outcomes: Sequence[T | BaseException], *, at_least: int) -> list[T]:
    """The answers among ``outcomes`` (as ``asyncio.gather(..., return_exceptions=True)`` gives
    them) that finished. A tiny model may loop until ``max_tokens`` on some CPUs; what the
    integration guarantees then is the typed ``OutputTruncatedError``, never an invalid answer,
    so those are set aside, any other error is raised, and ``at_least`` must have finished."""
    done: list[T] = []
    for outcome in outcomes:
        if isinstance(outcome, OutputTruncatedError):
            continue
        if isinstance(outcome, BaseException):
            raise outcome
        done.append(outcome)
    assert len(done) >= at_least, f"only {len(done)} of {len(outcomes)} finished in max_tokens"
    return done


QUESTIONS = [
    "What is the capital of France?",
    "Name three colours.",
    "Write a haiku about the sea.",
    "How do I boil an egg?",
    "What is 2 + 2?",
    "Tell me a fact about cats.",
    "Why is the sky blue?",
    "List two programming languages.",
    "What is a prime number?",
    "Describe a tree in one sentence.",
    "What does a compiler do?",
    "Say hello in Spanish.",
    "What is the largest planet?",
    "Give me a word that rhymes with cat.",
    "What is water made of?",
    "Suggest a name for a dog.",
]


def chat(text: str, **kwargs: object) -> ChatRequest:
    kwargs.setdefault("sampling", GREEDY)
    return ChatRequest(messages=[ChatMessage(role="user", content=text)], **kwargs)  # type: ignore[arg-type]


class HasStats(Protocol):
    """An engine that reports its slots (the local engine, a RemoteEngine)."""

    def stats(self) -> EngineStats: ...


def wait_for(
    engine: HasStats, predicate: Callable[[EngineStats], bool], timeout: float = 30
) -> EngineStats:
    """Poll the stats until ``predicate`` holds (a bound on waiting, not a timing check)."""
    end = time.monotonic() + timeout
    while True:
        stats = engine.stats()
        if predicate(stats) or time.monotonic() > end:
            return stats
        time.sleep(0.01)


def rss_bytes() -> int:
    """Resident memory of this process."""
    with open("/proc/self/statm") as statm:
        return int(statm.read().split()[1]) * 4096


def idle_and_freed(stats: EngineStats) -> bool:
    """Nothing runs, and every slot without cached tokens holds no KV cells."""
    return (
        stats.running == 0
        and all(slot.kv_cells == 0 for slot in stats.slots if slot.cached_tokens == 0)
        and all(slot.kv_cells == slot.cached_tokens for slot in stats.slots)
    )


def repeat_kept_all(repeat: Completion, block: int = 64) -> bool:
    """Whether a prompt asked again kept every cached cell the prefill layout lets a repeat
    keep: all but its last token's, or all but its last chunk (a chat's question with the
    assistant's header, read with the last token: at most a ``block`` and a header)."""
    usage = repeat.usage
    tail = block + HEADER_SPAN
    return usage.prompt_tokens - tail <= usage.cached_prompt_tokens < usage.prompt_tokens


def agree_up_to_a_tie(plain: Completion, spec: Completion, tie_nats: float) -> bool:
    """True when two greedy answers are identical; False when they differ only from a near-tie
    on (the token ``spec`` chose there is among ``plain``'s top log-probabilities, within
    ``tie_nats`` of its best: batched kernels round differently); fails otherwise. Both need
    ``logprobs``."""
    if plain.token_ids == spec.token_ids:
        assert plain.text == spec.text and plain.finish_reason == spec.finish_reason
        return True
    at = next(
        (
            i
            for i, (a, b) in enumerate(zip(plain.token_ids, spec.token_ids, strict=False))
            if a != b
        ),
        min(len(plain.token_ids), len(spec.token_ids)),
    )
    assert plain.logprobs is not None and spec.logprobs is not None
    if at == min(len(plain.token_ids), len(spec.token_ids)):
        # One ended earlier: an end-of-generation token won a near-tie there.
        return False
    top = {t.token_id: t.logprob for t in plain.logprobs[at].top}
    chosen = spec.token_ids[at]
    assert chosen in top, (at, plain.text, spec.text)
    assert max(top.values()) - top[chosen] <= tie_nats, (at, top, plain.text, spec.text)
    return False


ROOT = Path(__file__).resolve().parents[2]


def in_fresh_process(
    script: str, *args: str, env: Mapping[str, str] | None = None
) -> dict[str, Any]:
    """Run ``script`` (``python -c``) in a new interpreter, where no other test loaded a
    model or imported ``llama_cpp`` yet; the JSON object its last line of output prints."""
    done = subprocess.run(
        [sys.executable, "-c", script, *args],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=ROOT,
        env=None if env is None else dict(env),
        check=True,
    )
    found: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return found
