"""The slow steps an adapter takes (a vocabulary read, a download, weights loaded), recorded
with whether their thread ran an event loop: what the tests that prove the loop does none of
them check (no timings are asserted). ``OpensGate`` orders a held step after the warning a
waiting loop logs, whatever the threads' timing."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import pytest

from llamacpp_integrations.client import counting
from llamacpp_integrations.client.counting import on_event_loop
from llamacpp_integrations.engine import registry


@dataclass
class Loads:
    """The steps taken, in order, each with whether its thread ran an event loop. ``gate``
    holds the steps that wait for it while it is clear (it starts set)."""

    done: list[tuple[str, bool]] = field(default_factory=list)
    gate: threading.Event = field(default_factory=threading.Event)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def __post_init__(self) -> None:
        self.gate.set()

    def record(self, what: str) -> None:
        with self.lock:
            self.done.append((what, on_event_loop()))

    def wrap(
        self,
        what: str,
        fn: Callable[..., Any],
        *,
        counts: Callable[[dict[str, Any]], bool] = lambda kwargs: True,
    ) -> Callable[..., Any]:
        """``fn``, recording each call whose keywords ``counts`` (e.g. not a cache lookup)."""

        def recorded(*args: Any, **kwargs: Any) -> Any:
            if counts(kwargs):
                self.record(what)
            return fn(*args, **kwargs)

        return recorded

    def steps(self) -> list[str]:
        return [what for what, _ in self.done]

    def on_the_loop(self) -> list[str]:
        return [what for what, on_loop in self.done if on_loop]


class OpensGate(logging.Handler):
    """Opens ``gate`` once a warning is logged, so a held step is still unfinished when the
    loop asks; keeps the messages."""

    def __init__(self, gate: threading.Event) -> None:
        super().__init__(logging.WARNING)
        self.gate = gate
        self.messages: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.messages.append(record.getMessage())
        self.gate.set()


def scripted_loads(
    loads: Loads,
    monkeypatch: pytest.MonkeyPatch,
    *,
    vocabulary: Callable[[str | None], object],
    engine: object,
) -> None:
    """Vocabulary reads and weight loads replaced by recorders (no native code): a read is
    recorded, waits for ``loads.gate`` and gives ``vocabulary(spec)``; a load gives ``engine``."""

    def open_vocabulary(spec: str | None) -> object:
        loads.record("vocabulary")
        assert loads.gate.wait(timeout=60)
        return vocabulary(spec)

    def open_local_engine(config: object) -> object:
        loads.record("weights")
        return engine

    monkeypatch.setattr(counting, "open_vocabulary", open_vocabulary)
    monkeypatch.setattr(registry, "open_local_engine", open_local_engine)


def recorded_native_loads(loads: Loads, monkeypatch: pytest.MonkeyPatch) -> None:
    """The real vocabulary reads and weight loads, each recorded in ``loads``."""
    from llamacpp_integrations.engine.native import vocabulary as native_vocabulary  # llama.cpp

    monkeypatch.setattr(
        native_vocabulary,
        "VocabularyModel",
        loads.wrap("vocabulary", native_vocabulary.VocabularyModel),
    )
    monkeypatch.setattr(
        registry, "open_local_engine", loads.wrap("weights", registry.open_local_engine)
    )
