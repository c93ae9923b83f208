"""The server's Prometheus metrics, kept by hand and written in the text exposition format.

Counters and histograms are updated on the event loop only (every handler runs there), so
they need no lock. Queue depth and running sequences are read from the engine when it
publishes stats (the local engine does; any engine with a ``stats()`` method will).

Latencies have one definition, the engine's (``Timings``), whether the answer was sent whole or
streamed: time to first token is ``Timings.time_to_first_token_s`` (from the engine taking the
request to its first token, queueing and prompt reading included), and the gap between tokens
is the answer's generation time over its gaps. ``ServerMetrics.answered`` records both when an
answer ends.
"""

from __future__ import annotations

import bisect
from collections import Counter
from collections.abc import Sequence
from typing import Protocol, runtime_checkable

from ..engine import EngineStats, Timings, Usage

__all__ = ["Histogram", "ServerMetrics", "StatsSource"]

# Seconds: TTFT spans queueing and prompt reading; inter-token gaps are one decode step.
TTFT_BUCKETS = (0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)
ITL_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0)


@runtime_checkable
class StatsSource(Protocol):
    """An engine that publishes its running and waiting requests."""

    def stats(self) -> EngineStats: ...


class Histogram:
    """A cumulative histogram with fixed upper bounds, as Prometheus has them."""

    def __init__(self, bounds: Sequence[float]) -> None:
        self.bounds = tuple(bounds)
        self.counts = [0] * (len(self.bounds) + 1)  # the last one is +Inf
        self.total = 0.0

    def observe(self, value: float) -> None:
        self.counts[bisect.bisect_left(self.bounds, value)] += 1
        self.total += value

    @property
    def count(self) -> int:
        return sum(self.counts)

    def lines(self, name: str) -> list[str]:
        out, running = [], 0
        for bound, count in zip((*self.bounds, float("inf")), self.counts, strict=True):
            running += count
            le = "+Inf" if bound == float("inf") else repr(bound)
            out.append(f'{name}_bucket{{le="{le}"}} {running}')
        out += [f"{name}_sum {self.total!r}", f"{name}_count {running}"]
        return out


class ServerMetrics:
    """What ``GET /metrics`` reports."""

    def __init__(self) -> None:
        self.requests: Counter[tuple[str, str]] = Counter()
        self.in_flight = 0
        self.prompt_tokens = 0
        self.completion_tokens = 0
        self.ttft = Histogram(TTFT_BUCKETS)
        self.inter_token = Histogram(ITL_BUCKETS)

    def finished(self, endpoint: str, outcome: str) -> None:
        """Count one request by its endpoint and outcome (``ok``, ``bad_request``,
        ``overloaded``, ``timeout``, ``cancelled``, ``error``, ``unauthorized``...)."""
        self.requests[(endpoint, outcome)] += 1

    def tokens(self, prompt: int, completion: int) -> None:
        """Count tokens read and generated."""
        self.prompt_tokens += prompt
        self.completion_tokens += completion

    def answered(self, usage: Usage | None, timings: Timings | None) -> None:
        """One finished answer (whole or the last piece of a stream): its tokens, its time to
        first token and the mean gap between its tokens, as the engine measured them."""
        if usage is not None:
            self.tokens(usage.prompt_tokens, usage.completion_tokens)
        if timings is None or timings.time_to_first_token_s is None:
            return
        self.ttft.observe(timings.time_to_first_token_s)
        if usage is not None and usage.completion_tokens > 1:
            self.inter_token.observe(timings.generation_s / (usage.completion_tokens - 1))

    def render(self, stats: EngineStats | None) -> str:
        """The text exposition of every metric (engine gauges only when ``stats`` is given)."""
        lines = [
            "# HELP llamacpp_requests_total Requests answered, by endpoint and outcome.",
            "# TYPE llamacpp_requests_total counter",
        ]
        for (endpoint, outcome), count in sorted(self.requests.items()):
            lines.append(
                f'llamacpp_requests_total{{endpoint="{endpoint}",outcome="{outcome}"}} {count}'
            )
        lines += [
            "# HELP llamacpp_requests_in_flight HTTP requests being served now.",
            "# TYPE llamacpp_requests_in_flight gauge",
            f"llamacpp_requests_in_flight {self.in_flight}",
            "# HELP llamacpp_prompt_tokens_total Prompt tokens read.",
            "# TYPE llamacpp_prompt_tokens_total counter",
            f"llamacpp_prompt_tokens_total {self.prompt_tokens}",
            "# HELP llamacpp_completion_tokens_total Tokens generated.",
            "# TYPE llamacpp_completion_tokens_total counter",
            f"llamacpp_completion_tokens_total {self.completion_tokens}",
        ]
        if stats is not None:
            lines += [
                "# HELP llamacpp_queue_depth Requests waiting for a free sequence.",
                "# TYPE llamacpp_queue_depth gauge",
                f"llamacpp_queue_depth {stats.waiting}",
                "# HELP llamacpp_running_sequences Requests being decoded.",
                "# TYPE llamacpp_running_sequences gauge",
                f"llamacpp_running_sequences {stats.running}",
                "# HELP llamacpp_decode_steps_total Decode steps run by the engine.",
                "# TYPE llamacpp_decode_steps_total counter",
                f"llamacpp_decode_steps_total {stats.steps}",
            ]
        lines += [
            "# HELP llamacpp_time_to_first_token_seconds Engine submission to the first token "
            "(queueing and prompt reading included).",
            "# TYPE llamacpp_time_to_first_token_seconds histogram",
            *self.ttft.lines("llamacpp_time_to_first_token_seconds"),
            "# HELP llamacpp_inter_token_seconds Mean time between the tokens of one answer.",
            "# TYPE llamacpp_inter_token_seconds histogram",
            *self.inter_token.lines("llamacpp_inter_token_seconds"),
        ]
        return "\n".join(lines) + "\n"


def outcome_of(status: int) -> str:
    """The outcome label of an HTTP status."""
    return {
        200: "ok",
        400: "bad_request",
        401: "unauthorized",
        413: "too_large",
        429: "overloaded",
        499: "disconnected",
        503: "unavailable",
        504: "timeout",
    }.get(status, "error" if status >= 500 else "bad_request")
