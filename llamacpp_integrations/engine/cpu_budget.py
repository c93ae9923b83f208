"""How many threads llama.cpp's CPU kernels get by default: the cores this process may really use.

Counting CPUs the way ``os.cpu_count`` does overshoots on the machines users have:

* **Hyperthreads.** A laptop's 8 cores show as 16 CPUs. Decoding waits on memory, so a second
  thread on a core's other hyperthread only competes with the first, and every extra thread is
  one more to wait for at each of a decode's barriers. llama.cpp's own default (and
  llama-bench's, and llama-server's) is one thread per physical core.
* **Hybrid CPUs.** Intel's efficiency cores (and Apple's) finish their share of a step last, and
  the whole step waits for them: where the kernel tells the two kinds apart, only performance
  cores count, as in llama.cpp.
* **Containers.** A cgroup's CPU limit (Docker's ``--cpus``, a Kubernetes pod's ``limits.cpu``,
  a Ray cluster's pods) does not shrink the CPUs a process sees: a pod limited to 4 CPUs on a
  64-core node sees 64. Threads past the limit spend the period's quota early, then the whole
  cgroup (the event loop included) is stopped until the next period, every period.
* **Affinity.** ``taskset`` and a container's cpuset narrow the CPUs the process may run on.

``read_cpu_budget`` reads all four from Linux's ``/sys`` and ``/proc`` (cgroup v1 and v2), from
``sysctl`` on macOS, and falls back to the CPUs the process may run on elsewhere; ``threads`` is
the default of ``EngineConfig.n_threads``. Nothing here is native: files, and on macOS one libc
call.
"""

from __future__ import annotations

import math
import os
import sys
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path

__all__ = ["CpuBudget", "cpu_list", "own_cpus", "read_cpu_budget"]


@dataclass(frozen=True)
class CpuBudget:
    """The CPUs this process may use, as the default thread count weighs them.

    Attributes:
        allowed: Logical CPUs the process may run on (its affinity).
        cores: Physical cores among them (a core's hyperthreads counted once).
        performance_cores: On a hybrid CPU, the performance cores among ``cores``; ``None``
            where the CPU is not hybrid or does not say.
        quota: The CPU time the process's cgroup allows, in CPUs (``2.5``: two and a half
            CPUs' worth per period); ``None`` without a limit.
    """

    allowed: int
    cores: int
    performance_cores: int | None = None
    quota: float | None = None

    @property
    def threads(self) -> int:
        """The default thread count: one per physical (performance) core, no more than the
        cgroup's whole CPUs, at least one."""
        cores = self.performance_cores or self.cores
        if self.quota is not None:
            cores = min(cores, math.floor(self.quota))
        return max(1, cores)

    def reason(self) -> str:
        """Why ``threads`` is what it is, in words (the machine report's advice)."""
        cores = self.performance_cores or self.cores
        if self.quota is not None and math.floor(self.quota) < cores:
            return (
                f"the cgroup allows {self.quota:g} CPUs: threads past that use up each "
                "period's quota early, and the whole process then waits for the next period"
            )
        if self.performance_cores:
            return (
                "one thread per performance core: a step waits for its slowest thread, and "
                "an efficiency core's is slower"
            )
        return (
            "one thread per physical core: decoding waits on memory, and a second thread "
            "on a core's other hyperthread only competes with the first"
        )


def read_cpu_budget(
    *,
    allowed: Iterable[int] | None = None,
    root: Path = Path("/"),
    platform: str = sys.platform,
    sysctl: Callable[[str], int | None] | None = None,
) -> CpuBudget:
    """This process's ``CpuBudget``. ``allowed`` (its affinity), ``root`` (where ``sys`` and
    ``proc`` are), ``platform`` and ``sysctl`` (macOS's) are the machine's own by default:
    tests give others."""
    logical = sorted(set(own_cpus() if allowed is None else allowed))
    if platform.startswith("linux"):
        return CpuBudget(
            allowed=len(logical),
            cores=_linux_cores(root, logical) or len(logical),
            performance_cores=_linux_performance_cores(root, logical),
            quota=_cgroup_quota(root),
        )
    if platform == "darwin":
        read = sysctl or _sysctl_int
        cores = read("hw.physicalcpu") or len(logical)
        performance = read("hw.perflevel0.physicalcpu")
        hybrid = read("hw.nperflevels") or 1
        return CpuBudget(len(logical), cores, performance if hybrid > 1 else None)
    return CpuBudget(len(logical), len(logical))  # Windows and others: no topology read


def own_cpus() -> list[int]:
    """The logical CPUs this process may run on (its affinity; every CPU where the OS does
    not say)."""
    cpus = sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else []
    return cpus or list(range(os.cpu_count() or 1))


def cpu_list(text: str) -> set[int]:
    """The CPUs of a kernel CPU list (``"0-3,8,10-11"``); empty for an empty list."""
    cpus: set[int] = set()
    for part in text.strip().split(","):
        if not part:
            continue
        first, _, last = part.partition("-")
        cpus.update(range(int(first), int(last or first) + 1))
    return cpus


def _read(path: Path) -> str | None:
    try:
        return path.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return None


