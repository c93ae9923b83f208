"""Timing hooks for the engine's worker, put in place by a benchmark and taken out after it.

``PhaseTimers`` wraps methods (and module functions) so that every call adds its time to a named
phase. Times are exclusive: a wrapped call inside another (``logits_view`` inside ``sample``)
counts for its own phase only, so the phases add up to the time the outermost wrapped calls
took. Each wrapper costs about a microsecond per call, which the profile reports beside the
phases (``overhead_us_per_call``). ``DecodeLog`` records every decode of a generation context:
when it started, how many sequences and tokens it held, and how long ``llama_decode`` took
inside it, from which the step rates and the share of a step that is not ``llama_decode``
follow. Nothing here changes what the engine computes.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any


@dataclass
class Phase:
    total_s: float = 0.0
    calls: int = 0


@dataclass
class PhaseTimers:
    """Exclusive time per phase of the wrapped calls (see the module docstring)."""

    phases: dict[str, Phase] = field(default_factory=dict)
    _undo: list[Callable[[], None]] = field(default_factory=list)
    _children: list[float] = field(default_factory=list)  # child time of each open call

    def wrap(self, owner: Any, name: str, phase: str) -> None:
        """Time ``owner.name`` (a class's method or a module's function) as ``phase``."""
        original = owner.__dict__[name] if name in vars(owner) else getattr(owner, name)
        record = self.phases.setdefault(phase, Phase())
        children = self._children
        clock = time.perf_counter

        def timed(*args: Any, **kwargs: Any) -> Any:
            children.append(0.0)
            start = clock()
            try:
                return original(*args, **kwargs)
            finally:
                elapsed = clock() - start
                inner = children.pop()
                record.total_s += elapsed - inner
                record.calls += 1
                if children:
                    children[-1] += elapsed

        setattr(owner, name, timed)
        self._undo.append(lambda: setattr(owner, name, original))

    def totals(self) -> dict[str, float]:
        """Each phase's time so far."""
        return {name: record.total_s for name, record in self.phases.items()}

    def reset(self) -> None:
        for record in self.phases.values():
            record.total_s, record.calls = 0.0, 0

    def restore(self) -> None:
        while self._undo:
            self._undo.pop()()


def wrapper_cost_us(samples: int = 20000) -> float:
    """What one timed call costs beyond the call itself, in microseconds (median of 5)."""

    class Probe:
        def call(self) -> None:
            return None

    timers = PhaseTimers()
    probe = Probe()
    plain = []
    for _ in range(5):
        start = time.perf_counter()
        for _ in range(samples):
            probe.call()
        plain.append(time.perf_counter() - start)
    timers.wrap(Probe, "call", "probe")
    wrapped = []
    for _ in range(5):
        start = time.perf_counter()
        for _ in range(samples):
            probe.call()
        wrapped.append(time.perf_counter() - start)
    timers.restore()
    return (statistics.median(wrapped) - statistics.median(plain)) / samples * 1e6


@dataclass
class Decode:
    start: float
    end: float
    sequences: int
    tokens: int
    llama_decode_s: float
    phases: dict[str, float] | None = None  # the timers' totals at its start


@dataclass
class DecodeLog:
    """Every decode of the generation contexts while ``recording`` (see the module docstring)."""

    decodes: list[Decode] = field(default_factory=list)
    timers: PhaseTimers | None = None  # read at every decode's start, when given

    @contextmanager
    def recording(self) -> Iterator[DecodeLog]:
        import llama_cpp

        from llamacpp_integrations.engine.native.runner import GenerationContext

        decode, llama_decode = GenerationContext.decode, llama_cpp.llama_decode
        inside = [0.0]
        clock = time.perf_counter

        def timed_llama_decode(*args: Any) -> Any:
            start = clock()
            try:
                return llama_decode(*args)
            finally:
                inside[0] += clock() - start

        timers = self.timers

        def logged(context: Any, entries: Any) -> int:
            phases = None if timers is None else timers.totals()
            inside[0] = 0.0
            start = clock()
            status: int = decode(context, entries)
            tokens = sum(len(entry.tokens) for entry in entries)
            self.decodes.append(Decode(start, clock(), len(entries), tokens, inside[0], phases))
            return status

        GenerationContext.decode = logged  # type: ignore[method-assign]
        llama_cpp.llama_decode = timed_llama_decode
        try:
            yield self
        finally:
            GenerationContext.decode = decode  # type: ignore[method-assign]
            llama_cpp.llama_decode = llama_decode

    def steady(self, sequences: int) -> list[tuple[Decode, float]]:
        """The decodes of exactly ``sequences`` sequences of one token each that the next decode
        also was, with the time to that next decode's start (the worker's whole turn)."""
        return [(this, after.start - this.start) for this, after in self._steady(sequences)]

    def steady_phases(self, sequences: int) -> dict[str, float]:
        """The timers' time in each phase over the steady turns (``steady``), summed."""
        out: dict[str, float] = {}
        for this, after in self._steady(sequences):
            assert this.phases is not None and after.phases is not None
            for name, total in after.phases.items():
                out[name] = out.get(name, 0.0) + total - this.phases.get(name, 0.0)
        return out

    def _steady(self, sequences: int) -> list[tuple[Decode, Decode]]:
        return [
            (this, after)
            for this, after in zip(self.decodes, self.decodes[1:], strict=False)
            if all(d.sequences == sequences and d.tokens == sequences for d in (this, after))
        ]
