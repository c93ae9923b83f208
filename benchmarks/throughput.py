"""Throughput of our batching engine against plain llama-cpp-python, in one process.

What is compared, on the same GGUF, the same thread count and the same chat prompts:

* **ours** - ``Engine`` (continuous batching, ``n_seq_max=16``) serving N requests started at
  once with asyncio, for N in ``--levels``. Every request is greedy and runs to exactly
  ``--max-tokens`` tokens (``ignore_eos=True``).
* **peer** - ``llama_cpp.Llama`` (one sequence) serving the same N requests one after another,
  which is what an application gets from it without a server. End-of-generation tokens are banned
  with ``logit_bias`` so that it also generates ``--max-tokens`` tokens.

Per level: aggregate generated tokens/s (completion tokens / wall time from the batch start to the
last finish) and time to first token (TTFT) counted from the batch start, since queued requests
wait too. A single-stream comparison (one request, longer answer) then shows the per-token decode
speed, where batching cannot help. The machine is small and noisy: ``--repeat K`` reports the
median of K runs, ours and the peer alternating. Nothing is asserted; this is a report.

Both sides reuse cached prompt prefixes (the chat template's system prompt is shared): ours keeps
one cache per sequence slot, ``Llama`` the previous prompt. Prompts are ~40 tokens, so this moves
TTFT by tens of milliseconds, not the generation rates.

Weight repacking: ggml's AMX kernels crash with SIGSEGV on multi-token batches on some virtual
machines, so the engine turns ggml's "extra buffer types" off on CPUs that advertise AMX. The peer
gets the same setting (see ``match_weight_repacking``) so both run the same matmul kernels.

Run from the repository root, with ``LLAMACPP_INTEGRATIONS_MODELS`` pointing at the models folder::

    python benchmarks/throughput.py [--model smollm2-135m] [--max-tokens 128] [--levels 1,4,8,16]
                                    [--repeat 1] [--quick]
"""

from __future__ import annotations

import argparse
import asyncio
import multiprocessing
import os
import platform
import statistics
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import asdict, dataclass, fields
from functools import partial
from importlib.metadata import version
from multiprocessing.connection import Connection
from typing import Any, TypeVar, cast

import llama_cpp
import results

from llamacpp_integrations.engine import (
    ChatMessage,
    ChatRequest,
    Engine,
    EngineConfig,
    SamplingParams,
)
from llamacpp_integrations.engine.native.runner import cpu_advertises_amx

QUESTIONS = [
    "What is the capital of France?",
    "How do plants make their food?",
    "Why is the sky blue?",
    "Explain what a prime number is.",
    "What causes the seasons on Earth?",
    "How does a bicycle stay upright?",
    "What is the difference between weather and climate?",
    "Give me three tips for learning a new language.",
    "How do vaccines work?",
    "What is photosynthesis?",
    "Why do cats purr?",
    "How does a refrigerator keep food cold?",
    "What is the water cycle?",
    "Describe how a rainbow forms.",
    "What are black holes?",
    "How do bees make honey?",
]
WARMUP = "Say hello."
EOG_BIAS = -1000.0  # "minus infinity" for the peer's end-of-generation tokens
R = TypeVar("R", "BatchResult", "StreamResult")


@dataclass(frozen=True)
class BatchResult:
    """One run of N requests. Times in seconds; TTFTs counted from the batch start."""

    tokens: int
    wall_s: float
    mean_ttft_s: float
    max_ttft_s: float
    first_ttft_s: float  # of the first request, from its own start

    @property
    def tok_s(self) -> float:
        return self.tokens / self.wall_s


@dataclass(frozen=True)
class StreamResult:
    """One long single request: TTFT, first-to-last token time, and total time."""

    tokens: int
    ttft_s: float
    decode_s: float
    total_s: float

    @property
    def decode_tok_s(self) -> float:
        return (self.tokens - 1) / self.decode_s if self.decode_s > 0 else float("nan")

    @property
    def e2e_tok_s(self) -> float:
        return self.tokens / self.total_s


def median_of(results: Sequence[R]) -> R:
    """Field-wise median of repeated runs."""
    kind = type(results[0])
    return kind(*(statistics.median(getattr(r, f.name) for r in results) for f in fields(kind)))


def messages(question: str) -> list[dict[str, str]]:
    return [{"role": "user", "content": question}]


