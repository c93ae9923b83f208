"""The default thread count on the machines users have: hyperthreads, hybrid CPUs, containers.

Each machine is laid out as Linux lays it out (``/sys/devices/system/cpu/cpuN/topology``,
``/sys/devices/cpu_core``, ``/proc/self/cgroup``, cgroup v1's and v2's files) under a temporary
root. The last tests read the real thing: this process's affinity narrowed in a child, and a
real cgroup with a CPU quota where this machine lets the tests make one.
"""

from __future__ import annotations

import os
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from llamacpp_integrations.engine import EngineConfig
from llamacpp_integrations.engine.cpu_budget import CpuBudget, cpu_list, read_cpu_budget


def write(root: Path, path: str, text: str) -> None:
    file = root / path
    file.parent.mkdir(parents=True, exist_ok=True)
    file.write_text(text, encoding="utf-8")


def topology(root: Path, siblings: dict[int, str]) -> None:
    """Each CPU's hyperthread siblings, as the kernel lists them."""
    for cpu, listed in siblings.items():
        write(root, f"sys/devices/system/cpu/cpu{cpu}/topology/thread_siblings_list", listed + "\n")


def no_cgroup(root: Path) -> None:
    write(root, "proc/self/cgroup", "0::/\n")
    write(root, "sys/fs/cgroup/cgroup.controllers", "cpuset cpu io memory pids\n")


def budget(root: Path, allowed: range | set[int]) -> CpuBudget:
    return read_cpu_budget(allowed=allowed, root=root, platform="linux")


def test_cpu_lists_read_as_the_kernel_writes_them() -> None:
    assert cpu_list("0-3,8,10-11\n") == {0, 1, 2, 3, 8, 10, 11}
    assert cpu_list("5") == {5} and cpu_list("") == set()


# ---- hyperthreads and hybrid CPUs ---------------------------------------------------------------


def test_an_intel_laptop_counts_each_core_once(tmp_path: Path) -> None:
    # Intel numbers a core's second hyperthread after all the first ones: CPU n pairs with n + 4.
    topology(tmp_path, {n: f"{n % 4},{n % 4 + 4}" for n in range(8)})
    no_cgroup(tmp_path)
    found = budget(tmp_path, range(8))
    assert (found.allowed, found.cores, found.quota) == (8, 4, None)
    assert found.threads == 4 and "physical core" in found.reason()
    # taskset -c 0,4: one core's two hyperthreads are one thread's worth.
    assert budget(tmp_path, {0, 4}).threads == 1


def test_an_amd_machine_pairs_neighbouring_cpus(tmp_path: Path) -> None:
    topology(tmp_path, {n: f"{n - n % 2}-{n - n % 2 + 1}" for n in range(16)})
    no_cgroup(tmp_path)
    assert budget(tmp_path, range(16)).threads == 8
    assert budget(tmp_path, {0, 1, 2}).threads == 2


def test_a_machine_without_hyperthreads_keeps_every_cpu(tmp_path: Path) -> None:
    topology(tmp_path, {n: str(n) for n in range(2)})
    no_cgroup(tmp_path)
    assert budget(tmp_path, range(2)) == CpuBudget(allowed=2, cores=2)


def test_a_hybrid_intel_cpu_counts_its_performance_cores(tmp_path: Path) -> None:
    # An i7-12700H: 6 performance cores with two hyperthreads each (CPUs 0-11), 8 efficiency
    # cores (CPUs 12-19); the kernel lists the two kinds as the PMUs cpu_core and cpu_atom.
    siblings = {n: f"{n - n % 2}-{n - n % 2 + 1}" for n in range(12)}
    siblings |= {n: str(n) for n in range(12, 20)}
    topology(tmp_path, siblings)
    write(tmp_path, "sys/devices/cpu_core/cpus", "0-11\n")
    write(tmp_path, "sys/devices/cpu_atom/cpus", "12-19\n")
    no_cgroup(tmp_path)
    found = budget(tmp_path, range(20))
    assert (found.cores, found.performance_cores, found.threads) == (14, 6, 6)
    assert "performance core" in found.reason()
    # Pinned to the efficiency cores alone, those are what there is.
    pinned = budget(tmp_path, range(12, 20))
    assert (pinned.performance_cores, pinned.threads) == (None, 8)


