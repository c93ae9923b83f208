"""Small builders shared by the integration tests."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Protocol

from llamacpp_integrations.engine import (
    ChatMessage,
    ChatRequest,
    EngineStats,
    SamplingParams,
)

GREEDY = SamplingParams(temperature=0.0)

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