# ---- ours -----------------------------------------------------------------------------------


def our_request(question: str, max_tokens: int) -> ChatRequest:
    return ChatRequest(
        messages=[ChatMessage(role="user", content=question)],
        sampling=SamplingParams(temperature=0),
        max_tokens=max_tokens,
        ignore_eos=True,
    )


async def ours_batch(engine: Engine, n: int, max_tokens: int) -> BatchResult:
    """N requests started together; each coroutine records its first token and its end."""

    async def one(question: str) -> tuple[int, float, float, float]:
        start = time.perf_counter()
        first: float | None = None
        tokens = 0
        async for chunk in engine.astream(our_request(question, max_tokens)):
            if chunk.text and first is None:
                first = time.perf_counter()
            if chunk.usage is not None:
                tokens = chunk.usage.completion_tokens
        assert first is not None, "no text was generated"
        return tokens, start, first, time.perf_counter()

    t0 = time.perf_counter()
    runs = await asyncio.gather(*(one(q) for q in QUESTIONS[:n]))
    ttfts = [first - t0 for _, _, first, _ in runs]
    return BatchResult(
        tokens=sum(r[0] for r in runs),
        wall_s=max(r[3] for r in runs) - t0,
        mean_ttft_s=statistics.fmean(ttfts),
        max_ttft_s=max(ttfts),
        first_ttft_s=runs[0][2] - runs[0][1],
    )


def ours_batch_sync(engine: Engine, n: int, max_tokens: int) -> BatchResult:
    return asyncio.run(ours_batch(engine, n, max_tokens))


def ours_stream(engine: Engine, max_tokens: int) -> StreamResult:
    start = time.perf_counter()
    times: list[float] = []
    tokens = 0
    for chunk in engine.stream(our_request(QUESTIONS[0], max_tokens)):
        if chunk.text:
            times.append(time.perf_counter())
        if chunk.usage is not None:
            tokens = chunk.usage.completion_tokens
    end = time.perf_counter()
    return StreamResult(tokens, times[0] - start, times[-1] - times[0], end - start)


# ---- peer -----------------------------------------------------------------------------------


def match_weight_repacking() -> bool:
    """Turn ggml's extra buffer types (AMX, repacked weights) off for ``Llama`` where ours does.

    ``Llama`` builds its model params with ``llama_model_default_params``, so every module
    attribute holding that function is replaced by a wrapper that sets ``use_extra_bufts=False``.
    Returns whether repacking stays on.
    """
    if not cpu_advertises_amx():  # the engine's own rule (weight_repacking=None)
        return True
    # ggml's AMX kernels SIGSEGV on multi-token batches on such machines; ours turns them off too.
    original = llama_cpp.llama_cpp.llama_model_default_params

    def no_extra_bufts() -> Any:
        params = original()
        params.use_extra_bufts = False
        return params

    for name, module in list(sys.modules.items()):
        if name.startswith("llama_cpp") and module is not None:
            for attr, value in list(vars(module).items()):
                if value is original:
                    setattr(module, attr, no_extra_bufts)
    return False


def eog_bias(llm: llama_cpp.Llama) -> dict[int, float]:
    """Ban every end-of-generation token: ``Llama`` stops on any of them, not just EOS."""
    vocab = llm._model.vocab
    eog = [t for t in range(llm.n_vocab()) if llama_cpp.llama_vocab_is_eog(vocab, t)]
    return dict.fromkeys(eog, EOG_BIAS)


