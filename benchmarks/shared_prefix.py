"""Requests that share a prompt prefix: ours with in-flight sharing, ours without, llama-server.

Fan-out: sixteen chats over one ~1,900-token system prompt, each with its own one-line question,
sent at once to a cold engine (the system prompt starts with a fresh session line each round, so
nothing of it is cached), then the same sixteen again (warm). 32 greedy tokens each. Map: 32 short
documents under one ~900-token instruction, sent at once, as LangChain's ``abatch`` of a map step
sends them. Agents: eight agents at once, each three turns (its whole history each turn) under one
~1,700-token system prompt listing 14 tools as JSON schemas. Unrelated: sixteen short prompts with
nothing in common, to show sharing costs nothing where it cannot help. Memory: each side's resident
memory after one short answer with no settings at all (ours: ``ChatLlamaCpp(model=...)`` in a fresh
process; llama-server: no flags but the model and port).

Sides take turns, one llama.cpp process busy at a time: our engine in this process (sharing on;
sharing on in a unified KV cache, ``kv_unified=True``; sharing off, ``prefix_sharing=False``) and
llama-server in its own process with its defaults except ``-np 16`` and ``-c`` (2,048 tokens a
slot, as ours per sequence: its default context, the model's 8,192 tokens over 16 slots, is too
short for the prompt).
Figures: wall time, mean and P99 time to first token; ratios against llama-server and against
ours without sharing.

    python benchmarks/shared_prefix.py --server .cache/llama-server/build/bin/llama-server
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

import results
from server_chat import stream_chat

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from llamacpp_integrations.engine import (
    ChatMessage,
    ChatRequest,
    Engine,
    EngineConfig,
    SamplingParams,
)
from llamacpp_integrations.models import resolve_model_path
from tests.live.llama_servers import LlamaServerProcess

N = 16
N_CTX = 2048  # per sequence (slot), both sides
MAX_TOKENS = 32
SYSTEM = " ".join(
    f"Rule {i}: a question about topic {i} goes to desk {i % 7}, which opens at {7 + i % 4} and "
    f"closes at {15 + i % 5}; answers cite section {i} and name the duty officer of shift {i % 3}."
    for i in range(42)
)
QUESTIONS = [f"Which desk handles topic {i}, and when does it open?" for i in range(N)]
INSTRUCTION = (
    " ".join(
        f"Step {i}: when the document mentions item {i}, note its colour, its price band "
        f"{i % 5} and whether store {i % 9} stocks it."
        for i in range(30)
    )
    + " Summarise the document below in one sentence following these steps."
)
DOCUMENTS = [
    f"Document {i}: a customer in town {i % 11} bought item {i} in blue, then asked about item "
    f"{i + 3} and store {i % 9}, and returned item {i + 5} because it was {i % 4} days late."
    for i in range(32)
]
UNRELATED = [
    "Why is the sky blue?", "Name three rivers.", "How do bees make honey?",
    "What is a prime number?", "Describe a forest at night.", "How does a bicycle stay upright?",
    "What do whales eat?", "Write a line about the sea.", "Count from one to ten.",
    "What is the opposite of cold?", "Spell banana backwards.", "Name a yellow fruit.",
    "How many legs does a spider have?", "Give a synonym for happy.", "What colour is grass?",
    "Tell me a riddle.",
]  # fmt: skip

AGENTS, TURNS = 8, 3
TOOLS = json.dumps(
    [
        {
            "name": f"tool_{i}",
            "description": f"Looks up record type {i} in archive {i % 4} and returns its fields.",
            "parameters": {
                "type": "object",
                "properties": {
                    "record_id": {"type": "string", "description": f"the id of a type {i} record"},
                    "fields": {"type": "array", "items": {"type": "string"}, "maxItems": i % 5 + 1},
                    "strict": {"type": "boolean", "description": "fail on a missing field"},
                },
                "required": ["record_id"],
            },
        }
        for i in range(14)
    ]
)
TASKS = [f"Find the owner of record R-{100 + a} and the date it was filed." for a in range(AGENTS)]

Chat = list[tuple[str, str]]
# A side answers one chat: the time of its first token after ``start``, and the answer.
One = Callable[[Chat, float], tuple[float, str]]


def fan_out(session: str) -> list[Chat]:
    system = f"Session {session}. {SYSTEM}"
    return [[("system", system), ("user", q)] for q in QUESTIONS]


def map_step(session: str) -> list[Chat]:
    instruction = f"Session {session}. {INSTRUCTION}"
    return [[("system", instruction), ("user", document)] for document in DOCUMENTS]


def rss_mib(pid: int) -> float:
    with open(f"/proc/{pid}/status", encoding="ascii") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return float("nan")


DEFAULT_CHAT = """
import json, sys
from llamacpp_integrations.langchain import ChatLlamaCpp
chat = ChatLlamaCpp(model=sys.argv[1], max_tokens=16, **json.loads(sys.argv[2]))
chat.invoke("Say hello.")
print(open("/proc/self/status").read().split("VmRSS:")[1].split()[0])
"""


def default_memory(model: str, binary: Path | None, threads: int) -> dict[str, float]:
    """Resident MiB after one short answer with no settings (and ours with ``kv_unified``),
    then llama-server's."""
    import subprocess

    memory = {}
    for name, settings in (("ours", "{}"), ("ours, unified", '{"kv_unified": true}')):
        out = subprocess.run(
            [sys.executable, "-c", DEFAULT_CHAT, model, settings],
            capture_output=True,
            text=True,
            check=True,
        )
        memory[name] = int(out.stdout.split()[-1]) / 1024
    if binary is not None:
        path = resolve_model_path(model)
        process = LlamaServerProcess(binary, path, threads=threads, slots=None).start()
        try:
            server(process.port)([("user", "Say hello.")], time.perf_counter())
            assert process.process is not None
            memory["llama-server"] = rss_mib(process.process.pid)
        finally:
            process.close()
    return memory