def _linux_cores(root: Path, logical: list[int]) -> int | None:
    """Physical cores among ``logical``: from each CPU's list of hyperthread siblings in sysfs,
    else ``/proc/cpuinfo``'s package and core ids; ``None`` where neither says."""
    cores: set[frozenset[int]] = set()
    topology = root / "sys/devices/system/cpu"
    for cpu in logical:
        siblings = _read(topology / f"cpu{cpu}/topology/thread_siblings_list")
        if siblings is None:
            break
        try:
            cores.add(frozenset(cpu_list(siblings)))
        except ValueError:
            break
    else:
        if cores:
            return len(cores)
    return _cpuinfo_cores(root, set(logical))


def _cpuinfo_cores(root: Path, logical: set[int]) -> int | None:
    text = _read(root / "proc/cpuinfo")
    if text is None:
        return None
    cores: set[tuple[str, str]] = set()
    for block in text.split("\n\n"):
        fields = {
            key.strip(): value.strip()
            for key, _, value in (line.partition(":") for line in block.splitlines())
        }
        processor = fields.get("processor", "")
        if "core id" in fields and processor.isdigit() and int(processor) in logical:
            cores.add((fields.get("physical id", "0"), fields["core id"]))
    return len(cores) or None


def _linux_performance_cores(root: Path, logical: list[int]) -> int | None:
    """On a hybrid Intel CPU (the kernel lists its two kinds of cores as two PMUs,
    ``cpu_core`` and ``cpu_atom``), the physical performance cores among ``logical``."""
    big = _read(root / "sys/devices/cpu_core/cpus")
    small = _read(root / "sys/devices/cpu_atom/cpus")
    if big is None or small is None:
        return None
    try:
        big_cpus = cpu_list(big)
    except ValueError:
        return None
    performance = [cpu for cpu in logical if cpu in big_cpus]
    if not performance or len(performance) == len(logical):
        return None  # only one kind allowed here: nothing to leave out
    return _linux_cores(root, performance) or len(performance)


def _cgroup_quota(root: Path) -> float | None:
    """The tightest CPU limit on this process's cgroup and its ancestors, in CPUs (cgroup v2's
    ``cpu.max``, v1's ``cpu.cfs_quota_us`` over ``cpu.cfs_period_us``); ``None`` without one."""
    membership = _read(root / "proc/self/cgroup")
    if membership is None:
        return None
    limits: list[float] = []
    mounts = root / "sys/fs/cgroup"
    for line in membership.splitlines():
        number, _, rest = line.partition(":")
        controllers, _, path = rest.partition(":")
        if number == "0" and controllers == "":  # v2: one hierarchy
            for mount in (mounts, mounts / "unified"):
                if (mount / "cgroup.controllers").exists():
                    limits += _limits(mount, path, _v2_limit)
                    break
        elif "cpu" in controllers.split(","):  # v1: the cpu controller's hierarchy
            limits += _limits(mounts / controllers, path, _v1_limit)
            if not (mounts / controllers).is_dir():
                limits += _limits(mounts / "cpu", path, _v1_limit)
    return min(limits) if limits else None


def _limits(mount: Path, path: str, limit: Callable[[Path], float | None]) -> list[float]:
    """The limits set on ``path``'s cgroup and each of its ancestors under ``mount``. In a
    container the mount's top is the container's own cgroup while ``path`` names the host's:
    the parts that do not exist there are skipped, and the top is read last."""
    parts = [part for part in path.strip("/").split("/") if part and part != "."]
    if ".." in parts:  # a cgroup outside this namespace's view: only the top is ours to read
        parts = []
    found = []
    for depth in range(len(parts), -1, -1):
        directory = mount.joinpath(*parts[:depth])
        value = limit(directory) if directory.is_dir() else None
        if value is not None:
            found.append(value)
    return found


def _v2_limit(directory: Path) -> float | None:
    text = _read(directory / "cpu.max")
    if text is None:
        return None
    quota, _, period = text.strip().partition(" ")
    try:
        return None if quota == "max" else int(quota) / int(period or "100000")
    except (ValueError, ZeroDivisionError):
        return None


def _v1_limit(directory: Path) -> float | None:
    quota, period = _read(directory / "cpu.cfs_quota_us"), _read(directory / "cpu.cfs_period_us")
    if quota is None or period is None:
        return None
    try:
        value, per = int(quota), int(period)
    except ValueError:
        return None
    return None if value <= 0 or per <= 0 else value / per


def _sysctl_int(name: str) -> int | None:
    """An integer ``sysctl`` of macOS (``hw.physicalcpu``...), ``None`` where it has none."""
    # Imported here: ctypes opens a library as it loads, which must not happen before
    # llama.cpp's libraries load with the OpenMP settings (``openmp_env.py``).
    import ctypes
    import ctypes.util

    path = ctypes.util.find_library("c")
    if path is None:
        return None
    libc = ctypes.CDLL(path)
    value, size = ctypes.c_int64(0), ctypes.c_size_t(ctypes.sizeof(ctypes.c_int64))
    if libc.sysctlbyname(name.encode(), ctypes.byref(value), ctypes.byref(size), None, 0) != 0:
        return None
    return int(value.value) if size.value in (4, 8) else None
