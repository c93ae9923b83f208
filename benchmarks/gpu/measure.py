"""The GPU check's measurements, on the models ``random_models.py`` wrote, every layer
offloaded (``--gpu-layers 0`` on the CPU path). Run by ``gpu_check.py`` in the bundle's venv.

For each model: our engine against llama-server (same llama.cpp build, ``-ngl`` all) at each
concurrency of ``--levels``, greedy, every request ``--max-tokens`` long (``ignore_eos``), sides
taking turns; with the engine's decode steps counted (``Engine.stats().steps``), so the wall time
per step, the engine's whole cost of one batched step, stands beside the server's time per
generated token. On the first model also: embeddings (``Engine.embed`` against llama-server
``--embeddings`` given every text in one request) and the shared-prefix fan-out of
``shared_prefix.py``, cold and warm (ours with and without in-flight sharing, and
llama-server). Each writes a ``<prefix>_*.json`` results file with the machine and the device's
name.
"""

from __future__ import annotations

import argparse
import asyncio
import http.client
import json
import os
import statistics
import sys
import time
from dataclasses import asdict, replace
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE.parent), str(HERE.parents[1])]

import llama_cpp  # noqa: E402
import llama_server  # noqa: E402
import results  # noqa: E402
import shared_prefix  # noqa: E402
from embeddings import texts  # noqa: E402
from throughput import QUESTIONS, WARMUP, BatchResult, alternate, our_request  # noqa: E402

from llamacpp_integrations.engine import Engine, EngineConfig  # noqa: E402
from llamacpp_integrations.engine.native.runner import cpu_advertises_amx  # noqa: E402
from tests.live.llama_servers import LlamaServerProcess, free_port  # noqa: E402


def prompts(n: int) -> list[str]:
    """``n`` distinct questions (the throughput benchmark's sixteen, numbered past them)."""
    return [
        QUESTIONS[i % len(QUESTIONS)] + (f" ({i})" if i >= len(QUESTIONS) else "") for i in range(n)
    ]


async def _ours(engine: Engine, questions: list[str], max_tokens: int) -> BatchResult:
    async def one(question: str) -> tuple[int, float, float, float]:
        start = time.perf_counter()
        first = float("nan")
        tokens = 0
        async for chunk in engine.astream(our_request(question, max_tokens)):
            if chunk.text and first != first:
                first = time.perf_counter()
            if chunk.usage is not None:
                tokens = chunk.usage.completion_tokens
        return tokens, start, first, time.perf_counter()

    t0 = time.perf_counter()
    runs = await asyncio.gather(*(one(q) for q in questions))
    ttfts = [first - t0 for _, _, first, _ in runs]
    return BatchResult(
        tokens=sum(r[0] for r in runs),
        wall_s=max(r[3] for r in runs) - t0,
        mean_ttft_s=statistics.fmean(ttfts),
        max_ttft_s=max(ttfts),
        first_ttft_s=runs[0][2] - runs[0][1],
    )


class Run:
    """What every measurement of one check shares: the server binary, the offload, the
    device, where results go."""

    def __init__(self, args: argparse.Namespace) -> None:
        self.server = Path(args.server)
        self.gpu_layers: int = args.gpu_layers
        self.threads = os.cpu_count() or 1
        self.device: dict[str, Any] = json.loads(args.device)
        self.prefix: str = args.prefix
        self.out = Path(args.results)
        self.repeat: int = args.repeat

    @property
    def offload(self) -> tuple[str, ...]:
        flags = ("-ngl", str(self.gpu_layers if self.gpu_layers >= 0 else 999))
        # On a CPU, as our engine: flash attention off, no weight repacking where AMX is.
        cpu = ("-fa", "off", *(("--no-repack",) if cpu_advertises_amx() else ()))
        return flags + (("-fa", "auto") if self.gpu_layers else cpu)

    def config(self, model: Path, **fields: Any) -> EngineConfig:
        return EngineConfig(
            model=str(model), n_gpu_layers=self.gpu_layers, n_threads=self.threads,
            realign_when_idle=False, **fields,
        )  # fmt: skip

    def process(self, model: Path, slots: int | None, ctx: int, *extra: str) -> LlamaServerProcess:
        # A free port each time: a server left on a fixed one would answer in this one's place.
        llama_server.PORT = free_port()
        return LlamaServerProcess(
            self.server, model, port=llama_server.PORT, threads=self.threads, slots=slots,
            n_ctx_per_slot=ctx, extra=(*self.offload, *extra),
        )  # fmt: skip

    def write(self, name: str, settings: dict[str, Any], **data: Any) -> None:
        path = self.out / f"{self.prefix}_{name}.json"
        settings = {"gpu_layers": self.gpu_layers, "threads": self.threads, **settings}
        results.write(path, f"{self.prefix}_{name}", settings, device=self.device, **data)
        print(f"measure: wrote {path}", flush=True)