def test_without_sysfs_topology_proc_cpuinfo_tells_the_cores(tmp_path: Path) -> None:
    blocks = [
        f"processor\t: {n}\nvendor_id\t: GenuineIntel\nphysical id\t: {n // 4}\n"
        f"core id\t\t: {n % 2}\n"
        for n in range(8)
    ]  # two packages of two cores, each core's two hyperthreads
    write(tmp_path, "proc/cpuinfo", "\n".join(blocks))
    no_cgroup(tmp_path)
    assert budget(tmp_path, range(8)).cores == 4
    assert budget(tmp_path, {0, 2}).cores == 1


def test_where_nothing_tells_the_topology_every_allowed_cpu_counts(tmp_path: Path) -> None:
    no_cgroup(tmp_path)
    assert budget(tmp_path, range(6)).threads == 6


# ---- containers ---------------------------------------------------------------------------------


def test_a_cgroup_v2_container_limit_caps_the_threads(tmp_path: Path) -> None:
    # docker run --cpus=2.5 on a 16-core host: the container's namespace shows its own cgroup
    # as the top of /sys/fs/cgroup.
    topology(tmp_path, {n: str(n) for n in range(16)})
    no_cgroup(tmp_path)
    write(tmp_path, "sys/fs/cgroup/cpu.max", "250000 100000\n")
    found = budget(tmp_path, range(16))
    assert (found.quota, found.threads) == (2.5, 2)
    assert "2.5 CPUs" in found.reason()


def test_the_tightest_limit_of_a_kubernetes_pod_and_its_container_counts(tmp_path: Path) -> None:
    topology(tmp_path, {n: str(n) for n in range(64)})
    pod = "kubepods.slice/kubepods-pod1.slice"
    write(tmp_path, "proc/self/cgroup", f"0::/{pod}/cri-containerd-abc.scope\n")
    write(tmp_path, "sys/fs/cgroup/cgroup.controllers", "cpu memory\n")
    write(tmp_path, f"sys/fs/cgroup/{pod}/cpu.max", "400000 100000\n")
    write(tmp_path, f"sys/fs/cgroup/{pod}/cri-containerd-abc.scope/cpu.max", "max 100000\n")
    assert budget(tmp_path, range(64)).threads == 4


def test_a_cgroup_v1_container_limit_caps_the_threads(tmp_path: Path) -> None:
    # cgroup v1 in a container: /proc/self/cgroup names the host's path, which the container's
    # mount does not have; the top of the mount is the container's own cgroup.
    topology(tmp_path, {n: str(n) for n in range(8)})
    write(tmp_path, "proc/self/cgroup", "5:memory:/docker/abc\n4:cpu,cpuacct:/docker/abc\n")
    write(tmp_path, "sys/fs/cgroup/cpu,cpuacct/cpu.cfs_quota_us", "150000\n")
    write(tmp_path, "sys/fs/cgroup/cpu,cpuacct/cpu.cfs_period_us", "100000\n")
    found = budget(tmp_path, range(8))
    assert (found.quota, found.threads) == (1.5, 1)


def test_unlimited_cgroups_leave_the_cores(tmp_path: Path) -> None:
    topology(tmp_path, {n: str(n) for n in range(4)})
    write(tmp_path, "proc/self/cgroup", "1:cpu:/\n0::/\n")
    write(tmp_path, "sys/fs/cgroup/cpu/cpu.cfs_quota_us", "-1\n")
    write(tmp_path, "sys/fs/cgroup/cpu/cpu.cfs_period_us", "100000\n")
    write(tmp_path, "sys/fs/cgroup/unified/cgroup.controllers", "\n")
    write(tmp_path, "sys/fs/cgroup/unified/cpu.max", "max 100000\n")
    assert budget(tmp_path, range(4)) == CpuBudget(allowed=4, cores=4)


def test_a_path_outside_the_namespace_reads_only_the_top(tmp_path: Path) -> None:
    topology(tmp_path, {n: str(n) for n in range(4)})
    write(tmp_path, "proc/self/cgroup", "0::/../../other.scope\n")
    write(tmp_path, "sys/fs/cgroup/cgroup.controllers", "cpu\n")
    write(tmp_path, "sys/fs/cgroup/cpu.max", "300000 100000\n")
    write(tmp_path, "sys/other.scope/cpu.max", "100000 100000\n")  # above the mount: never read
    assert budget(tmp_path, range(4)).threads == 3


