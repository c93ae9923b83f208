"""Beside busy processes, an engine left to choose its threads decodes on fewer, with the same
answers (``engine/worker/thread_governor.py``).

The check runs in a fresh process that may use every CPU of the machine (under pytest-xdist a
worker has a share of them), with as many spinning processes as it has cores: the decode's
threads then get about half the cores they ask for, and the engine must notice, say so once
as a warning, show it in its stats, and answer a greedy request token for token as an engine
with a fixed count on every thread does. That
the count comes back when the cores go idle needs a machine nobody else uses (it is what
``benchmarks/busy_cpu.py`` measures); the unit tests play it through the governor.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.skipif(
    not Path("/proc/self/task").is_dir() or (os.cpu_count() or 1) < 2,
    reason="Linux's scheduler accounting, and two CPUs at least",
)

CHILD = r"""
import json, logging, os, subprocess, sys, time

os.sched_setaffinity(0, range(os.cpu_count()))
from llamacpp_integrations.engine import ChatRequest, Engine, EngineConfig, SamplingParams
from llamacpp_integrations.engine.cpu_budget import read_cpu_budget

warnings, cuts = [], []
handler = logging.Handler()
handler.emit = lambda record: (
    warnings if record.levelno >= logging.WARNING else cuts
).append(record.getMessage())
engine_log = logging.getLogger("llamacpp_integrations.engine")
engine_log.addHandler(handler)
engine_log.setLevel(logging.INFO)
mode = sys.argv[2]  # same, own: a chat beside busy processes; embed: embeddings
own_session = mode != "same"


def ask(text, n):
    request = ChatRequest(
        messages=[{"role": "user", "content": text}],
        sampling=SamplingParams(temperature=0.0),
        max_tokens=n,
        ignore_eos=True,
    )
    return list(engine.generate(request).token_ids)


def embed():
    texts = [f"Lighthouse number {i} stands on a rock by the sea. " * 8 for i in range(4)]
    return [[round(x, 6) for x in vector] for vector in engine.embed(texts)]


work = embed if mode == "embed" else lambda: ask(question, 48)
question = "Name three colours and say why the sky is blue."
target = read_cpu_budget().threads
# The answer on every thread, from an engine whose count never moves.
# Prompts read in chunks that fill the batch: the note below is one long decode, which the stall
# watch reads whatever else this machine runs (a step of one token may end before it looks).
settings = dict(model=sys.argv[1], realign_when_idle=False, prefill_block=0)
engine = Engine(EngineConfig(n_threads=target, **settings))
out = {"target": target, "every_thread": work()}
engine.close()
engine = Engine(EngineConfig(**settings))
note = "The keeper wrote down the wind, the rain and the ships he saw. " * 30
cpus = sorted(os.sched_getaffinity(0))
spin = "import os, sys\nos.sched_setaffinity(0, {int(sys.argv[1])})\nwhile True: pass"
neighbours = [
    subprocess.Popen([sys.executable, "-c", spin, str(cpu)], start_new_session=own_session)
    for cpu in cpus
]
try:
    deadline = time.monotonic() + 60
    work() if mode == "embed" else ask(note + "Say what he saw.", 4)
    while engine.stats().decode_threads == target and time.monotonic() < deadline:
        work() if mode == "embed" else ask("Tell me a long story about a lighthouse.", 64)
    out["threads_busy"] = engine.stats().decode_threads
    out["busy"] = work()
    out["threads_after"] = engine.stats().decode_threads
finally:
    for process in neighbours:
        process.kill()
    engine.close()
out["warnings"] = warnings
out["cuts"] = [message for message in cuts if message.startswith("stopped a decode")]
print(json.dumps(out))
"""


@pytest.mark.parametrize("neighbours", ["same", "own", "embed"])
def test_busy_cores_take_threads_away_and_leave_the_answers_alone(
    smollm_path: Path, neighbours: str
) -> None:
    """``same``: the busy processes share the engine's session, so its scheduling group: the
    decode slows, and the governor drops a thread when a window ends. ``own``: each in a
    session of its own, as a program started from another terminal, a service, a container;
    where Linux shares the CPUs between sessions first (autogroup), the decode all but stops,
    and the stall watch stops the decode under way to run it again on fewer threads.
    ``embed``: the same for an engine whose first work is embedding texts (the vectors rounded
    to 6 places, as floats through JSON)."""
    done = subprocess.run(
        [sys.executable, "-c", CHILD, str(smollm_path), neighbours],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    out = json.loads(done.stdout.strip().splitlines()[-1])
    cores = out["target"]
    if cores < 2:
        pytest.skip("one physical core: no thread to give up")
    assert 1 <= out["threads_busy"] < cores
    assert out["threads_after"] < cores  # the answer ran on fewer threads
    assert out["busy"] == out["every_thread"]
    assert len(out["warnings"]) == 1 and "decode threads had" in out["warnings"][0]
    if neighbours != "same" and _autogroup():
        assert out["cuts"], "the first decode beside the busy sessions was left to crawl"


def _autogroup() -> bool:
    try:
        return Path("/proc/sys/kernel/sched_autogroup_enabled").read_text().strip() == "1"
    except OSError:
        return False