def throughput(run: Run, model: Path, size: str, levels: list[int], max_tokens: int) -> None:
    slots, ctx = max(levels), 1024
    config = run.config(model, n_seq_max=slots, n_ctx_per_seq=ctx)
    rows: list[dict[str, Any]] = []
    with Engine(config) as engine:
        server = run.process(model, slots, ctx, "-cb", "--no-kv-unified").start(timeout=600)
        try:
            engine.generate(our_request(WARMUP, 8))
            llama_server.server_request(WARMUP, 8, time.perf_counter())
            for n in levels:
                steps: list[int] = []

                def ours(n: int = n, steps: list[int] = steps) -> BatchResult:
                    before = engine.stats().steps
                    result = asyncio.run(_ours(engine, prompts(n), max_tokens))
                    steps.append(engine.stats().steps - before)
                    return result

                o, s = alternate(
                    run.repeat, ours, lambda n=n: llama_server.server_batch(prompts(n), max_tokens)
                )
                step = statistics.median(steps)
                row = {
                    "concurrent": n, "ours": asdict(o), "server": asdict(s),
                    "ours_steps": step, "ours_ms_per_step": o.wall_s / step * 1000,
                    "server_ms_per_token": s.wall_s / max_tokens * 1000,
                }  # fmt: skip
                rows.append(row)
                print(
                    f"measure: {size} x{n}: ours {o.tokens / o.wall_s:.0f} tok/s "
                    f"({row['ours_ms_per_step']:.2f} ms a step), llama-server "
                    f"{s.tokens / s.wall_s:.0f} tok/s "
                    f"({row['server_ms_per_token']:.2f} ms a token)",
                    flush=True,
                )
        finally:
            server.close()
    run.write(
        f"throughput_{size}",
        {
            "model": model.name, "size": size, "max_tokens": max_tokens, "repeat": run.repeat,
            "ours": {"n_seq_max": slots, "n_ctx_per_seq": ctx, "rest": "EngineConfig defaults"},
            "llama_server_flags": results.server_flags(server.command),
        },
        levels=rows,
    )  # fmt: skip


def embed_server(questions: list[str]) -> list[list[float]]:
    body = json.dumps({"input": questions, "encoding_format": "float"})
    connection = http.client.HTTPConnection("127.0.0.1", llama_server.PORT, timeout=600)
    try:
        connection.request("POST", "/v1/embeddings", body, {"Content-Type": "application/json"})
        response = connection.getresponse()
        answer = json.loads(response.read())
        if response.status != 200:
            raise RuntimeError(f"llama-server answered {response.status}: {answer}")
        return [item["embedding"] for item in answer["data"]]
    finally:
        connection.close()


def _timed(embed: Any, batch: list[str], repeat: int) -> dict[str, float]:
    embed(batch[:4])  # warm
    walls = []
    vectors = 0
    for _ in range(repeat):
        start = time.perf_counter()
        vectors = len(embed(batch))
        walls.append(time.perf_counter() - start)
    wall = statistics.median(walls)
    return {"wall_s": wall, "texts_per_s": len(batch) / wall, "vectors": vectors}


def embeddings(run: Run, model: Path, size: str, n: int) -> None:
    batch = texts(n)
    with Engine(run.config(model, n_seq_max=1, embedding_pooling="mean")) as engine:
        ours = _timed(engine.embed, batch, run.repeat)
    server = run.process(model, 4, 512, "--embeddings", "--pooling", "mean").start(timeout=600)
    try:
        peer = _timed(embed_server, batch, run.repeat)
    finally:
        server.close()
    print(
        f"measure: embeddings {size}: ours {ours['texts_per_s']:.0f} texts/s, "
        f"llama-server {peer['texts_per_s']:.0f} texts/s",
        flush=True,
    )
    run.write(
        f"embeddings_{size}",
        {"model": model.name, "size": size, "texts": n, "repeat": run.repeat,
         "ours": {"embedding_pooling": "mean"},
         "llama_server_flags": results.server_flags(server.command)},
        ours=ours, server=peer,
    )  # fmt: skip


