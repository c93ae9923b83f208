"""The engine's decode threads (its worker and llama.cpp's threads started from it) run with
the long time slice, so that the event loop and other threads that wake preempt them at once.

In a fresh process, so that no other test's engine or threads are counted.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from llamacpp_integrations.engine.worker.time_slice import DECODE_SLICE_NS

from .helpers import in_fresh_process

SCRIPT = """
import json, os, sys, threading
from llamacpp_integrations.engine import ChatMessage, ChatRequest, Engine, EngineConfig
from llamacpp_integrations.engine.worker.time_slice import ask_for_time_slice, time_slice_ns

probe = []
thread = threading.Thread(target=lambda: probe.append(ask_for_time_slice()))
thread.start(); thread.join()
engine = Engine(EngineConfig(model=sys.argv[1], n_threads=2, n_seq_max=1))
engine.generate(ChatRequest(messages=[ChatMessage(role="user", content="Hi")], max_tokens=4))
python = {thread.native_id: thread.name for thread in threading.enumerate()}
worker = next(tid for tid, name in python.items() if name.startswith("llamacpp-engine:"))
native = [int(tid) for tid in os.listdir("/proc/self/task") if int(tid) not in python]
print(json.dumps({
    "supported": probe[0],
    "worker": time_slice_ns(worker),
    "main": time_slice_ns(threading.main_thread().native_id),
    "native_with_the_slice": sum(time_slice_ns(tid) == time_slice_ns(worker) for tid in native),
}))
engine.close()
"""


@pytest.mark.skipif(sys.platform != "linux", reason="time slices are Linux's")
def test_the_decode_threads_ask_for_the_long_slice(smollm_path: Path) -> None:
    found = in_fresh_process(SCRIPT, str(smollm_path))
    if not found["supported"]:
        pytest.skip("this kernel takes no slice requests")
    assert found["worker"] == DECODE_SLICE_NS
    # llama.cpp's OpenMP team (n_threads=2: one thread beside the worker) inherits it.
    assert found["native_with_the_slice"] >= 1
    # The caller's threads keep the kernel's default: they are the ones that should preempt.
    assert found["main"] != DECODE_SLICE_NS
