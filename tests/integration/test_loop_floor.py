"""The loop benchmark's floors (``benchmarks/loop_floor.py``) run: the bare decode thread steps,
and each framework's stand-in model streams one chunk per step through the framework's own
streaming call. Timings are not asserted; this keeps the floor rows of ``make bench-loop``
working as LangChain and LlamaIndex change."""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "benchmarks"))

from loop_floor import DecodeThread, all_floor_calls  # noqa: E402


def test_every_floor_streams_one_chunk_per_decode_step(smollm_path: Path) -> None:
    async def run() -> dict[str, list[int]]:
        decode = DecodeThread(str(smollm_path), n_seq=2, n_threads=1)
        decode.start(asyncio.get_running_loop())
        try:
            lengths: dict[str, list[int]] = {}
            for name, call in all_floor_calls(decode, 3, "Be brief."):
                answers = await asyncio.gather(call("one"), call("two"))
                lengths[name] = [len(answer) for answer in answers]  # type: ignore[arg-type]
            return lengths
        finally:
            await asyncio.to_thread(decode.close)

    lengths = asyncio.run(run())
    assert list(lengths) == ["decode", "langchain", "llamaindex"]
    # LangChain may add a last empty chunk that closes the message; never fewer than the steps.
    assert lengths["decode"] == [3, 3] and lengths["llamaindex"] == [3, 3]
    assert all(n >= 3 for n in lengths["langchain"])


def test_the_floor_with_the_long_slice_steps(smollm_path: Path) -> None:
    async def run() -> list[int]:
        decode = DecodeThread(str(smollm_path), n_seq=2, n_threads=1, time_slice_ns=7_000_000)
        decode.start(asyncio.get_running_loop())
        try:
            _, idle = next(all_floor_calls(decode, 3, "Be brief."))
            return [len(await idle("one"))]  # type: ignore[arg-type]
        finally:
            await asyncio.to_thread(decode.close)

    assert asyncio.run(run()) == [3]