class Peer:
    def __init__(self, path: str, threads: int) -> None:
        self.llm = llama_cpp.Llama(
            model_path=path, n_ctx=1024, n_threads=threads, n_threads_batch=threads, verbose=False
        )
        self.bias = eog_bias(self.llm)
        self.short: list[str] = []  # requests that stopped before max_tokens

    def run(self, question: str, max_tokens: int) -> tuple[list[float], int]:
        """Times of the streamed content deltas, and how many tokens were generated."""
        stream = cast(
            Iterator[dict[str, Any]],
            self.llm.create_chat_completion(
                messages(question),  # type: ignore[arg-type]
                max_tokens=max_tokens,
                temperature=0,
                logit_bias=self.bias,
                stream=True,
            ),
        )
        times: list[float] = []
        text: list[str] = []
        finish = None
        for chunk in stream:
            choice = chunk["choices"][0]
            content = choice["delta"].get("content")
            if content:
                times.append(time.perf_counter())
                text.append(content)
            finish = choice["finish_reason"] or finish
        if finish == "length":  # stopped by max_tokens: exactly max_tokens were generated
            return times, max_tokens
        n = len(self.llm.tokenize("".join(text).encode(), add_bos=False))
        self.short.append(f"{question!r}: finish_reason={finish}, ~{n} tokens")
        return times, n

    def batch(self, n: int, max_tokens: int) -> BatchResult:
        """The same N requests served in order; all of them count as submitted at ``t0``."""
        t0 = time.perf_counter()
        ttfts: list[float] = []
        tokens = 0
        for question in QUESTIONS[:n]:
            times, generated = self.run(question, max_tokens)
            ttfts.append(times[0] - t0)
            tokens += generated
        return BatchResult(
            tokens, time.perf_counter() - t0, statistics.fmean(ttfts), max(ttfts), ttfts[0]
        )

    def stream(self, max_tokens: int) -> StreamResult:
        start = time.perf_counter()
        times, tokens = self.run(QUESTIONS[0], max_tokens)
        end = time.perf_counter()
        return StreamResult(tokens, times[0] - start, times[-1] - times[0], end - start)


# ---- report ---------------------------------------------------------------------------------


def _peer_process(conn: Connection, path: str, threads: int) -> None:
    match_weight_repacking()
    peer = Peer(path, threads)
    while (message := conn.recv()) is not None:
        name, args = message
        conn.send(peer.short if name == "short" else getattr(peer, name)(*args))


class RemotePeer:
    """The peer in a process of its own.

    llama.cpp's CPU backend runs each graph on an OpenMP thread team owned by the calling thread.
    Our engine decodes on its worker thread and ``Llama`` on the main thread, so in one process
    there would be two teams whose idle threads spin while the other works: on 2 cores that was
    measured to cut both sides to about a third of their speed. Separate processes, driven one at
    a time, give each side the machine to itself, as in real use.
    """

    def __init__(self, path: str, threads: int) -> None:
        context = multiprocessing.get_context("spawn")
        self._conn, child = context.Pipe()
        self._process = context.Process(
            target=_peer_process, args=(child, path, threads), daemon=True
        )
        self._process.start()

    def _call(self, name: str, *args: object) -> Any:
        self._conn.send((name, args))
        return self._conn.recv()

    def run(self, question: str, max_tokens: int) -> Any:
        return self._call("run", question, max_tokens)

    def batch(self, n: int, max_tokens: int) -> BatchResult:
        result: BatchResult = self._call("batch", n, max_tokens)
        return result

    def stream(self, max_tokens: int) -> StreamResult:
        result: StreamResult = self._call("stream", max_tokens)
        return result

    @property
    def short(self) -> list[str]:
        result: list[str] = self._call("short")
        return result

    def close(self) -> None:
        self._conn.send(None)
        self._process.join()


def alternate(k: int, ours: Callable[[], R], peer: Callable[[], R]) -> tuple[R, R]:
    """Run ours then the peer, k times over; the median result of each."""
    ours_runs: list[R] = []
    peer_runs: list[R] = []
    for _ in range(k):
        ours_runs.append(ours())
        peer_runs.append(peer())
    return median_of(ours_runs), median_of(peer_runs)


