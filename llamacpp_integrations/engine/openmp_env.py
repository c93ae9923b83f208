"""The spin-wait settings GNU OpenMP reads once, as llama.cpp's CPU backend loads it.

llama.cpp's CPU kernels run on an OpenMP team per thread that calls ``llama_decode``; an
engine's worker is one such thread, so two models in one process (a chat model beside an
embedding model, say) make two teams. GNU OpenMP (libgomp) counts the threads of every team it
ever started and, as soon as they outnumber the CPUs, cuts the spin of every barrier wait from
its default to 100 turns before sleeping on a futex, for all teams, idle ones included. A
decode passes hundreds of barriers, and each one then costs a sleep and a wake-up: measured on
2 cores, one model's decode took half as long again or more once a second model's engine had
served a single request, and stayed so while that engine sat idle.

``OMP_WAIT_POLICY=active`` with ``GOMP_SPINCOUNT=300000`` keeps the spin of a team with the CPUs
to itself at libgomp's default (300000 turns, about 3 ms, then a sleep: an idle engine uses no
CPU) and raises the spin past that count of threads from 100 to 1000 turns (libgomp's most),
which was enough for the decode to keep its pace. libgomp reads the environment only when it is
loaded, so the settings are put there right before ``llama_cpp`` is first imported and taken
away right after: later OpenMP runtimes (another library's, LLVM's) and child processes never
see them. Where the user set either variable, nothing changes; where llama.cpp's libgomp was
loaded before (``llama_cpp`` imported first), the settings come too late and do nothing.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator, MutableMapping
from contextlib import contextmanager

__all__ = ["SPIN_SETTINGS", "openmp_spin_settings"]

# What libgomp reads as it loads: with an active policy its spin past the CPUs' count is 1000
# turns (100 without), and an explicit count keeps the spin up to it at the default's length
# (an active policy alone would spin for minutes before sleeping).
SPIN_SETTINGS = {"OMP_WAIT_POLICY": "active", "GOMP_SPINCOUNT": "300000"}


@contextmanager
def openmp_spin_settings(
    environ: MutableMapping[str, str] | None = None, *, platform: str = sys.platform
) -> Iterator[bool]:
    """Put ``SPIN_SETTINGS`` in the environment for the block (the import of ``llama_cpp``)
    and take them away after; yields whether it did. It does nothing off Linux (llama.cpp's
    builds for macOS and Windows do not use libgomp) or where the user set either variable."""
    env = os.environ if environ is None else environ
    if not platform.startswith("linux") or any(name in env for name in SPIN_SETTINGS):
        yield False
        return
    env.update(SPIN_SETTINGS)
    try:
        yield True
    finally:
        for name, value in SPIN_SETTINGS.items():
            if env.get(name) == value:
                del env[name]
