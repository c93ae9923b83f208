"""Speculative decoding by n-gram lookup: ours with and without it, and the peers, on one run.

Workloads (greedy, answers run to their natural end or ``--max-tokens``):

* (a) "quote": questions answered by extracting sentences and fields (prose and JSON) from a
  document of about 600 tokens in the prompt, one stream at a time;
* (b) free chat: short questions whose answers do not repeat the prompt, one stream at a time;
* (c) 8 and 16 concurrent requests, half of each kind.

Generation speed is tokens after the first divided by the time from the first token to the last
(prompt evaluation is left out: it is the same with and without speculation). On (a) the peers
are llama.cpp's ``llama-server`` (plain, and with its ``--spec-type ngram-simple`` drafts where
the build has it) and llama-cpp-python's ``Llama`` with ``LlamaPromptLookupDecoding``; every
process runs on its own, one after the other. ``llama-bench`` is used for the C++ single-stream
ceiling only when ``--llama-bench`` names a binary.

    python benchmarks/speculative.py [--server .cache/llama-server/build/bin/llama-server]
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import statistics
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import results

from llamacpp_integrations.engine import (
    ChatMessage,
    ChatRequest,
    Engine,
    EngineConfig,
    EngineStats,
    SamplingParams,
)
from llamacpp_integrations.engine.native.runner import cpu_advertises_amx
from llamacpp_integrations.models import resolve_model_path
from llamacpp_integrations.tools.structured import constrain

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from tests.live.llama_servers import LlamaServerProcess

PORT = 18131
GREEDY = SamplingParams(temperature=0.0)

DOCUMENT = """\
Field report: the Zephyr-9 research station.

The Zephyr-9 research station was founded in 1987 on the northern ridge of Mount Kell, at an
altitude of 2,340 metres. It is run by the Northern Alpine Science Consortium, a partnership of
four universities. The station houses three laboratories: atmospheric chemistry, glaciology and
seismic monitoring. The director is Dr. Amara Okafor, who joined the station in 2015 after ten
years at the polar institute in Tromsø. The annual budget is 4.2 million euros, of which 60
percent comes from public grants and 40 percent from industry partners.

Staff: 14 scientists, 6 technicians and 3 support workers live at the station from April to
October. In winter only a crew of four remains, to keep the instruments running. The nearest
town, Brisk, lies 42 kilometres to the south; supplies arrive every second Tuesday by a cable
car that was rebuilt in 2019 for 3.1 million euros.

Instruments: a lidar that profiles aerosols up to 12 kilometres, a broadband seismometer buried
in the bedrock since 1991, and an automatic weather mast that reports every ten minutes. The
glaciology team drills one ice core each summer; the 2023 core reached a depth of 118 metres.

Incidents: in March 2021 an avalanche damaged the east wing, which was closed for five months.
Nobody was hurt. The repair cost 780,000 euros and added a snow shield above the entrance.