def test_a_limit_below_one_cpu_still_gets_a_thread() -> None:
    assert CpuBudget(allowed=8, cores=8, quota=0.5).threads == 1


# ---- other systems ------------------------------------------------------------------------------


def test_macos_counts_its_performance_cores() -> None:
    facts = {"hw.physicalcpu": 12, "hw.perflevel0.physicalcpu": 8, "hw.nperflevels": 2}
    found = read_cpu_budget(allowed=range(12), platform="darwin", sysctl=facts.get)
    assert (found.cores, found.performance_cores, found.threads) == (12, 8, 8)
    plain = {"hw.physicalcpu": 8, "hw.perflevel0.physicalcpu": 8, "hw.nperflevels": 1}
    assert read_cpu_budget(allowed=range(8), platform="darwin", sysctl=plain.get).threads == 8
    unknown: dict[str, int] = {}
    assert read_cpu_budget(allowed=range(4), platform="darwin", sysctl=unknown.get).threads == 4


def test_other_systems_keep_the_cpus_the_process_may_run_on() -> None:
    assert read_cpu_budget(allowed=range(6), platform="win32").threads == 6


# ---- the real machine ---------------------------------------------------------------------------


def test_the_engines_default_is_this_machines_budget() -> None:
    found = read_cpu_budget()
    assert 1 <= found.threads <= found.cores <= found.allowed
    assert EngineConfig().threads == found.threads
    assert EngineConfig(n_threads=3).threads == 3


# The child narrows its own affinity or joins the cgroup first (argv: CPUs, cgroup.procs), then
# reads its budget, as an engine made in that process would.
_CHILD = """
import os, sys
from llamacpp_integrations.engine.cpu_budget import read_cpu_budget
cpus, procs = sys.argv[1], sys.argv[2]
if cpus:
    os.sched_setaffinity(0, {int(cpu) for cpu in cpus.split(",")})
if procs:
    with open(procs, "w") as joining:
        joining.write(str(os.getpid()))
budget = read_cpu_budget()
print(budget.allowed, budget.threads, budget.quota)
"""


def child_budget(*, affinity: set[int] | None = None, cgroup_procs: Path | None = None) -> str:
    """What a child process reads, with ``affinity`` or in the cgroup whose ``cgroup.procs``
    is given."""
    cpus = ",".join(str(cpu) for cpu in sorted(affinity or ()))
    done = subprocess.run(
        [sys.executable, "-c", _CHILD, cpus, str(cgroup_procs or "")],
        capture_output=True, text=True, check=True, timeout=60,
    )  # fmt: skip
    return done.stdout.strip()


@pytest.mark.skipif(not hasattr(os, "sched_setaffinity"), reason="no CPU affinity here")
def test_a_real_affinity_narrows_the_budget() -> None:
    cpu = min(os.sched_getaffinity(0))
    allowed, threads, _ = child_budget(affinity={cpu}).split()
    assert (allowed, threads) == ("1", "1")


def _quota_cgroup(quota_us: int) -> Iterator[Path]:
    """A real cgroup (v2 where its cpu controller is on, else v1) with a CPU quota of
    ``quota_us`` per 100 ms, as its ``cgroup.procs``; skips where none can be made."""
    name = f"llamacpp-test-{uuid.uuid4().hex[:8]}"
    v2 = Path("/sys/fs/cgroup")
    control = v2 / "cgroup.subtree_control"
    if control.exists() and "cpu" in control.read_text(encoding="utf-8").split():
        place, files = v2 / name, {"cpu.max": f"{quota_us} 100000"}
    else:
        place = v2 / "cpu" / name
        files = {"cpu.cfs_period_us": "100000", "cpu.cfs_quota_us": str(quota_us)}
    try:
        place.mkdir()
    except OSError as error:
        pytest.skip(f"no cgroup can be made here ({error.strerror})")
    try:
        for file, value in files.items():
            (place / file).write_text(value, encoding="utf-8")
        yield place / "cgroup.procs"
    finally:
        place.rmdir()


@pytest.fixture
def half_a_cpu() -> Iterator[Path]:
    if not sys.platform.startswith("linux"):
        pytest.skip("cgroups are Linux's")
    yield from _quota_cgroup(50_000)


def test_a_real_cgroup_quota_caps_the_budget(half_a_cpu: Path) -> None:
    _, threads, quota = child_budget(cgroup_procs=half_a_cpu).split()
    assert (threads, quota) == ("1", "0.5")
