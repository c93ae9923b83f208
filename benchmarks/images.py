"""Image chats: our engine against llama-cpp-python's ``Llava15ChatHandler``, in one process.

The workload is what a vision app does: N users send a picture each under one long shared system
prompt (a batch started at once), then each asks a follow-up question about the same picture.
Both sides run SmolLM2-135M with the same tiny random-weight llava-1.5-style projector
(``tests/builders/tiny_projector.py``; its answers are noise, only the work counts), the same
thread count, greedy, every answer exactly ``--max-tokens`` long (end-of-generation banned).

* **ours** - ``Engine`` with ``mmproj``: the N requests decode together, each image is read into
  its request's own sequence between text steps, and the follow-ups find the system prompt and
  the image in the KV cache.
* **peer** - ``llama_cpp.Llama`` with ``Llava15ChatHandler``: one request at a time, and the
  handler clears the whole KV cache on every image call, so every prompt is read in full.

Reported: wall time of each round, the prompt tokens each side actually evaluated (prompt minus
cached), and the ratios. The two sides never run at the same time; ``--repeat K`` alternates them
K times and reports the median. Nothing is asserted.

    python benchmarks/images.py [--users 4] [--max-tokens 32] [--repeat 3]
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import io
import os
import random
import statistics
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any, cast

import llama_cpp
import results
from llama_cpp.llama_chat_format import Llava15ChatHandler
from PIL import Image
from throughput import eog_bias, match_weight_repacking

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from llamacpp_integrations.engine import (
    ChatMessage,
    ChatRequest,
    Engine,
    EngineConfig,
    SamplingParams,
)
from llamacpp_integrations.models import resolve_model_path
from llamacpp_integrations.multimodal import load_image
from tests.builders.tiny_projector import cached_tiny_projector

SYSTEM = (
    "You are an assistant for people who cannot see. For every picture, describe the scene "
    "in plain words: the main subject first, then colours, shapes and their positions, any "
    "visible text read out exactly, and finally the mood of the picture. Keep sentences short "
    "and concrete, never guess what is not visible, and say so when something is unclear. "
) * 3
QUESTIONS = ("Describe this picture.", "What colours stand out the most?")


def picture(seed: int) -> bytes:
    rng = random.Random(seed)
    image = Image.new("RGB", (256, 192))
    image.putdata([(rng.randrange(256), rng.randrange(256), rng.randrange(256))] * (256 * 192))
    for _ in range(12):  # a few random rectangles, so the pictures differ in layout too
        x, y = rng.randrange(200), rng.randrange(150)
        colour = (rng.randrange(256), rng.randrange(256), rng.randrange(256))
        image.paste(colour, (x, y, x + rng.randrange(8, 56), y + rng.randrange(8, 42)))
    out = io.BytesIO()
    image.save(out, format="PNG")
    return out.getvalue()


class Round:
    def __init__(self, wall_s: float, evaluated: int, prompt: int) -> None:
        self.wall_s, self.evaluated, self.prompt = wall_s, evaluated, prompt


# ---- ours -----------------------------------------------------------------------------------


def our_request(png: bytes, question: str, max_tokens: int) -> ChatRequest:
    content = [{"type": "image", "image": load_image(png)}, {"type": "text", "text": question}]
    return ChatRequest(
        messages=[
            ChatMessage(role="system", content=SYSTEM),
            ChatMessage(role="user", content=content),
        ],
        sampling=SamplingParams(temperature=0),
        max_tokens=max_tokens,
        ignore_eos=True,
    )


def ours_round(engine: Engine, pngs: list[bytes], question: str, max_tokens: int) -> Round:
    async def run() -> Round:
        requests = [our_request(png, question, max_tokens) for png in pngs]
        t0 = time.perf_counter()
        done = await asyncio.gather(*(engine.agenerate(r) for r in requests))
        wall = time.perf_counter() - t0
        prompt = sum(c.usage.prompt_tokens for c in done)
        cached = sum(c.usage.cached_prompt_tokens for c in done)
        return Round(wall, prompt - cached, prompt)

    return asyncio.run(run())


def forget(engine: Engine) -> None:
    engine.clear_cache()


# ---- peer -----------------------------------------------------------------------------------


class Peer:
    def __init__(self, model: str, mmproj: str, threads: int) -> None:
        self.llm = llama_cpp.Llama(
            model_path=model,
            chat_handler=Llava15ChatHandler(clip_model_path=mmproj, verbose=False),
            n_ctx=2048,
            n_threads=threads,
            n_threads_batch=threads,
            verbose=False,
        )
        self.bias = eog_bias(self.llm)

    def one(self, png: bytes, question: str, max_tokens: int) -> int:
        uri = "data:image/png;base64," + base64.b64encode(png).decode()
        answer = cast(
            dict[str, Any],
            self.llm.create_chat_completion(
                messages=[
                    {"role": "system", "content": SYSTEM},
                    {
                        "role": "user",
                        "content": [
                            {"type": "image_url", "image_url": {"url": uri}},
                            {"type": "text", "text": question},
                        ],
                    },
                ],  # type: ignore[list-item]
                max_tokens=max_tokens,
                temperature=0,
                logit_bias=self.bias,
            ),
        )
        return int(answer["usage"]["prompt_tokens"])

    def round(self, pngs: list[bytes], question: str, max_tokens: int) -> Round:
        t0 = time.perf_counter()
        prompt = sum(self.one(png, question, max_tokens) for png in pngs)
        # The handler clears the KV cache before every image prompt: all of it is evaluated.
        return Round(time.perf_counter() - t0, prompt, prompt)


# ---- report ---------------------------------------------------------------------------------


def median_round(rounds: list[Round]) -> Round:
    best = sorted(rounds, key=lambda r: r.wall_s)[len(rounds) // 2]
    return Round(statistics.median(r.wall_s for r in rounds), best.evaluated, best.prompt)


def runs(args: argparse.Namespace) -> Iterator[tuple[str, Round, Round]]:
    model = str(resolve_model_path(args.model))
    mmproj = str(args.mmproj or cached_tiny_projector("mlp", 576))
    threads = args.threads or os.cpu_count() or 1
    match_weight_repacking()
    pngs = [picture(seed) for seed in range(args.users)]
    # Not realigning answers while idle: the peer's turn would share the CPU with that work.
    config = EngineConfig(
        model=model, mmproj=mmproj, n_seq_max=max(4, args.users), n_threads=threads,
        realign_when_idle=False,
    )  # fmt: skip
    engine = Engine(config)
    peer = Peer(model, mmproj, threads)
    # Warm both up once (first graph builds), outside the timings.
    ours_round(engine, pngs[:1], "Hi.", 2)
    peer.round(pngs[:1], "Hi.", 2)
    results: dict[str, tuple[list[Round], list[Round]]] = {q: ([], []) for q in QUESTIONS}
    for _ in range(args.repeat):
        forget(engine)
        for question in QUESTIONS:  # the first round fills the caches the follow-up reuses
            results[question][0].append(ours_round(engine, pngs, question, args.max_tokens))
        for question in QUESTIONS:
            results[question][1].append(peer.round(pngs, question, args.max_tokens))
    engine.close()
    for question, (ours, theirs) in results.items():
        yield question, median_round(ours), median_round(theirs)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default="smollm2-135m")
    parser.add_argument("--mmproj", default=None, help="default: the tests' tiny projector")
    parser.add_argument("--users", type=int, default=4)
    parser.add_argument("--max-tokens", type=int, default=32)
    parser.add_argument("--threads", type=int, default=None)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--json", default=None, help="also write the results to this file")
    args = parser.parse_args()
    print(
        f"{args.users} image chats (shared system prompt), {args.max_tokens} tokens each, "
        f"llama-cpp-python {llama_cpp.__version__}, median of {args.repeat}"
    )
    header = f"{'round':<34} {'ours':>9} {'peer':>9} {'speed-up':>9}   prompt tokens evaluated"
    print(header)
    rounds: list[dict[str, object]] = []
    for question, ours, peer in runs(args):
        rounds.append({"round": question, "ours": vars(ours), "peer": vars(peer)})
        print(
            f"{question:<34} {ours.wall_s:>8.2f}s {peer.wall_s:>8.2f}s "
            f"{peer.wall_s / ours.wall_s:>8.2f}x   ours {ours.evaluated} of {ours.prompt}, "
            f"peer {peer.evaluated} of {peer.prompt}"
        )
    results.write(
        args.json,
        "images",
        {
            "model": args.model,
            "projector": args.mmproj or "the tests' tiny random-weight llava-style projector",
            "users": args.users,
            "max_tokens": args.max_tokens,
            "repeat": args.repeat,
            "peer": f"llama-cpp-python {llama_cpp.__version__} Llava15ChatHandler",
            # The peer's constructor, as run.
            "peer_settings": {
                "n_ctx": 2048,
                "n_threads": args.threads or os.cpu_count() or 1,
                "n_threads_batch": args.threads or os.cpu_count() or 1,
                "rest": "llama_cpp.Llama defaults",
            },
        },
        rounds=rounds,
    )


if __name__ == "__main__":
    main()