Plans: the consortium intends to add a fourth laboratory, for high-altitude biology, by 2027,
and to replace the diesel generators with a solar and battery plant of 400 kilowatts.
"""

QUOTE_QUESTIONS = [
    "Quote, word for word, the sentence that names the director.",
    "Copy the paragraph that starts with 'Staff:' exactly as written.",
    "Return a JSON object with the fields name, founded, altitude, director and budget, "
    "with values copied from the document.",
    "What happened in March 2021? Answer by quoting the document.",
    "List the instruments, quoting the document's description of each.",
    "Return a JSON object with the fields town, distance_km, cable_car_rebuilt and "
    "cable_car_cost, copied from the document.",
]
# (d): the JSON questions of (a) with their schema enforced by a grammar (structured output).
JSON_QUESTIONS = [
    (QUOTE_QUESTIONS[2], ["name", "founded", "altitude", "director", "budget"]),
    (QUOTE_QUESTIONS[5], ["town", "distance_km", "cable_car_rebuilt", "cable_car_cost"]),
]
CHAT_QUESTIONS = [
    "Write a short story about a robot who learns to paint.",
    "Explain how a bicycle works to a child.",
    "Give me five ideas for a rainy weekend.",
    "Describe the perfect breakfast.",
    "Why do people enjoy music?",
    "Write a poem about autumn leaves.",
]


def quote_messages(question: str) -> list[dict[str, str]]:
    return [{"role": "user", "content": f"Here is a document.\n\n{DOCUMENT}\n{question}"}]


def chat_messages(question: str) -> list[dict[str, str]]:
    return [{"role": "user", "content": question}]


@dataclass
class Run:
    """One request: tokens generated, seconds to the first token and to the end."""

    tokens: int
    first_s: float
    end_s: float


def decode_rate(runs: Sequence[Run]) -> float:
    """Tokens after the first over the seconds from first to last token, summed over runs."""
    tokens = sum(max(0, r.tokens - 1) for r in runs)
    seconds = sum(max(1e-9, r.end_s - r.first_s) for r in runs)
    return tokens / seconds


def aggregate_rate(runs: Sequence[Run]) -> float:
    """Concurrent runs: all tokens over the wall time of the batch."""
    return sum(r.tokens for r in runs) / max(r.end_s for r in runs)


# ---- ours ---------------------------------------------------------------------------------


def ours_request(messages: list[dict[str, str]], max_tokens: int) -> ChatRequest:
    return ChatRequest(
        messages=[ChatMessage(role=m["role"], content=m["content"]) for m in messages],  # type: ignore[arg-type]
        max_tokens=max_tokens,
        sampling=GREEDY,
    )


def json_request(question: str, fields: list[str], max_tokens: int) -> ChatRequest:
    schema = {
        "type": "object",
        "properties": {name: {"type": "string"} for name in fields},
        "required": fields,
    }
    return constrain(ours_request(quote_messages(question), max_tokens), schema)


def ours_one(
    engine: Engine,
    messages: list[dict[str, str]],
    max_tokens: int,
    request: ChatRequest | None = None,
) -> Run:
    start = time.perf_counter()
    first = None
    tokens = 0
    for chunk in engine.stream(request or ours_request(messages, max_tokens)):
        if first is None and chunk.token_ids:
            first = time.perf_counter() - start
        tokens += len(chunk.token_ids)
    return Run(tokens, first or 0.0, time.perf_counter() - start)


def ours_batch(
    engine: Engine, conversations: list[list[dict[str, str]]], max_tokens: int
) -> list[Run]:
    start = time.perf_counter()
    out: list[Run] = [Run(0, 0.0, 0.0)] * len(conversations)

    def run(i: int) -> None:
        first = None
        tokens = 0
        for chunk in engine.stream(ours_request(conversations[i], max_tokens)):
            if first is None and chunk.token_ids:
                first = time.perf_counter() - start
            tokens += len(chunk.token_ids)
        out[i] = Run(tokens, first or 0.0, time.perf_counter() - start)

    threads = [threading.Thread(target=run, args=(i,)) for i in range(len(conversations))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return out


# ---- llama-server -------------------------------------------------------------------------


def make_server(binary: str, model: str, threads: int, extra: Sequence[str]) -> LlamaServerProcess:
    flags = ["-fa", "off", *extra]
    if cpu_advertises_amx():
        flags.append("--no-repack")
    return LlamaServerProcess(
        Path(binary), Path(model), port=PORT, threads=threads, slots=1, n_ctx_per_slot=4096,
        extra=tuple(flags),
    )  # fmt: skip


def server_settings(binary: str, model: str, threads: int, extra: Sequence[str]) -> list[str]:
    """The command line a peer server runs with, for the results (the server is not started)."""
    server = make_server(binary, model, threads, extra)
    server.close()
    return results.server_flags(server.command)


def start_server(
    binary: str, model: str, threads: int, extra: Sequence[str]
) -> LlamaServerProcess | None:
    server = make_server(binary, model, threads, extra)
    try:
        return server.start()
    except RuntimeError as error:
        server.close()
        print(f"  llama-server refused {' '.join(extra) or 'its defaults'}: {error}")
        return None


def server_one(messages: list[dict[str, str]], max_tokens: int) -> Run:
    body = json.dumps(
        {
            "messages": messages,
            "max_tokens": max_tokens,
            "temperature": 0,
            "stream": True,
            "stream_options": {"include_usage": True},
        }
    )
    start = time.perf_counter()
    connection = http.client.HTTPConnection("127.0.0.1", PORT, timeout=600)
    connection.request("POST", "/v1/chat/completions", body, {"Content-Type": "application/json"})
    first = None
    tokens = 0
    for raw in connection.getresponse():
        line = raw.decode("utf-8").strip()
        if not line.startswith("data: ") or line == "data: [DONE]":
            continue
        event = json.loads(line[6:])
        choices = event.get("choices") or []
        if first is None and choices and choices[0].get("delta", {}).get("content"):
            first = time.perf_counter() - start
        if event.get("usage"):
            tokens = event["usage"]["completion_tokens"]
    return Run(tokens, first or 0.0, time.perf_counter() - start)


def server_rates(
    binary: str, model: str, threads: int, extra: Sequence[str], max_tokens: int
) -> dict[str, float | None]:
    """Single-stream decode tokens/s of one llama-server on (a) quote and (b) chat."""
    server = start_server(binary, model, threads, extra)
    if server is None:
        return {"quote": None, "chat": None}
    try:
        server_one(quote_messages("Say hi."), 4)  # warm-up
        return {
            "quote": decode_rate(
                [server_one(quote_messages(q), max_tokens) for q in QUOTE_QUESTIONS]
            ),
            "chat": decode_rate([server_one(chat_messages(q), max_tokens) for q in CHAT_QUESTIONS]),
        }
    finally:
        server.close()


# ---- llama-cpp-python ---------------------------------------------------------------------


def llama_cpp_python_rate(model: str, threads: int, max_tokens: int, lookup: bool) -> float | None:
    """``Llama`` (with or without prompt lookup), run in a child process so its weights and
    threads are gone when it ends."""
    code = f"""
