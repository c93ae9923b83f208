"""The engine's worker asks Linux for long time slices and keeps the rest of its scheduling.

Each check runs in a thread of its own, so the test process's threads keep what they had.
Where the kernel takes no slice request (another OS, an older kernel, a sandbox), the request
must fail quietly, which the first test checks everywhere.
"""

from __future__ import annotations

import os
import sys
import threading
from collections.abc import Callable
from typing import TypeVar

import pytest

from llamacpp_integrations.engine.worker.time_slice import (
    DECODE_SLICE_NS,
    ask_for_time_slice,
    time_slice_ns,
)

T = TypeVar("T")


def in_a_thread(work: Callable[[], T]) -> T:
    out: list[T] = []
    thread = threading.Thread(target=lambda: out.append(work()))
    thread.start()
    thread.join()
    return out[0]


def _supported() -> bool:
    return in_a_thread(ask_for_time_slice)


needs_slices = pytest.mark.skipif(
    sys.platform != "linux" or not _supported(), reason="the kernel takes no slice requests"
)


def test_a_request_never_fails() -> None:
    assert in_a_thread(ask_for_time_slice) in (True, False)


@needs_slices
def test_the_thread_and_the_threads_it_starts_get_the_slice() -> None:
    def work() -> tuple[int | None, int | None, int | None]:
        ask_for_time_slice(7_000_000)
        child = in_a_thread(time_slice_ns)  # as llama.cpp's OpenMP threads start from it
        return time_slice_ns(), child, time_slice_ns(threading.get_native_id())

    own, child, by_id = in_a_thread(work)
    assert own == child == by_id == 7_000_000
    assert DECODE_SLICE_NS > 3_000_000  # above the default of any machine up to 16 cores


@needs_slices
def test_the_nice_value_and_the_batch_policy_are_kept() -> None:
    def work() -> tuple[int, int]:
        tid = threading.get_native_id()
        os.setpriority(os.PRIO_PROCESS, tid, 3)  # raising one's nice needs no privilege
        os.sched_setscheduler(0, os.SCHED_BATCH, os.sched_param(0))
        assert ask_for_time_slice()
        return os.getpriority(os.PRIO_PROCESS, tid), os.sched_getscheduler(0)

    assert in_a_thread(work) == (3, os.SCHED_BATCH)
