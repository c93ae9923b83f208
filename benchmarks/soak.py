"""Soak: mixed traffic from threads and asyncio tasks at once for N minutes, then leak checks.

One engine (SmolLM2-135M with the tiny random-weight projector of ``tests/builders``, so image
requests run too) serves, for ``--minutes``: chats, streams, tool calls, structured output,
embeddings, image chats and raw completions, from ``--threads`` threads and ``--tasks`` asyncio
tasks. A share of them is cancelled at a random point (before the prompt is read, mid-stream,
the awaiting task cancelled, the stream abandoned and garbage-collected), some carry a timeout
that fires, and bursts submit more than the queue holds. A sampler records RSS, open file
descriptors, threads, KV cells in use and queue depth every second.

At the end it checks:

- every request ended exactly once, with a result or a typed error of the package (counted by
  kind and outcome); an untyped exception, a request ending twice or never is a failure;
- the engine idles with no request running or waiting, and after ``clear_cache`` no KV cell is
  in use;
- RSS grew by less than ``--rss-bound-mb`` between the end of the warm-up and the end;
- no more threads and file descriptors are open than before the load started;
- fixed greedy prompts, each run alone on a fresh cache, give the same text at the start and
  at the end.

It prints a summary table, writes JSON with ``--json``, and exits 1 when a check fails.
``make soak MINUTES=N`` runs it; ``tests/integration/test_soak.py`` runs it for one minute.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import os
import random
import sys
import threading
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))
os.environ.setdefault("LLAMACPP_INTEGRATIONS_MODELS", str(ROOT / ".cache" / "models"))

import results  # noqa: E402
from PIL import Image  # noqa: E402

from llamacpp_integrations import client  # noqa: E402
from llamacpp_integrations.engine import (  # noqa: E402
    ChatMessage,
    ChatRequest,
    CompletionRequest,
    Engine,
    EngineConfig,
    ImageInput,
    SamplingParams,
)
from llamacpp_integrations.errors import (  # noqa: E402
    EngineOverloadedError,
    LlamaCppIntegrationError,
    RequestCancelledError,
    RequestTimeoutError,
)
from llamacpp_integrations.models import models_dir  # noqa: E402
from tests.builders.tiny_projector import cached_tiny_projector  # noqa: E402

GREEDY = SamplingParams(temperature=0.0)
SAMPLED = SamplingParams(temperature=0.8, seed=None)
FIXED_PROMPTS = [
    "What is the capital of France?",
    "Write one sentence about the sea.",
    "List three colours.",
]
QUESTIONS = [
    "Name a fruit.",
    "What is 2 + 2?",
    "Say hello in French.",
    "Describe a cat in five words.",
    "Why is the sky blue?",
    "Give me a word that rhymes with tree.",
]
WEATHER = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Current weather in a city.",
        "parameters": {
            "type": "object",
            "properties": {"city": {"type": "string"}},
            "required": ["city"],
        },
    },
}
PERSON = {
    "type": "object",
    "properties": {
        "name": {"type": "string", "maxLength": 20},
        "age": {"type": "integer", "minimum": 0, "maximum": 120},
    },
    "required": ["name", "age"],
}


# ---- the ledger: every request starts once and ends once ----------------------------------


@dataclass
class Ledger:
    """Counts requests by kind and outcome; catches a request ending twice or never."""

    lock: threading.Lock = field(default_factory=threading.Lock)
    open: dict[int, str] = field(default_factory=dict)
    outcomes: Counter[tuple[str, str]] = field(default_factory=Counter)
    double_ends: list[str] = field(default_factory=list)
    untyped: list[str] = field(default_factory=list)
    next_id: int = 0

    def start(self, kind: str) -> int:
        with self.lock:
            self.next_id += 1
            self.open[self.next_id] = kind
            return self.next_id

    def end(self, ticket: int, outcome: str) -> None:
        with self.lock:
            kind = self.open.pop(ticket, None)
            if kind is None:
                self.double_ends.append(f"ticket {ticket}: {outcome}")
                return
            self.outcomes[(kind, outcome)] += 1

    def fail(self, ticket: int, error: BaseException) -> None:
        if isinstance(error, RequestCancelledError):
            outcome = "cancelled"
        elif isinstance(error, RequestTimeoutError):
            outcome = "timeout"
        elif isinstance(error, EngineOverloadedError):
            outcome = "overloaded"
        elif isinstance(error, LlamaCppIntegrationError):
            outcome = f"error:{type(error).__name__}"
        else:
            outcome = f"UNTYPED:{type(error).__name__}"
            with self.lock:
                self.untyped.append(f"{type(error).__name__}: {error}")
        self.end(ticket, outcome)


# ---- the workload -----------------------------------------------------------------------


def chat(text: str, *, max_tokens: int = 24, **kwargs: Any) -> ChatRequest:
    kwargs.setdefault("sampling", SAMPLED)
    return ChatRequest(
        messages=[ChatMessage(role="user", content=text)], max_tokens=max_tokens, **kwargs
    )


def image(rng: random.Random) -> ImageInput:
    size = (rng.randint(16, 96), rng.randint(16, 96))
    color = (rng.randrange(256), rng.randrange(256), rng.randrange(256))
    picture = Image.new("RGB", size, color)
    return ImageInput(width=size[0], height=size[1], rgb=picture.tobytes())


def image_chat(rng: random.Random) -> ChatRequest:
    content = [
        {"type": "image", "image": image(rng)},
        {"type": "text", "text": "What is in this picture?"},
    ]
    return ChatRequest(
        messages=[ChatMessage(role="user", content=content)], max_tokens=12, sampling=SAMPLED
    )


def long_prompt(rng: random.Random) -> str:
    words = ["alpha", "beta", "gamma", "delta", "sky", "sea", "tree", "stone"]
    return " ".join(rng.choice(words) for _ in range(rng.randint(200, 500))) + ". Summarize."


class Workload:
    """The request kinds, each a function running one request and recording its outcome."""

    def __init__(self, engine: Engine, ledger: Ledger) -> None:
        self.engine = engine
        self.ledger = ledger

    # Each sync kind: run one request of its kind; ``ticket`` is already open.

    def chat(self, rng: random.Random, ticket: int) -> str:
        self.engine.generate(chat(rng.choice(QUESTIONS), max_tokens=rng.randint(4, 40)))
        return "ok"

    def stream(self, rng: random.Random, ticket: int) -> str:
        for _ in self.engine.stream(chat(rng.choice(QUESTIONS))):
            pass
        return "ok"

    def completion(self, rng: random.Random, ticket: int) -> str:
        request = CompletionRequest(
            prompt="Once upon a time", max_tokens=rng.randint(4, 32), sampling=SAMPLED
        )
        self.engine.generate(request)
        return "ok"

    def tool_call(self, rng: random.Random, ticket: int) -> str:
        request = chat("What is the weather in Paris?", max_tokens=48)
        plan = client.tool_plan(self.engine, request, [WEATHER], tool_choice="required")
        client.generate(self.engine, plan)
        return "ok"

    def structured(self, rng: random.Random, ticket: int) -> str:
        request = chat("Invent a person.", max_tokens=64)
        client.generate(self.engine, client.structured_plan(request, PERSON, cut_json="raise"))
        return "ok"

    def embed(self, rng: random.Random, ticket: int) -> str:
        self.engine.embed([rng.choice(QUESTIONS) for _ in range(rng.randint(1, 6))])
        return "ok"

    def image(self, rng: random.Random, ticket: int) -> str:
        self.engine.generate(image_chat(rng))
        return "ok"

    def cancel_mid_prompt(self, rng: random.Random, ticket: int) -> str:
        handle = self.engine.submit(chat(long_prompt(rng)), queue_timeout=None)
        handle.cancel()
        handle.result()  # raises RequestCancelledError, unless it had already finished
        return "ok"

    def cancel_mid_stream(self, rng: random.Random, ticket: int) -> str:
        handle = self.engine.submit(chat(rng.choice(QUESTIONS), max_tokens=64), queue_timeout=None)
        for i, _ in enumerate(handle):
            if i >= rng.randint(0, 4):
                handle.cancel()
        handle.result()
        return "ok"

    def abandon_stream(self, rng: random.Random, ticket: int) -> str:
        stream = self.engine.stream(chat(rng.choice(QUESTIONS), max_tokens=64))
        for i, _ in enumerate(stream):
            if i >= rng.randint(0, 3):
                break
        del stream  # the generator's handle cancels its request when collected
        if rng.random() < 0.3:
            gc.collect()
        return "abandoned"

    def timeout(self, rng: random.Random, ticket: int) -> str:
        request = chat(long_prompt(rng), max_tokens=200, timeout=rng.uniform(0.01, 0.3))
        self.engine.generate(request)
        return "ok"

    def burst(self, rng: random.Random, ticket: int) -> str:
        """More requests at once than the queue holds: some are refused as overloaded."""
        handles = []
        refused = 0
        for _ in range(self.engine.config.max_queued + self.engine.config.n_seq_max + 4):
            try:
                handles.append(self.engine.submit(chat(rng.choice(QUESTIONS), max_tokens=4)))
            except EngineOverloadedError:
                refused += 1
        for handle in handles:
            handle.result()
        return "ok+overloaded" if refused else "ok"

    # The async kinds.

    async def achat(self, rng: random.Random, ticket: int) -> str:
        await self.engine.agenerate(chat(rng.choice(QUESTIONS)))
        return "ok"

    async def astream(self, rng: random.Random, ticket: int) -> str:
        async for _ in self.engine.astream(chat(rng.choice(QUESTIONS))):
            pass
        return "ok"

    async def aembed(self, rng: random.Random, ticket: int) -> str:
        await self.engine.aembed([rng.choice(QUESTIONS)])
        return "ok"

    async def atool_call(self, rng: random.Random, ticket: int) -> str:
        request = chat("What is the weather in Rome?", max_tokens=48)
        await client.agenerate(self.engine, client.tool_plan(self.engine, request, [WEATHER]))
        return "ok"

    async def atask_cancelled(self, rng: random.Random, ticket: int) -> str:
        task = asyncio.ensure_future(
            self.engine.agenerate(chat(rng.choice(QUESTIONS), max_tokens=64))
        )
        await asyncio.sleep(rng.uniform(0.0, 0.5))
        task.cancel()
        try:
            await task
        except asyncio.CancelledError:
            return "task-cancelled"
        return "ok"

    async def aabandon_stream(self, rng: random.Random, ticket: int) -> str:
        stream = self.engine.astream(chat(rng.choice(QUESTIONS), max_tokens=64))
        async for _ in stream:
            break
        await stream.aclose()
        return "abandoned"


SYNC_KINDS: dict[str, int] = {  # kind -> weight
    "chat": 6,
    "stream": 5,
    "completion": 3,
    "tool_call": 2,
    "structured": 2,
    "embed": 3,
    "image": 2,
    "cancel_mid_prompt": 2,
    "cancel_mid_stream": 2,
    "abandon_stream": 2,
    "timeout": 2,
    "burst": 1,
}
ASYNC_KINDS: dict[str, int] = {
    "achat": 4,
    "astream": 4,
    "aembed": 2,
    "atool_call": 1,
    "atask_cancelled": 2,
    "aabandon_stream": 2,
}


def run_one(workload: Workload, kind: str, rng: random.Random) -> None:
    ticket = workload.ledger.start(kind)
    try:
        outcome = getattr(workload, kind)(rng, ticket)
    except Exception as error:
        workload.ledger.fail(ticket, error)
    else:
        workload.ledger.end(ticket, outcome)


async def arun_one(workload: Workload, kind: str, rng: random.Random) -> None:
    ticket = workload.ledger.start(kind)
    try:
        outcome = await getattr(workload, kind)(rng, ticket)
    except Exception as error:
        workload.ledger.fail(ticket, error)
    else:
        workload.ledger.end(ticket, outcome)


def pick(rng: random.Random, kinds: dict[str, int]) -> str:
    return rng.choices(list(kinds), weights=list(kinds.values()))[0]


# ---- the sampler ------------------------------------------------------------------------


def rss_mb() -> float:
    with open("/proc/self/statm") as statm:
        return int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20


def n_fds() -> int:
    return len(os.listdir("/proc/self/fd"))


def n_threads() -> int:
    """Native threads of the process (Python's and llama.cpp's)."""
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith("Threads:"):
                return int(line.split()[1])
    return threading.active_count()


@dataclass
class Sample:
    t: float
    rss_mb: float
    fds: int
    threads: int
    kv_cells: int
    running: int
    waiting: int


def sample(engine: Engine, t0: float) -> Sample:
    stats = engine.stats()
    return Sample(
        t=round(time.monotonic() - t0, 1),
        rss_mb=round(rss_mb(), 1),
        fds=n_fds(),
        threads=n_threads(),
        kv_cells=sum(slot.kv_cells for slot in stats.slots),
        running=stats.running,
        waiting=stats.waiting,
    )


# ---- the run ----------------------------------------------------------------------------


def fixed_texts(engine: Engine) -> list[str]:
    """Each fixed prompt alone on a fresh cache, greedy."""
    texts = []
    for prompt in FIXED_PROMPTS:
        engine.clear_cache()
        texts.append(engine.generate(chat(prompt, max_tokens=24, sampling=GREEDY)).text)
    return texts


def wait_idle(engine: Engine, timeout: float = 60) -> bool:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        stats = engine.stats()
        if stats.running == 0 and stats.waiting == 0:
            return True
        time.sleep(0.05)
    return False


def settle(measure: Callable[[], int], target: int, timeout: float = 10) -> int:
    """``measure`` once it is at most ``target`` (threads and fds wind down a moment late)."""
    end = time.monotonic() + timeout
    value = measure()
    while value > target and time.monotonic() < end:
        time.sleep(0.1)
        gc.collect()
        value = measure()
    return value


MODEL_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"
# The engine under the load (written to the results with the load's own settings).
ENGINE_SETTINGS: dict[str, Any] = {
    "n_seq_max": 4,
    "n_ctx_per_seq": 1024,
    "max_queued": 8,
    "embedding_n_seq_max": 8,
}


def soak(
    minutes: float, threads: int, tasks: int, seed: int, rss_bound_mb: float
) -> dict[str, Any]:
    model = models_dir() / MODEL_FILE
    config = EngineConfig(
        model=str(model), mmproj=str(cached_tiny_projector("mlp", 576)), **ENGINE_SETTINGS
    )
    ledger = Ledger()
    t0 = time.monotonic()
    samples: list[Sample] = []
    with Engine(config) as engine:
        workload = Workload(engine, ledger)
        rng = random.Random(seed)
        start_texts = fixed_texts(engine)
        # Warm-up: every kind once (lazy contexts, projector, grammar caches), then a share of
        # the run, after which RSS, threads and fds are the baseline.
        for kind in SYNC_KINDS:
            run_one(workload, kind, rng)
        # Threads and fds are compared with this moment, before the soak's own threads start.
        before = sample(engine, t0)
        samples.append(before)
        stop = threading.Event()
        duration = minutes * 60
        warmup_s = min(60.0, duration * 0.25)

        def sync_worker(index: int) -> None:
            local = random.Random(seed * 1000 + index)
            while not stop.is_set():
                run_one(workload, pick(local, SYNC_KINDS), local)

        async def async_main() -> None:
            async def task_worker(index: int) -> None:
                local = random.Random(seed * 2000 + index)
                while not stop.is_set():
                    await arun_one(workload, pick(local, ASYNC_KINDS), local)

            await asyncio.gather(*(task_worker(i) for i in range(tasks)))

        workers = [
            threading.Thread(target=sync_worker, args=(i,), name=f"soak-{i}")
            for i in range(threads)
        ]
        workers.append(threading.Thread(target=asyncio.run, args=(async_main(),), name="soak-aio"))
        for worker in workers:
            worker.start()
        began = time.monotonic()
        baseline: Sample | None = None
        while time.monotonic() - began < duration:
            time.sleep(1.0)
            samples.append(sample(engine, t0))
            if baseline is None and time.monotonic() - began >= warmup_s:
                baseline = samples[-1]
        stop.set()
        for worker in workers:
            worker.join()
        gc.collect()
        idle = wait_idle(engine)
        busy_slots = sum(slot.busy for slot in engine.stats().slots)
        engine.clear_cache()
        end_stats = engine.stats()
        kv_end = sum(slot.kv_cells for slot in end_stats.slots)
        end_texts = fixed_texts(engine)
        engine.clear_cache()
        final = sample(engine, t0)
        assert baseline is not None
        threads_end = settle(n_threads, before.threads)
        fds_end = settle(n_fds, before.fds)
        final.threads, final.fds = threads_end, fds_end
        samples.append(final)

    total = sum(ledger.outcomes.values())
    checks = {
        "every request ended once": not ledger.open and not ledger.double_ends,
        "only typed errors": not ledger.untyped,
        "idle at the end": idle and busy_slots == 0,
        "no KV cells in use after clear_cache": kv_end == 0,
        f"RSS growth after warm-up < {rss_bound_mb:g} MB": final.rss_mb - baseline.rss_mb
        < rss_bound_mb,
        "no thread leak": threads_end <= before.threads,
        "no fd leak": fds_end <= before.fds,
        "fixed greedy prompts unchanged": start_texts == end_texts,
    }
    return {
        "benchmark": "soak",
        "minutes": minutes,
        "workers": {"threads": threads, "tasks": tasks},
        "seed": seed,
        "requests": total,
        "outcomes": {
            f"{kind}/{outcome}": n for (kind, outcome), n in sorted(ledger.outcomes.items())
        },
        "never_ended": sorted(ledger.open.values()),
        "double_ends": ledger.double_ends,
        "untyped": ledger.untyped[:20],
        "rss_mb": {
            "start": samples[0].rss_mb,
            "after_warmup": baseline.rss_mb,
            "end": final.rss_mb,
        },
        "rss_peak_mb": max(s.rss_mb for s in samples),
        "threads": {
            "before": before.threads,
            "peak": max(s.threads for s in samples),
            "end": threads_end,
        },
        "fds": {"before": before.fds, "peak": max(s.fds for s in samples), "end": fds_end},
        "kv_cells_peak": max(s.kv_cells for s in samples),
        "kv_cells_end": kv_end,
        "queue_depth_peak": max(s.waiting for s in samples),
        "fixed_texts": {"start": start_texts, "end": end_texts},
        "checks": checks,
        "samples": [vars(s) for s in samples],
    }


def print_summary(report: dict[str, Any]) -> None:
    print(
        f"\nsoak: {report['minutes']:g} min, {report['workers']['threads']} threads + "
        f"{report['workers']['tasks']} asyncio tasks, {report['requests']} requests"
    )
    by_kind: dict[str, Counter[str]] = {}
    for key, n in report["outcomes"].items():
        kind, outcome = key.split("/", 1)
        by_kind.setdefault(kind, Counter())[outcome] += n
    print(f"\n{'kind':<18} {'total':>6}  outcomes")
    for kind, outcomes in sorted(by_kind.items()):
        detail = ", ".join(f"{o}={n}" for o, n in outcomes.most_common())
        print(f"{kind:<18} {sum(outcomes.values()):>6}  {detail}")
    rss = report["rss_mb"]
    print(
        f"\nRSS MB: start {rss['start']}, after warm-up {rss['after_warmup']}, end {rss['end']}, "
        f"peak {report['rss_peak_mb']}"
    )
    for what in ("threads", "fds"):
        counts = report[what]
        print(
            f"{what}: before the load {counts['before']}, peak {counts['peak']}, "
            f"end {counts['end']}"
        )
    print(
        f"KV cells: peak {report['kv_cells_peak']}, end {report['kv_cells_end']}; "
        f"queue depth peak {report['queue_depth_peak']}"
    )
    print("\ncheck" + " " * 41 + "result")
    for name, ok in report["checks"].items():
        print(f"{name:<46}{'PASS' if ok else 'FAIL'}")
    if report["untyped"]:
        print("untyped errors:", *report["untyped"], sep="\n  ")
    if report["never_ended"] or report["double_ends"]:
        print("never ended:", report["never_ended"], "ended twice:", report["double_ends"])
    if report["fixed_texts"]["start"] != report["fixed_texts"]["end"]:
        print("fixed texts:", json.dumps(report["fixed_texts"], indent=1))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--minutes", type=float, default=2.0)
    parser.add_argument("--threads", type=int, default=3)
    parser.add_argument("--tasks", type=int, default=4)
    parser.add_argument("--seed", type=int, default=17)
    parser.add_argument("--rss-bound-mb", type=float, default=64.0)
    parser.add_argument("--json", type=Path, help="write the report (with samples) here")
    args = parser.parse_args()
    report = soak(args.minutes, args.threads, args.tasks, args.seed, args.rss_bound_mb)
    print_summary(report)
    settings = {
        "model": MODEL_FILE,
        "mmproj": "the tests' tiny random-weight projector (mlp, 576)",
        **ENGINE_SETTINGS,
        "minutes": args.minutes,
        "threads": args.threads,
        "tasks": args.tasks,
        "seed": args.seed,
        "rss_bound_mb": args.rss_bound_mb,
    }
    # With the machine and commit measured (results.write), as every results file.
    results.write(
        args.json, "soak", settings, **{k: v for k, v in report.items() if k != "benchmark"}
    )
    return 0 if all(report["checks"].values()) else 1


if __name__ == "__main__":
    sys.exit(main())