import json, sys, time
from llama_cpp import Llama
from llama_cpp.llama_speculative import LlamaPromptLookupDecoding
sys.path.insert(0, {os.path.dirname(os.path.abspath(__file__))!r})
from speculative import QUOTE_QUESTIONS, quote_messages
draft = LlamaPromptLookupDecoding(num_pred_tokens=8) if {lookup!r} else None
llm = Llama({model!r}, n_ctx=4096, n_threads={threads}, verbose=False, draft_model=draft)
tokens = 0
seconds = 0.0
for q in QUOTE_QUESTIONS:
    start = time.perf_counter(); first = None; n = 0
    for part in llm.create_chat_completion(quote_messages(q), max_tokens={max_tokens},
                                           temperature=0.0, stream=True):
        if part["choices"][0]["delta"].get("content"):
            n += 1
            if first is None:
                first = time.perf_counter()
    tokens += max(0, n - 1); seconds += time.perf_counter() - (first or start)
print(json.dumps(tokens / seconds))
"""
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=600)
    if done.returncode != 0:
        print("  llama-cpp-python failed:", done.stderr.strip().splitlines()[-1:] or "")
        return None
    return float(done.stdout.strip().splitlines()[-1])


# ---- main ---------------------------------------------------------------------------------


def engine_for(model: str, speculative: str | None, threads: int) -> Engine:
    return Engine(
        EngineConfig(
            model=model, n_seq_max=16, n_ctx_per_seq=1024, n_threads=threads,
            speculative=speculative,  # type: ignore[arg-type]
            speculative_grammar=True,  # (d) measures what speculating on grammar answers does
            realign_when_idle=False,  # the peer's turn would share the CPU with that work
        )
    )  # fmt: skip


def measure_ours(
    model: str, threads: int, max_tokens: int, repeat: int
) -> tuple[dict[str, object], dict[str, object]]:
    """Ours with n-gram speculation and without, as ``(ngram, off)`` rates per workload.

    Both engines stay loaded (only one decodes at a time) and take turns request by request,
    the order flipping each time, so a burst of load from elsewhere on the machine falls on
    both sides alike instead of on whichever ran in that minute.
    """
    with engine_for(model, "ngram", threads) as spec, engine_for(model, None, threads) as plain:
        engines = {"ngram": spec, "off": plain}
        for engine in engines.values():
            engine.generate(ours_request(chat_messages("Hi"), 4))
        out: dict[str, dict[str, object]] = {"ngram": {}, "off": {}}
        single: list[tuple[str, list[ChatRequest]]] = [
            ("quote", [ours_request(quote_messages(q), max_tokens) for q in QUOTE_QUESTIONS]),
            ("chat", [ours_request(chat_messages(q), max_tokens) for q in CHAT_QUESTIONS]),
            ("json", [json_request(q, fields, max_tokens) for q, fields in JSON_QUESTIONS]),
        ]
        for name, requests in single:
            runs: dict[str, list[Run]] = {"ngram": [], "off": []}
            before = spec.stats()
            for i, request in enumerate(requests * repeat):
                for mode in ("ngram", "off") if i % 2 == 0 else ("off", "ngram"):
                    runs[mode].append(ours_one(engines[mode], [], max_tokens, request))
            for mode in engines:
                out[mode][name] = decode_rate(runs[mode])
            out["ngram"][name + "_acceptance"] = acceptance(before, spec.stats())
        for n in (8, 16):
            mixed = [
                quote_messages(QUOTE_QUESTIONS[i % len(QUOTE_QUESTIONS)])
                if i % 2 == 0
                else chat_messages(CHAT_QUESTIONS[i % len(CHAT_QUESTIONS)])
                for i in range(n)
            ]
            rates: dict[str, list[float]] = {"ngram": [], "off": []}
            before = spec.stats()
            for i in range(repeat):
                for mode in ("ngram", "off") if i % 2 == 0 else ("off", "ngram"):
                    rates[mode].append(aggregate_rate(ours_batch(engines[mode], mixed, max_tokens)))
            for mode in engines:
                out[mode][f"mixed{n}"] = statistics.median(rates[mode])
            out["ngram"][f"mixed{n}_acceptance"] = acceptance(before, spec.stats())
        return out["ngram"], out["off"]


def acceptance(before: EngineStats, after: EngineStats) -> tuple[float | None, int]:
    """Share of drafted tokens accepted between two stats readings, and how many were drafted."""
    drafted = after.drafted_tokens - before.drafted_tokens
    accepted = after.accepted_tokens - before.accepted_tokens
    return (accepted / drafted if drafted else None, drafted)


def fmt(value: float | None) -> str:
    return "n/a" if value is None else f"{value:7.1f}"


def ratio(a: float | None, b: float | None) -> str:
    return "n/a" if a is None or b is None or b == 0 else f"{a / b:.2f}x"


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="smollm2-135m")
    parser.add_argument("--threads", type=int, default=os.cpu_count() or 1)
    parser.add_argument("--max-tokens", type=int, default=160)
    parser.add_argument("--server", default=".cache/llama-server/build/bin/llama-server")
    parser.add_argument("--llama-bench", default=None, help="a llama-bench binary, if built")
    parser.add_argument("--no-peers", action="store_true", help="ours only")
    parser.add_argument("--json", default=None, help="write the results here")
    parser.add_argument("--repeat", type=int, default=2, help="passes over each workload")
    args = parser.parse_args(argv)
    model = str(resolve_model_path(args.model))
    print(f"model {os.path.basename(model)}, {args.threads} threads, max {args.max_tokens} tokens")

    spec, plain = measure_ours(model, args.threads, args.max_tokens, args.repeat)
    print("\nOurs, generation tokens/s (single stream: decode rate; concurrent: aggregate)")
    print(f"{'workload':<22}{'ngram':>9}{'off':>9}{'ratio':>8}   acceptance (drafted)")
    for key, label in (
        ("quote", "(a) quote, 1 stream"),
        ("chat", "(b) chat, 1 stream"),
        ("json", "(d) JSON schema, 1 st."),
        ("mixed8", "(c) mixed, 8 conc."),
        ("mixed16", "(c) mixed, 16 conc."),
    ):
        rate, drafted = spec[key + "_acceptance"]  # type: ignore[misc]
        shown = "n/a" if rate is None else f"{rate:.0%}"
        print(
            f"{label:<22}{fmt(spec[key]):>9}{fmt(plain[key]):>9}"  # type: ignore[arg-type]
            f"{ratio(spec[key], plain[key]):>8}   {shown} ({drafted})"  # type: ignore[arg-type]
        )
    settings: dict[str, Any] = {"model": os.path.basename(model), "threads": args.threads,
                "max_tokens": args.max_tokens,
                # Every side's settings, as run (the peers' are added below).
                "ours": {"n_seq_max": 16, "n_ctx_per_seq": 1024, "speculative": "ngram or None",
                         "speculative_grammar": True, "realign_when_idle": False}}  # fmt: skip
    ours_rows = {
        key: {
            "ngram": spec[key],
            "off": plain[key],
            "acceptance": spec[key + "_acceptance"][0],  # type: ignore[index]
            "drafted": spec[key + "_acceptance"][1],  # type: ignore[index]
        }
        for key in ("quote", "chat", "json", "mixed8", "mixed16")
    }
    if args.no_peers:
        results.write(args.json, "speculative", settings, ours=ours_rows, peers=[])
        return
    ours_quote = spec["quote"]
    ours_chat = spec["chat"]
    assert isinstance(ours_quote, float) and isinstance(ours_chat, float)
    peers: list[tuple[str, Callable[[], dict[str, float | None]]]] = []
    if os.path.exists(args.server):
        peers.append(
            (
                "llama-server",
                lambda: server_rates(args.server, model, args.threads, [], args.max_tokens),
            )
        )
        ngram = [
            "--spec-type", "ngram-simple", "--spec-ngram-simple-size-n", "3",
            "--spec-ngram-simple-size-m", "8", "--spec-draft-n-max", "8",
        ]  # fmt: skip
        settings["llama-server"] = server_settings(args.server, model, args.threads, [])
        settings["llama-server ngram-simple"] = server_settings(
            args.server, model, args.threads, ngram
        )
        peers.append(
            (
                "llama-server ngram-simple",
                lambda: server_rates(args.server, model, args.threads, ngram, args.max_tokens),
            )
        )
    else:
        print(f"\n(no llama-server at {args.server}: `make llama-server` builds it)")
    settings["llama-cpp-python Llama"] = f"Llama(model, n_ctx=4096, n_threads={args.threads})"
    settings["Llama + PromptLookup"] = (
        f"Llama(model, n_ctx=4096, n_threads={args.threads}, "
        "draft_model=LlamaPromptLookupDecoding(num_pred_tokens=8))"
    )
    settings["llama-bench"] = ["-t", str(args.threads), "-p", "0", "-n", "128"]
    for name, lookup in (("llama-cpp-python Llama", False), ("Llama + PromptLookup", True)):
        peers.append(
            (
                name,
                lambda lookup=lookup: {  # type: ignore[misc]
                    "quote": llama_cpp_python_rate(model, args.threads, args.max_tokens, lookup),
                    "chat": None,
                },
            )
        )
    print("\nSingle stream, decode tokens/s; ratio = ours with n-gram speculation / peer")
    print(f"{'peer':<28}{'(a) quote':>10}{'ours/peer':>11}{'(b) chat':>10}{'ours/peer':>11}")
    peer_rows = [
        {"peer": "ours, speculative=ngram", "quote": ours_quote, "chat": ours_chat},
        {"peer": "ours, speculative=None", "quote": plain["quote"], "chat": plain["chat"]},
    ]
    peer_rows += [{"peer": name, **measure()} for name, measure in peers]
    if args.llama_bench and os.path.exists(args.llama_bench):
        done = subprocess.run(
            [args.llama_bench, "-m", model, "-t", str(args.threads), "-p", "0", "-n", "128",
             "-o", "json"],
            capture_output=True, text=True, timeout=300,
        )  # fmt: skip
        bench = float(json.loads(done.stdout)[0]["avg_ts"])
        peer_rows.append({"peer": "llama-bench tg128 (C++)", "quote": bench, "chat": bench})
    else:
        print("llama-bench: no binary (pass --llama-bench PATH); the ceiling ratio is skipped")
    for row in peer_rows:
        quote, chat = row["quote"], row["chat"]
        print(
            f"{row['peer']:<28}{fmt(quote):>10}{ratio(ours_quote, quote):>11}"  # type: ignore[arg-type]
            f"{fmt(chat):>10}{ratio(ours_chat, chat):>11}"  # type: ignore[arg-type]
        )
    results.write(args.json, "speculative", settings, ours=ours_rows, peers=peer_rows)


if __name__ == "__main__":
    main()
