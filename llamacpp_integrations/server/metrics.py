"""The server's Prometheus metrics, kept and written by ``prometheus_client``.

Each app has its own ``CollectorRegistry`` (``ServerMetrics.registry``): nothing is registered
in the library's global default registry, so two apps in one process (tests, an embedding
application) count apart. The counters and histograms are updated on the event loop (every
handler runs there). Queue depth, running sequences and decode steps are read from the engine
when ``/metrics`` is asked, when it publishes stats (the local engine does; any engine with a
``stats()`` method will).

Latencies have one definition, the engine's (``Timings``), whether the answer was sent whole or
streamed: time to first token is ``Timings.time_to_first_token_s`` (from the engine taking the
request to its first token, queueing and prompt reading included), and the gap between tokens
is the answer's generation time over its gaps. ``ServerMetrics.answered`` records both when an
answer ends.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Protocol, runtime_checkable

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric

from ..engine import EngineStats, Timings, Usage

__all__ = ["CONTENT_TYPE", "ServerMetrics", "StatsSource", "outcome_of"]

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
"""The text exposition format ``generate_latest`` writes, which every Prometheus scraper reads."""

# Seconds: TTFT spans queueing and prompt reading; inter-token gaps are one decode step.
TTFT_BUCKETS = (0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)
ITL_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0)


@runtime_checkable
class StatsSource(Protocol):
    """An engine that publishes its running and waiting requests."""

    def stats(self) -> EngineStats: ...


class _EngineGauges:
    """The engine's own numbers at one scrape, as a collector ``generate_latest`` reads."""

    def __init__(self, stats: EngineStats) -> None:
        self.stats = stats

    def collect(self) -> Iterator[Metric]:
        yield GaugeMetricFamily(
            "llamacpp_queue_depth", "Requests waiting for a free sequence.", self.stats.waiting
        )
        yield GaugeMetricFamily(
            "llamacpp_running_sequences", "Requests being decoded.", self.stats.running
        )
        yield CounterMetricFamily(
            "llamacpp_decode_steps", "Decode steps run by the engine.", self.stats.steps
        )
        if self.stats.decode_threads:  # a remote engine does not say
            yield GaugeMetricFamily(
                "llamacpp_decode_threads",
                "CPU threads the engine decodes on now (fewer while other work keeps the "
                "cores busy, when n_threads is left to the engine).",
                self.stats.decode_threads,
            )


class ServerMetrics:
    """What ``GET /metrics`` reports, in a registry of the app's own."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        self.requests = Counter(
            "llamacpp_requests",
            "Requests answered, by endpoint and outcome.",
            ("endpoint", "outcome"),
            registry=self.registry,
        )
        self.in_flight = Gauge(
            "llamacpp_requests_in_flight", "HTTP requests being served now.", registry=self.registry
        )
        self.prompt_tokens = Counter(
            "llamacpp_prompt_tokens", "Prompt tokens read.", registry=self.registry
        )
        self.completion_tokens = Counter(
            "llamacpp_completion_tokens", "Tokens generated.", registry=self.registry
        )
        self.ttft = Histogram(
            "llamacpp_time_to_first_token_seconds",
            "Engine submission to the first token (queueing and prompt reading included).",
            buckets=TTFT_BUCKETS,
            registry=self.registry,
        )
        self.inter_token = Histogram(
            "llamacpp_inter_token_seconds",
            "Mean time between the tokens of one answer.",
            buckets=ITL_BUCKETS,
            registry=self.registry,
        )

    def finished(self, endpoint: str, outcome: str) -> None:
        """Count one request by its endpoint and outcome (``ok``, ``bad_request``,
        ``overloaded``, ``timeout``, ``cancelled``, ``error``, ``unauthorized``...)."""
        self.requests.labels(endpoint=endpoint, outcome=outcome).inc()

    def tokens(self, prompt: int, completion: int) -> None:
        """Count tokens read and generated."""
        self.prompt_tokens.inc(prompt)
        self.completion_tokens.inc(completion)

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

    def value(self, name: str, **labels: str) -> float:
        """One sample's value as the exposition writes it (``llamacpp_prompt_tokens_total``,
        ``llamacpp_time_to_first_token_seconds_count``...), 0 when it has none yet."""
        return self.registry.get_sample_value(name, labels) or 0.0

    def render(self, stats: EngineStats | None) -> str:
        """The text exposition of every metric (engine gauges only when ``stats`` is given)."""
        text = generate_latest(self.registry)
        if stats is not None:
            text += generate_latest(_EngineGauges(stats))
        return text.decode()


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
