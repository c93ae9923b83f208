"""One chat alone, against the kernels' ceiling: llama-bench's tg128 and pp512, and llama-server.

What a person chatting with a local model waits on: one stream of up to ``--max-tokens`` tokens
(128, like tg128), greedy and sampled (temperature 0.8, top-p 0.95, top-k 40, min-p 0 on every
side), on each model of ``--models``. Sides, all on the same GGUF and ``--threads``:

* ours through ``Engine.stream`` and through ``ChatLlamaCpp.stream`` (what a LangChain user
  calls; the same engine, its other settings the defaults, idle realignment off so that nothing
  runs while a peer is measured);
* llama.cpp's ``llama-server`` with one slot, streamed over HTTP on 127.0.0.1;
* ``llama-bench -p 512 -n 128``: tg128 (generation from an empty context, no sampling, no
  detokenizing: the kernels' ceiling) and pp512 (one 512-token prompt read).

Flash attention is off on every side (ours' default on the CPU), and weight repacking too where
the CPU advertises AMX (as ours turns it off there). A decode rate is the tokens after the first
over the seconds from the first token to the last (the prompt left out, as tg128 leaves it
out). A prompt read is ``--document``'s tokens (about 600 with the template) with the cache
cleared, over the prompt's reading time each side reports (ours ``Timings.prompt_eval_s``,
llama-server's ``timings.prompt_ms``) against pp512, and read again by a second engine of ours
with the prefill layout off (``prefill_block=0``: chunks that fill the batch, as pp512 reads),
which tells what the layout's chunks cost. Every round runs each side once, one
llama.cpp process busy at a time (the others idle), and the figures are medians over
``--repeat`` rounds. Answers end at the end-of-turn token or ``--max-tokens``: the prompts ask
for long stories so that most run to the limit; the results keep the tokens each side made.

    python benchmarks/single_stream.py --server .cache/llama-server/build/bin/llama-server \\
        --llama-bench .cache/llama-server/build/bin/llama-bench --repeat 5 \\
        --json benchmarks/results/single_stream.json
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Iterable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import llamabench
import results
from langchain_core.messages import HumanMessage
from speculative import DOCUMENT

from llamacpp_integrations.engine import ChatMessage, ChatRequest, Engine, EngineConfig
from llamacpp_integrations.engine import SamplingParams as Sampling
from llamacpp_integrations.engine.native.runner import cpu_advertises_amx
from llamacpp_integrations.langchain import ChatLlamaCpp
from llamacpp_integrations.models import resolve_model_path
from llamacpp_integrations.models.gguf import read_gguf_info

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from tests.live.llama_servers import LlamaServerProcess, free_port

STORIES = [
    "Write a long story about a lighthouse keeper who finds a message in a bottle.",
    "Write a long story about a robot who learns to bake bread.",
    "Write a long story about two friends crossing a desert on camels.",
    "Write a long story about a violin that plays by itself at night.",
    "Write a long story about a village that wakes up under the sea.",
]
MODES: dict[str, dict[str, float]] = {
    "greedy": {"temperature": 0.0},
    "sampled": {"temperature": 0.8, "top_p": 0.95, "top_k": 40, "min_p": 0.0},
}


@dataclass
class Stream:
    """One answer: tokens, and seconds from the start to the first and the last token."""

    tokens: int
    first_s: float
    last_s: float
    first_tokens: int = 1  # tokens that came with the first piece

    @property
    def rate(self) -> float:
        seconds = self.last_s - self.first_s
        return (self.tokens - self.first_tokens) / seconds if seconds > 0 else float("nan")


def _timed(pieces: Iterable[int]) -> Stream:
    """A stream from the token counts of its pieces, timed as they arrive."""
    start = time.perf_counter()
    first = last = 0.0
    tokens = first_tokens = 0
    for count in pieces:
        if not count:
            continue
        now = time.perf_counter() - start
        if not tokens:
            first, first_tokens = now, count
        tokens, last = tokens + count, now
    return Stream(tokens, first, last, first_tokens)


# ---- ours ---------------------------------------------------------------------------------


def _sampling(mode: str, seed: int) -> Sampling:
    return Sampling(**MODES[mode], seed=seed)  # type: ignore[arg-type]


def ours_engine(engine: Engine, prompt: str, mode: str, seed: int, max_tokens: int) -> Stream:
    request = ChatRequest(
        messages=[ChatMessage(role="user", content=prompt)],
        max_tokens=max_tokens,
        sampling=_sampling(mode, seed),
    )
    return _timed(len(chunk.token_ids) for chunk in engine.stream(request))


def ours_langchain(llm: ChatLlamaCpp, prompt: str, mode: str, seed: int) -> Stream:
    """Through ``ChatLlamaCpp.stream``; a piece's tokens are counted from its usage deltas
    where the adapter gives them, else one per piece with text."""
    params = MODES[mode]
    bound = llm.model_copy(update={**params, "seed": seed})
    return _timed(1 if chunk.content else 0 for chunk in bound.stream([HumanMessage(prompt)]))


def ours_prompt_read(engine: Engine, prompt: str) -> tuple[int, float]:
    engine.clear_cache()
    request = ChatRequest(
        messages=[ChatMessage(role="user", content=prompt)],
        max_tokens=1,
        sampling=_sampling("greedy", 0),
    )
    done = engine.generate(request)
    read = done.usage.prompt_tokens - done.usage.cached_prompt_tokens
    return read, read / done.timings.prompt_eval_s


# ---- llama-server -------------------------------------------------------------------------


def _post(port: int, body: dict[str, Any]) -> http.client.HTTPResponse:
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=600)
    connection.request(
        "POST", "/v1/chat/completions", json.dumps(body), {"Content-Type": "application/json"}
    )
    return connection.getresponse()


def server_stream(port: int, prompt: str, mode: str, seed: int, max_tokens: int) -> Stream:
    body = {
        "messages": [{"role": "user", "content": prompt}],
        "max_tokens": max_tokens,
        "stream": True,
        "seed": seed,
        **MODES[mode],
    }

    def pieces() -> Iterable[int]:
        for raw in _post(port, body):
            line = raw.decode("utf-8").strip()
            if not line.startswith("data: ") or line == "data: [DONE]":
                continue
            choices = json.loads(line[6:]).get("choices") or []
            yield 1 if choices and choices[0].get("delta", {}).get("content") else 0

    return _timed(pieces())


def server_prompt_read(port: int, prompt: str) -> tuple[int, float]:
    body = {
        "messages": [{"role": "user", "content": prompt}],
        "max_tokens": 1,
        "temperature": 0.0,
        "cache_prompt": False,
    }
    timings = json.loads(_post(port, body).read())["timings"]
    return int(timings["prompt_n"]), float(timings["prompt_per_second"])


# ---- llama-bench --------------------------------------------------------------------------


def bench_flags(threads: int) -> list[str]:
    flags = ["-p", "512", "-n", "128", "-r", "1", "-t", str(threads), "-fa", "off"]
    return flags + llamabench.repack_off()


def llama_bench(binary: str, model: str, threads: int) -> dict[str, float]:
    """tg128 and pp512 in tokens/s from one llama-bench process (one repetition each)."""
    return {
        "pp512" if test["n_prompt"] else "tg128": float(test["avg_ts"])
        for test in llamabench.run(binary, model, bench_flags(threads))
    }


# ---- one model ----------------------------------------------------------------------------


# Gemma 3 270M's file is the base model's and has no chat template: both sides are given
# Gemma's turn format, so that they read the same prompt (the base model runs on to the limit).
GEMMA_TURNS = (
    "{{ bos_token }}{% for m in messages %}<start_of_turn>"
    "{{ 'model' if m.role == 'assistant' else 'user' }}\n{{ m.content }}<end_of_turn>\n"
    "{% endfor %}{% if add_generation_prompt %}<start_of_turn>model\n{% endif %}"
)


def _chat_template(model: str) -> str | None:
    """None where the GGUF carries a template; else the turn format both sides are given."""
    return None if read_gguf_info(model).chat_template is not None else GEMMA_TURNS


def median(values: list[float]) -> float:
    return statistics.median(values) if values else float("nan")


def measure_model(args: argparse.Namespace, name: str) -> dict[str, Any]:
    model = str(resolve_model_path(name))
    extra = ["-fa", "off", *(["--no-repack"] if cpu_advertises_amx() else [])]
    template = _chat_template(model)
    if template is not None:
        template_file = Path(tempfile.mkdtemp()) / "chat_template.jinja"
        template_file.write_text(template)
        extra += ["--jinja", "--chat-template-file", str(template_file)]
    config = EngineConfig(
        model=model, n_threads=args.threads, realign_when_idle=False, chat_template=template
    )
    samples: dict[str, list[float]] = {}
    tokens: dict[str, list[int]] = {}
    read_tokens: dict[str, int] = {}

    def record(side: str, stream: Stream) -> None:
        samples.setdefault(side, []).append(stream.rate)
        tokens.setdefault(side, []).append(stream.tokens)

    def record_read(side: str, read: tuple[int, float]) -> None:
        read_tokens[side] = read[0]
        samples.setdefault(side, []).append(read[1])

    document = f"Here is a document.\n\n{DOCUMENT}\nSummarize it in one sentence."
    # The same prompt read by an engine with the prefill layout off: chunks that fill the batch,
    # as pp512 reads, so the difference to ours is what the layout's chunks cost.
    with Engine(config) as engine, Engine(replace(config, prefill_block=0)) as loose:
        llm = ChatLlamaCpp(engine=engine, max_tokens=args.max_tokens)
        server = LlamaServerProcess(
            Path(args.server), Path(model), port=free_port(), threads=args.threads, slots=1,
            n_ctx_per_slot=4096, extra=tuple(extra),
        ).start()  # fmt: skip
        try:
            ours_engine(engine, "Hi", "greedy", 0, 4)  # warm-up: first decode, page cache
            server_stream(server.port, "Hi", "greedy", 0, 4)
            for r in range(args.repeat):
                prompt = STORIES[r % len(STORIES)]
                for mode in MODES:
                    n = args.max_tokens
                    record(f"engine {mode}", ours_engine(engine, prompt, mode, r, n))
                    record(f"langchain {mode}", ours_langchain(llm, prompt, mode, r))
                    record(f"server {mode}", server_stream(server.port, prompt, mode, r, n))
                record_read("engine prompt", ours_prompt_read(engine, document))
                record_read("engine prompt, layout off", ours_prompt_read(loose, document))
                record_read("server prompt", server_prompt_read(server.port, document))
                if args.llama_bench:
                    for test, rate in llama_bench(args.llama_bench, model, args.threads).items():
                        samples.setdefault(test, []).append(rate)
                print(f"  {Path(model).name}: round {r + 1} of {args.repeat}", file=sys.stderr)
        finally:
            server.close()
    row: dict[str, Any] = {
        "model": Path(model).name,
        "tok_s": {side: median(values) for side, values in samples.items()},
        "runs": samples,
        "tokens": tokens,
        "prompt_tokens_read": read_tokens,
        "chat_template": "the GGUF's" if template is None else "Gemma turns (GEMMA_TURNS)",
        "llama_server_flags": results.server_flags(server.command, model),
    }
    return row


def ratio(a: float | None, b: float | None) -> str:
    return f"{a / b:.2f}x" if a and b and a == a and b == b else "n/a"


def report(rows: list[dict[str, Any]]) -> None:
    print("\n| model | side | greedy tok/s | sampled tok/s | greedy / tg128 | sampled / tg128 "
          "| greedy / server | sampled / server |")  # fmt: skip
    print("|---|---|---:|---:|---:|---:|---:|---:|")
    for row in rows:
        rate = row["tok_s"]
        for side in ("engine", "langchain", "server"):
            greedy, sampled = rate[f"{side} greedy"], rate[f"{side} sampled"]
            print(
                f"| {row['model']} | {side} | {greedy:.1f} | {sampled:.1f} "
                f"| {ratio(greedy, rate.get('tg128'))} | {ratio(sampled, rate.get('tg128'))} "
                f"| {ratio(greedy, rate['server greedy'])} "
                f"| {ratio(sampled, rate['server sampled'])} |"
            )
        print(
            f"| {row['model']} | prompt read | ours {rate['engine prompt']:.0f} "
            f"(layout off {rate['engine prompt, layout off']:.0f}) "
            f"| server {rate['server prompt']:.0f} | pp512 {rate.get('pp512', float('nan')):.0f} "
            f"| ours / pp512 {ratio(rate['engine prompt'], rate.get('pp512'))} | | |"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--models", default="smollm2-135m,gemma3-270m")
    parser.add_argument("--threads", type=int, default=os.cpu_count() or 1)
    parser.add_argument("--max-tokens", type=int, default=128)
    parser.add_argument("--repeat", type=int, default=5, help="rounds; the figures are medians")
    parser.add_argument("--server", default=results.LLAMA_SERVER)
    parser.add_argument("--llama-bench", default=None, help="a llama-bench binary")
    parser.add_argument("--json", default=None, help="also write the results to this file")
    args = parser.parse_args()
    if not Path(args.server).exists():
        sys.exit(f"no llama-server at {args.server}: run `make llama-server` first")
    if args.llama_bench and not Path(args.llama_bench).exists():
        sys.exit(f"no llama-bench at {args.llama_bench}: run `make llama-bench` first")
    rows = [measure_model(args, name) for name in args.models.split(",")]
    report(rows)
    settings = {
        "threads": args.threads,
        "max_tokens": args.max_tokens,
        "repeat": args.repeat,
        "modes": MODES,
        "repacking_off": cpu_advertises_amx(),
        # Every side's settings, as run.
        "ours": {
            "n_threads": args.threads,
            "realign_when_idle": False,
            "rest": "EngineConfig defaults (flash attention off on the CPU, n_batch 512)",
            "sides": "Engine.stream; ChatLlamaCpp(engine=that engine).stream",
        },
        "llama_server": "one slot of 4096 tokens; flags per model in models[].llama_server_flags",
        "llama_bench_flags": bench_flags(args.threads) if args.llama_bench else None,
        "prompt_read": "speculative.DOCUMENT in one user message, cache cleared, 1 token",
        "prompt_read_layout_off": "the same, by a second engine of ours with prefill_block=0",
    }
    results.write(args.json, "single_stream", settings, models=rows)


if __name__ == "__main__":
    main()