def fan_out_cases(sides: dict[str, Any], rounds: int) -> dict[str, dict[str, dict[str, float]]]:
    """``shared_prefix.py``'s fan-out: sixteen chats over one system prompt at once, cold, then
    the same again warm; each side in turn, a new session each round (the median kept)."""
    seen: dict[str, dict[str, list[dict[str, float]]]] = {
        name: {"cold": [], "warm": []} for name in sides
    }
    for r in range(rounds):
        for name, one in sides.items():
            chats = shared_prefix.fan_out(f"{r}-{name}")
            seen[name]["cold"].append(shared_prefix.at_once(one, chats))
            seen[name]["warm"].append(shared_prefix.at_once(one, chats))
    return {
        name: {
            case: {key: statistics.median(run[key] for run in runs) for key in runs[0]}
            for case, runs in cases.items()
        }
        for name, cases in seen.items()
    }


def fan_out(run: Run, model: Path, size: str) -> None:
    base = run.config(model, n_seq_max=shared_prefix.N, n_ctx_per_seq=shared_prefix.N_CTX)
    server = run.process(model, shared_prefix.N, shared_prefix.N_CTX).start(timeout=600)
    try:
        with (
            Engine(base) as sharing,
            Engine(replace(base, prefix_sharing=False)) as plain,
        ):
            sides = {
                "ours": shared_prefix.ours(sharing),
                "ours, sharing off": shared_prefix.ours(plain),
                "llama-server": shared_prefix.server(server.port),
            }
            figures = fan_out_cases(sides, run.repeat)
    finally:
        server.close()
    cold = {name: cases["cold"]["wall_s"] for name, cases in figures.items()}
    print(f"measure: fan-out {size}, cold walls: {cold}", flush=True)
    run.write(
        f"shared_prefix_{size}",
        {"model": model.name, "size": size, "n": shared_prefix.N,
         "n_ctx_per_seq": shared_prefix.N_CTX,
         "max_tokens": shared_prefix.MAX_TOKENS, "rounds": run.repeat,
         "ours": {"n_seq_max": shared_prefix.N, "rest": "EngineConfig defaults"},
         "ours, sharing off": {"prefix_sharing": False},
         "llama_server_flags": results.server_flags(server.command)},
        figures=figures,
    )  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--server", required=True, help="the llama-server built by the check")
    parser.add_argument("--models", type=Path, required=True, help="random_models.py's folder")
    parser.add_argument("--sizes", default="0.5b,1.5b,3b")
    parser.add_argument("--levels", default="1,16,64")
    parser.add_argument("--max-tokens", type=int, default=128)
    parser.add_argument("--embed-texts", type=int, default=1024)
    parser.add_argument("--repeat", type=int, default=1)
    parser.add_argument("--gpu-layers", type=int, default=-1, help="-1: all; 0: the CPU path")
    parser.add_argument("--device", default="{}", help="the device, as JSON")
    parser.add_argument("--prefix", default="gpu", help="results files' name prefix")
    parser.add_argument("--results", required=True, help="folder for the results files")
    parser.add_argument("--commit", default="unknown", help="the commit the bundle was made at")
    args = parser.parse_args()
    results.commit = lambda: args.commit  # no checkout here: the bundle names its commit
    if args.gpu_layers and not llama_cpp.llama_supports_gpu_offload():
        sys.exit("measure: this llama-cpp-python build cannot offload (built without CUDA?)")
    run = Run(args)
    sizes = args.sizes.split(",")
    levels = [int(level) for level in args.levels.split(",")]
    for size in sizes:
        throughput(
            run, args.models / f"random-llama-{size}.f16.gguf", size, levels, args.max_tokens
        )
    first = args.models / f"random-llama-{sizes[0]}.f16.gguf"
    embeddings(run, first, sizes[0], args.embed_texts)
    fan_out(run, first, sizes[0])


if __name__ == "__main__":
    main()
