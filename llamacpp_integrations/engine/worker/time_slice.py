"""The decode threads ask Linux's scheduler for long turns, so that threads that wake run at once.

On a machine whose cores all decode, a thread that wakes (the event loop reading a token, an
HTTP server answering, a caller's reader) needs a core that a decode thread holds. Linux's fair
scheduler (EEVDF, kernel 6.6 and later) lets the running thread finish its time slice first,
unless the one that wakes asked for a shorter slice than the running one (kernel 6.12 and later
honour a slice asked for with ``sched_setattr``). So the engine's worker asks for a slice longer
than the default (about 0.7 ms times 1 + log2 of the core count, up to 8 cores): every thread
that keeps the default then takes a core from a decode thread as soon as it wakes. On a 2-core
machine that halved the P99 of an event loop's gaps beside 16 streams (docs/performance.md).
Each thread's share of the CPU is unchanged (it follows the threads' weights, which this leaves
alone); only who runs first on a wake-up changes.

The worker asks before it loads the model, so the threads llama.cpp starts from it (OpenMP's
team) inherit the slice. Elsewhere (another OS, an older kernel, a sandbox that forbids the
call) nothing changes and nothing fails.
"""

from __future__ import annotations

import ctypes
import logging
import platform
import sys
import threading

__all__ = ["DECODE_SLICE_NS", "ask_for_time_slice", "time_slice_ns"]

log = logging.getLogger(__name__)

DECODE_SLICE_NS = 20_000_000
"""20 ms: far above the default slice, so every thread with the default one preempts a decode
thread on waking; well under the kernel's 100 ms ceiling. A thread that wants the CPU without
waking (another process's busy loop) waits at most this long for its turn, as it waits for the
default slice of any busy thread."""

_SCHED_SETATTR = {"x86_64": 314, "aarch64": 274, "arm64": 274}
_SCHED_GETATTR = {"x86_64": 315, "aarch64": 275, "arm64": 275}
_RESET_ON_FORK = 0x01
_FAIR_POLICIES = frozenset({0, 3})  # SCHED_OTHER and SCHED_BATCH: the ones a slice applies to


class _SchedAttr(ctypes.Structure):
    # struct sched_attr, its first version (48 bytes), as in <linux/sched/types.h>.
    _fields_ = [
        ("size", ctypes.c_uint32),
        ("sched_policy", ctypes.c_uint32),
        ("sched_flags", ctypes.c_uint64),
        ("sched_nice", ctypes.c_int32),
        ("sched_priority", ctypes.c_uint32),
        ("sched_runtime", ctypes.c_uint64),
        ("sched_deadline", ctypes.c_uint64),
        ("sched_period", ctypes.c_uint64),
    ]


def _syscalls() -> tuple[ctypes.CDLL, int, int] | None:
    if sys.platform != "linux":
        return None
    machine = platform.machine()
    if machine not in _SCHED_SETATTR:
        return None
    return ctypes.CDLL(None, use_errno=True), _SCHED_SETATTR[machine], _SCHED_GETATTR[machine]


def _get(libc: ctypes.CDLL, number: int, tid: int) -> _SchedAttr | None:
    attr = _SchedAttr()
    if libc.syscall(number, tid, ctypes.byref(attr), ctypes.sizeof(attr), 0) != 0:
        return None
    return attr


def time_slice_ns(tid: int | None = None) -> int | None:
    """The slice a thread (the calling one by default) has asked for, or the kernel's default
    that it runs with (the kernel reports either); None where that cannot be read."""
    calls = _syscalls()
    if calls is None:
        return None
    libc, _, getattr_number = calls
    attr = _get(libc, getattr_number, threading.get_native_id() if tid is None else tid)
    return None if attr is None else int(attr.sched_runtime)


def ask_for_time_slice(slice_ns: int = DECODE_SLICE_NS) -> bool:
    """Ask the scheduler to give the calling thread, and the threads it starts from now on,
    turns of ``slice_ns``; its policy and nice value stay as they are. True where the kernel
    took the request (a kernel before 6.12 takes it and ignores it)."""
    calls = _syscalls()
    if calls is None:
        return False
    libc, setattr_number, getattr_number = calls
    attr = _get(libc, getattr_number, 0)
    if attr is None or attr.sched_policy not in _FAIR_POLICIES:
        return False  # a real-time or idle policy someone chose on purpose: leave it
    attr.size = ctypes.sizeof(attr)
    attr.sched_flags &= _RESET_ON_FORK  # the only flag that is a setting rather than a request
    attr.sched_runtime = slice_ns
    if libc.syscall(setattr_number, 0, ctypes.byref(attr), 0) != 0:
        log.debug("the scheduler refused a time slice: errno %d", ctypes.get_errno())
        return False
    return True