def ms(seconds: float) -> str:
    return f"{seconds * 1000:.0f} ms"


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default="smollm2-135m")
    parser.add_argument("--max-tokens", type=int, default=128)
    parser.add_argument("--single-tokens", type=int, default=256, help="single-stream length")
    parser.add_argument("--levels", default="1,4,8,16")
    parser.add_argument("--repeat", type=int, default=1, help="median of K runs")
    parser.add_argument("--quick", action="store_true", help="levels 1,4; 32 and 64 tokens")
    parser.add_argument("--json", default=None, help="also write the results to this file")
    args = parser.parse_args(argv)
    levels = [1, 4] if args.quick else [int(x) for x in args.levels.split(",")]
    max_tokens, single_tokens = (32, 64) if args.quick else (args.max_tokens, args.single_tokens)
    if max(levels) > len(QUESTIONS):
        parser.error(f"at most {len(QUESTIONS)} concurrent requests (one per distinct question)")
    threads = os.cpu_count() or 1

    repacking = match_weight_repacking()  # the peer process applies the same rule
    # Not realigning answers while idle: the peer's turn would share the CPU with that work.
    engine = Engine(
        EngineConfig(model=args.model, n_seq_max=16, n_ctx_per_seq=1024, realign_when_idle=False)
    )
    peer = RemotePeer(engine.info.path, threads)

    print("# Throughput: llamacpp-integrations Engine vs llama-cpp-python Llama\n")
    print(f"- machine: {results.cpu_name()}, {threads} cores, Python {platform.python_version()}")
    print(f"- llama-cpp-python {version('llama-cpp-python')}, {threads} threads for both")
    print(f"- model: {engine.info.path} ({engine.info.size_bytes / 1e6:.0f} MB)")
    print(
        "- ggml weight repacking / extra buffer types (AMX): "
        + ("on for both" if repacking else "OFF for both (CPU advertises AMX; its kernels crash)")
    )
    print(f"- greedy, {max_tokens} tokens per request (EOS ignored / banned), repeat={args.repeat}")
    print("- ours: N requests at once (asyncio); peer: the same N one after another")
    print("- each side in its own process, driven one at a time (see RemotePeer)")
    print("- TTFT from the batch start; peer 1st = the peer's first request alone\n")

    engine.generate(our_request(WARMUP, 8))  # warm-up, both sides, on a prompt not measured
    peer.run(WARMUP, 8)

    print(
        "| level | ours tok/s | peer tok/s | ratio (ours/peer) | ours mean TTFT | ours max TTFT "
        "| peer mean TTFT | peer 1st TTFT | ours wall | peer wall | tokens ours/peer |"
    )
    print("|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    level_rows: list[dict[str, Any]] = []
    for n in levels:
        o, p = alternate(
            args.repeat,
            partial(ours_batch_sync, engine, n, max_tokens),
            partial(peer.batch, n, max_tokens),
        )
        print(
            f"| {n} | {o.tok_s:.1f} | {p.tok_s:.1f} | {o.tok_s / p.tok_s:.2f}x "
            f"| {ms(o.mean_ttft_s)} | {ms(o.max_ttft_s)} | {ms(p.mean_ttft_s)} "
            f"| {ms(p.first_ttft_s)} | {o.wall_s:.2f} s | {p.wall_s:.2f} s "
            f"| {o.tokens}/{p.tokens} |"
        )
        level_rows.append({"concurrent": n, "ours": asdict(o), "peer": asdict(p)})

    so, sp = alternate(
        args.repeat,
        partial(ours_stream, engine, single_tokens),
        partial(peer.stream, single_tokens),
    )
    print(f"\n## Single stream, {single_tokens} tokens (ours generated {so.tokens})\n")
    print("| metric | ours | peer | ratio (ours/peer) |")
    print("|---|---:|---:|---:|")
    rows = [
        ("decode tok/s (first to last token)", so.decode_tok_s, sp.decode_tok_s),
        ("end-to-end tok/s", so.e2e_tok_s, sp.e2e_tok_s),
    ]
    for name, ours, theirs in rows:
        print(f"| {name} | {ours:.1f} | {theirs:.1f} | {ours / theirs:.2f}x |")
    print(f"| TTFT | {ms(so.ttft_s)} | {ms(sp.ttft_s)} | {so.ttft_s / sp.ttft_s:.2f}x |")

    results.write(
        args.json,
        "throughput",
        {
            "model": engine.info.path,
            "threads": threads,
            "max_tokens": max_tokens,
            "single_tokens": single_tokens,
            "repeat": args.repeat,
            "weight_repacking": repacking,
            "peer": f"llama-cpp-python {version('llama-cpp-python')} Llama, one request at a time",
            # The peer's constructor, as run (ours: the engine's settings above, else defaults).
            "peer_settings": {
                "n_ctx": 1024,
                "n_threads": threads,
                "n_threads_batch": threads,
                "rest": "llama_cpp.Llama defaults",
            },
        },
        levels=level_rows,
        single_stream={"ours": asdict(so), "peer": asdict(sp)},
        peer_short=peer.short,
    )
    if peer.short:
        print("\nWARNING: peer requests that stopped before max_tokens (its tok/s is overstated):")
        for line in peer.short:
            print(f"- {line}")
    peer.close()
    engine.close()


if __name__ == "__main__":
    main()