def summary(firsts: list[float], wall: float) -> dict[str, float]:
    ordered = sorted(firsts)
    return {
        "wall_s": wall,
        "mean_ttft_s": statistics.mean(firsts),
        "p99_ttft_s": ordered[min(len(ordered) - 1, round(0.99 * (len(ordered) - 1)))],
    }


def at_once(one: One, chats: list[Chat]) -> dict[str, float]:
    """Every chat started together on its own thread; first-token times from that start."""
    firsts = [0.0] * len(chats)
    start = time.perf_counter()

    def run(i: int) -> None:
        firsts[i], _ = one(chats[i], start)

    threads = [threading.Thread(target=run, args=(i,)) for i in range(len(chats))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return summary(firsts, time.perf_counter() - start)


def agents(one: One, session: str) -> dict[str, float]:
    """``AGENTS`` agents at once, each ``TURNS`` turns in a row, every turn its whole history
    under the shared tool listing; first-token times from each turn's start."""
    firsts: list[float] = []
    start = time.perf_counter()

    def run(agent: int) -> None:
        chat = [("system", f"Session {session}. Tools: {TOOLS}"), ("user", TASKS[agent])]
        for turn in range(TURNS):
            first, answer = one(chat, time.perf_counter())
            firsts.append(first)
            chat += [("assistant", answer), ("user", f"Tool result {turn}: done. Next step?")]

    threads = [threading.Thread(target=run, args=(a,)) for a in range(AGENTS)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return summary(firsts, time.perf_counter() - start)


def ours(engine: Engine) -> One:
    def one(chat: Chat, start: float) -> tuple[float, str]:
        request = ChatRequest(
            messages=[ChatMessage(role=role, content=text) for role, text in chat],
            max_tokens=MAX_TOKENS,
            sampling=SamplingParams(temperature=0.0),
        )
        first: float | None = None
        text = []
        for chunk in engine.stream(request):
            if first is None and chunk.token_ids:
                first = time.perf_counter() - start
            text.append(chunk.text)
        return (first if first is not None else float("nan")), "".join(text)

    return one


def server(port: int) -> One:
    def one(chat: Chat, start: float) -> tuple[float, str]:
        messages = [{"role": role, "content": text} for role, text in chat]
        first: float | None = None
        text = []
        for at, piece in stream_chat(port, messages, MAX_TOKENS):
            first = at - start if first is None else first
            text.append(piece)
        return (first if first is not None else float("nan")), "".join(text)

    return one


CASES = ("cold", "warm", "map", "agents", "unrelated")


def measure(sides: dict[str, One], rounds: int) -> dict[str, dict[str, dict[str, float]]]:
    """Each side in turn: every case of ``CASES``, each session new (nothing cached)."""
    seen: dict[str, dict[str, list[dict[str, float]]]] = {
        name: {case: [] for case in CASES} for name in sides
    }
    for r in range(rounds):
        for name, one in sides.items():
            chats = fan_out(f"{r}-{name}")
            seen[name]["cold"].append(at_once(one, chats))
            seen[name]["warm"].append(at_once(one, chats))
            seen[name]["map"].append(at_once(one, map_step(f"{r}-{name}")))
            seen[name]["agents"].append(agents(one, f"{r}-{name}"))
            seen[name]["unrelated"].append(at_once(one, [[("user", q)] for q in UNRELATED]))
            cold = seen[name]["cold"][-1]["wall_s"]
            print(f"round {r + 1}, {name}: cold fan-out {cold:.1f} s", flush=True)
    return {
        name: {
            case: {key: statistics.median(run[key] for run in runs) for key in runs[0]}
            for case, runs in cases.items()
        }
        for name, cases in seen.items()
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--server", default=os.environ.get("LLAMACPP_INTEGRATIONS_LLAMA_SERVER"))
    parser.add_argument("--model", default="smollm2-135m")
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--json", default=None)
    args = parser.parse_args()
    model = resolve_model_path(args.model)
    threads = os.cpu_count() or 1
    # Not realigning answers while idle: the peer's turn would share the CPU with that work.
    base = EngineConfig(
        model=str(model), n_seq_max=N, n_ctx_per_seq=N_CTX, n_threads=threads,
        realign_when_idle=False,
    )  # fmt: skip
    process = None
    if args.server and Path(args.server).exists():
        # Its defaults but -np and -c: each slot gets the context ours gives a sequence (its
        # default, the model's 8,192 tokens split over 16 slots, is too short for the prompt).
        process = LlamaServerProcess(
            Path(args.server), model, threads=threads, slots=N, n_ctx_per_slot=N_CTX
        )
    else:
        print("no llama-server (--server): ours only", file=sys.stderr)
    binary = Path(args.server) if process is not None else None
    memory = default_memory(args.model, binary, threads)  # before anything else runs
    if process is not None:
        process.start()
    try:
        with (
            Engine(base) as sharing,
            Engine(replace(base, kv_unified=True)) as unified,
            Engine(replace(base, prefix_sharing=False)) as plain,
        ):
            sides: dict[str, One] = {
                "ours": ours(sharing),
                "ours, unified": ours(unified),
                "ours, sharing off": ours(plain),
            }
            if process is not None:
                sides["llama-server"] = server(process.port)
            figures = measure(sides, args.rounds)
    finally:
        if process is not None:
            process.close()

    names = list(figures)
    print(f"\n## {N} chats over one system prompt, {MAX_TOKENS} greedy tokens each\n")
    print("| case | figure | " + " | ".join(names) + " |")
    print("|---|---|" + "---:|" * len(names))
    for case in CASES:
        for key in ("wall_s", "mean_ttft_s", "p99_ttft_s"):
            cells = [f"{figures[n][case][key]:.2f}" for n in names]
            print(f"| {case} | {key} | " + " | ".join(cells) + " |")
    print("\n## Resident memory after one short answer, no settings (MiB)\n")
    print(" | ".join(f"{name} {mib:.0f}" for name, mib in memory.items()))
    if "llama-server" in memory:
        for name in ("ours", "ours, unified"):
            print(f"{name} / llama-server: {memory[name] / memory['llama-server']:.2f}x")
    report: dict[str, Any] = {"figures": figures, "default_memory_mib": memory}
    for peer in names[1:]:
        ratios = {
            f"{case} {key}": figures["ours"][case][key] / figures[peer][case][key]
            for case in CASES
            for key in ("wall_s", "mean_ttft_s")
        }
        report.setdefault("ratios", {})[peer] = ratios
        print(f"\nours / {peer}: " + ", ".join(f"{k} {v:.2f}x" for k, v in ratios.items()))
    results.write(
        args.json,
        "shared_prefix",
        {
            "model": args.model,
            "threads": threads,
            "rounds": args.rounds,
            "n": N,
            # Every side, as run: our three engines (from one config) and the server's command
            # line (the memory figure starts it again with no -np and -c).
            "ours": {
                "n_seq_max": N,
                "n_ctx_per_seq": N_CTX,
                "n_threads": threads,
                "realign_when_idle": False,
                "rest": "EngineConfig defaults",
            },
            "ours, unified": {"kv_unified": True},
            "ours, sharing off": {"prefix_sharing": False},
            "llama_server_flags": results.server_flags(process.command) if process else None,
        },
        **report,
    )


if __name__ == "__main__":
    main()
