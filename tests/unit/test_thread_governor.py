"""The decode's thread count follows the machine's load when ``n_threads`` is left to the engine.

``ThreadGovernor`` is pure: it reads the threads' scheduler accounting and ``/proc/stat``
through injected readers, so these tests play a machine through it window by window. The
readers themselves are checked against the kernel's real files, and against a real busy
neighbour.
"""

from __future__ import annotations

import logging
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from llamacpp_integrations.engine.worker.thread_governor import (
    HOLD_S,
    WINDOW_S,
    SchedTimes,
    ThreadGovernor,
    read_idle_ticks,
    read_schedstat,
    read_threads_schedstat,
)

linux_only = pytest.mark.skipif(
    read_threads_schedstat() is None, reason="Linux's scheduler accounting"
)


LOOP = 100  # the event loop's thread id; llama.cpp's decode threads are 1, 2, ...


class Machine:
    """A played machine: each ``window`` says what the process's threads ran and waited, how
    long the worker stepped, and how much of the process's CPUs sat idle, over the next second.
    Its threads: llama.cpp's decode threads (1 is the worker) and the event loop."""

    def __init__(self, cpus: int = 2) -> None:
        self.cpus = range(cpus)
        self.sched = {tid: SchedTimes(0, 0) for tid in (*range(1, cpus + 1), LOOP)}
        self.idle = (0, 0)
        self.idle_reads = 0
        self.now = 100.0
        self.stepped = 0.0
        self.decoding = 0  # the decode threads the governor runs now

    def read_sched(self) -> dict[int, SchedTimes]:
        return dict(self.sched)

    def read_idle(self, cpus: object) -> tuple[int, int]:
        assert cpus is self.cpus
        self.idle_reads += 1
        return self.idle

    def window(
        self,
        *,
        ran: float,
        waited: float = 0.0,
        idle_cores: float = 0.0,
        stepped: float = WINDOW_S,
        threads: tuple[int, ...] | None = None,
    ) -> None:
        """The next second: each decode thread (or each of ``threads``) ran ``ran`` s and
        waited ``waited`` s for a CPU, while the worker stepped for ``stepped`` s."""
        self.now += WINDOW_S
        self.stepped = stepped
        for tid in threads or range(1, self.decoding + 1):
            self.also(tid, ran=ran, waited=waited)
        ticks = 100 * len(self.cpus)  # USER_HZ ticks per second, over every CPU
        self.idle = (self.idle[0] + int(idle_cores * 100), self.idle[1] + ticks)

    def also(self, tid: int, *, ran: float, waited: float = 0.0) -> None:
        """Thread ``tid``'s share of the same second."""
        times = self.sched.get(tid, SchedTimes(0, 0))
        self.sched[tid] = SchedTimes(
            times.run_ns + int(ran * 1e9), times.wait_ns + int(waited * 1e9)
        )

    def tick(self, governor: ThreadGovernor) -> int | None:
        changed = governor.tick(self.now, self.stepped)
        self.decoding = governor.threads
        return changed

    def governor(self, target: int) -> ThreadGovernor:
        governor = ThreadGovernor(
            target, cpus=self.cpus, read_sched=self.read_sched, read_idle=self.read_idle
        )
        assert governor.tick(self.now, 0.0) is None  # the first window starts
        self.decoding = governor.threads
        return governor


def test_a_quiet_machine_keeps_every_thread_and_reads_proc_stat_never() -> None:
    machine = Machine()
    governor = machine.governor(2)
    for _ in range(5):
        machine.window(ran=1.0, waited=0.002)
        assert machine.tick(governor) is None
    assert governor.threads == 2
    assert governor.got_cores == pytest.approx(2.0, abs=0.01)
    assert machine.idle_reads == 0  # only read while a rise is possible


def test_between_windows_a_tick_reads_nothing() -> None:
    machine = Machine()
    governor = machine.governor(2)
    machine.sched[1] = SchedTimes(0, 10**9)  # would drop, if it were read
    assert governor.tick(machine.now + WINDOW_S / 2, WINDOW_S / 2) is None
    assert governor.threads == 2


def test_a_busy_neighbour_drops_to_the_cores_got_and_idle_cores_bring_them_back(
    caplog: pytest.LogCaptureFixture,
) -> None:
    machine = Machine()
    governor = machine.governor(2)
    with caplog.at_level(logging.INFO, logger="llamacpp_integrations.engine"):
        machine.window(ran=0.64, waited=0.36)  # as measured: 2 threads beside one busy process
        assert machine.tick(governor) == 1
        assert governor.got_cores == pytest.approx(1.28)
        # The neighbour stays: no idle CPU, no rise.
        for _ in range(10):
            machine.window(ran=1.0)
            assert machine.tick(governor) is None
        # Another program takes a little of the second core: not enough for a thread.
        machine.window(ran=1.0, idle_cores=0.4)
        assert machine.tick(governor) is None
        # The neighbour leaves halfway through a window.
        machine.window(ran=1.0, idle_cores=0.5)
        assert machine.tick(governor) == 2
    drop, rise = caplog.records
    assert drop.levelno == logging.WARNING and "decoding on 1 thread " in drop.getMessage()
    assert rise.levelno == logging.INFO and "2 threads again" in rise.getMessage()


def test_no_rise_before_the_hold_and_a_rise_taken_back_doubles_it() -> None:
    machine = Machine()
    governor = machine.governor(2)
    machine.window(ran=0.6, waited=0.4)
    assert machine.tick(governor) == 1
    dropped_at = machine.now
    while machine.now + WINDOW_S < dropped_at + HOLD_S:
        machine.window(ran=1.0, idle_cores=1.0)
        assert machine.tick(governor) is None  # idle, but held
    machine.window(ran=1.0, idle_cores=1.0)
    assert machine.tick(governor) == 2
    machine.window(ran=0.6, waited=0.4)  # the neighbour was only resting
    assert machine.tick(governor) == 1
    dropped_at = machine.now
    rose = None
    while rose is None:
        machine.window(ran=1.0, idle_cores=1.0)
        rose = machine.tick(governor)
    assert machine.now - dropped_at >= 2 * HOLD_S


def test_an_idle_engine_rises_at_its_first_step_once_the_neighbour_left() -> None:
    """A window in which the worker sat idle drops nothing, but tells whether the CPUs it
    did not use were idle: the request that comes after the neighbour left starts on every
    thread."""
    machine = Machine()
    governor = machine.governor(2)
    machine.window(ran=0.6, waited=0.4)
    assert machine.tick(governor) == 1
    for _ in range(int(HOLD_S / WINDOW_S) + 2):  # idle beside the neighbour, past the hold
        machine.window(ran=0.0, idle_cores=1.0, stepped=0.01)
        assert machine.tick(governor) is None
    machine.window(ran=0.0, idle_cores=2.0, stepped=0.01)  # the neighbour is gone
    assert machine.tick(governor) == 2


def test_a_half_idle_window_beside_the_neighbour_does_not_rise() -> None:
    """Idle half of the window on one thread, beside a neighbour on the other core: half a
    CPU sat idle, but it was the decode's own."""
    machine = Machine()
    governor = machine.governor(2)
    machine.window(ran=0.6, waited=0.4)
    assert machine.tick(governor) == 1
    machine.now += HOLD_S
    for _ in range(5):
        machine.window(ran=0.5, idle_cores=0.5, stepped=0.5)
        assert machine.tick(governor) is None
    machine.window(ran=0.5, idle_cores=1.5, stepped=0.5)  # the neighbour is gone
    assert machine.tick(governor) == 2


def test_many_cores_lose_only_what_the_neighbour_takes() -> None:
    """8 threads and one busy process on 8 cores: each runnable task gets 8/9 of a core."""
    machine = Machine(cpus=8)
    governor = machine.governor(8)
    machine.window(ran=8 / 9, waited=1 / 9)
    assert machine.tick(governor) == 7
    machine.window(ran=1.0)
    assert machine.tick(governor) is None  # 7 threads on the 7 cores left: no waits


def test_idle_hyperthreads_past_the_target_are_no_room_for_a_thread() -> None:
    """8 cores of 16 hyperthreads: the target is 8, so 8 CPUs sit idle on a quiet machine."""
    machine = Machine(cpus=16)
    governor = machine.governor(8)
    machine.window(ran=8 / 9, waited=1 / 9)
    assert machine.tick(governor) == 7
    for _ in range(20):  # the neighbour stays: 7 threads, 1 neighbour, 8 idle hyperthreads
        machine.window(ran=1.0, idle_cores=8.0)
        assert machine.tick(governor) is None
    machine.window(ran=1.0, idle_cores=9.0)  # it left
    assert machine.tick(governor) == 8


def test_a_small_wait_changes_nothing() -> None:
    machine = Machine(cpus=4)
    governor = machine.governor(4)
    machine.window(ran=0.9, waited=0.1)  # 3.6 cores of 4: less than half a core short
    assert machine.tick(governor) is None


def test_a_mostly_idle_worker_decides_nothing() -> None:
    machine = Machine()
    governor = machine.governor(2)
    machine.window(ran=0.1, waited=0.3, stepped=0.4)  # the event loop's waits, say
    assert machine.tick(governor) is None
    assert governor.got_cores is None


def test_a_starved_decode_thread_drops_it_while_the_worker_sleeps_at_a_barrier() -> None:
    """With the CPUs shared between groups first (autogroup, cgroups), the thread on the core
    the other group wants gets a third of it in long turns, and the worker, on the free core,
    sleeps at each barrier waiting for it: its own accounting shows no wait at all."""
    machine = Machine()
    governor = machine.governor(2)
    machine.window(ran=0.1, threads=(1,))  # the worker: asleep most of the second
    machine.also(2, ran=0.3, waited=0.6)  # the starved decode thread
    assert machine.tick(governor) == 1
    assert governor.got_cores == pytest.approx(0.4)  # the CPU time used, the lower reading


def test_threads_asleep_at_barriers_without_waits_drop_it_too() -> None:
    machine = Machine()
    governor = machine.governor(2)
    machine.window(ran=0.3)  # neither waited: they slept, for each other
    assert machine.tick(governor) == 1


def test_a_busy_event_loop_beside_the_decode_changes_nothing() -> None:
    machine = Machine()
    governor = machine.governor(2)
    machine.window(ran=1.0)
    machine.also(LOOP, ran=0.5, waited=0.1)
    assert machine.tick(governor) is None
    assert governor.got_cores == pytest.approx(2 * 2.5 / 2.6)


def test_a_thread_started_within_a_window_counts_from_its_start() -> None:
    """llama.cpp starts its threads at the first decode: on a quiet machine, the first window
    must not read as a decode on one core."""
    machine = Machine()
    del machine.sched[2]  # not started yet when the window began
    governor = machine.governor(2)
    machine.window(ran=1.0)
    assert machine.tick(governor) is None
    assert governor.got_cores == pytest.approx(2.0)


def test_a_thread_that_ended_within_a_window_is_left_out() -> None:
    machine = Machine()
    machine.also(9, ran=50.0)
    governor = machine.governor(2)
    machine.window(ran=1.0)
    del machine.sched[9]
    assert machine.tick(governor) is None
    assert governor.got_cores == pytest.approx(2.0)


def test_it_stays_off_with_one_thread_or_without_the_accounting() -> None:
    machine = Machine()
    assert not machine.governor(1).enabled
    missing = ThreadGovernor(4, cpus=range(4), read_sched=lambda: None, read_idle=lambda c: None)
    assert not missing.enabled
    assert missing.tick(0.0, 0.0) is None and missing.tick(9.0, 9.0) is None


def test_a_decode_cut_short_drops_from_its_reading_and_starts_a_window(
    caplog: pytest.LogCaptureFixture,
) -> None:
    machine = Machine()
    governor = machine.governor(2)
    machine.window(ran=0.2, stepped=0.2)  # the decode under way when the watch read it
    with caplog.at_level(logging.INFO, logger="llamacpp_integrations.engine"):
        assert governor.cut(machine.now, 0.9) == 1
    assert governor.threads == 1 and governor.got_cores == 0.9
    (drop,) = caplog.records
    assert drop.levelno == logging.WARNING and "about 0.9 cores" in drop.getMessage()
    # The window starts at the cut: what the step ran before it is not read again.
    machine.window(ran=1.0)
    assert machine.tick(governor) is None
    assert governor.got_cores == pytest.approx(1.0)


def test_a_cut_with_cores_enough_or_at_one_thread_drops_nothing() -> None:
    machine = Machine()
    governor = machine.governor(2)
    assert governor.cut(machine.now, 1.6) is None
    assert governor.threads == 2
    assert governor.cut(machine.now, 0.5) == 1
    assert governor.cut(machine.now, 0.1) is None  # one thread is the floor
    assert ThreadGovernor(1, cpus=range(1), read_sched=dict).cut(0.0, 0.0) is None


# ---- the readers, on the kernel's own files ------------------------------------------------

PROC_STAT = """cpu  7837310 238198 541144 2645108 18902 0 4529 25656 0 0
cpu0 3806504 128189 242182 1460382 4273 0 1172 12474 0 0
cpu1 4030806 110008 298961 1184725 14629 0 3356 13182 0 0
cpu2 100 0 0 900 0 0 0 0 7 0
intr 1234 5 6
ctxt 99
"""


def test_idle_ticks_sum_the_cpus_asked_for(tmp_path: Path) -> None:
    stat = tmp_path / "stat"
    stat.write_text(PROC_STAT, encoding="ascii")
    idle, total = read_idle_ticks({1, 2}, str(stat))
    assert idle == 1184725 + 14629 + 900
    assert total == (4030806 + 110008 + 298961 + 1184725 + 14629 + 0 + 3356 + 13182) + 1000
    assert read_idle_ticks({7}, str(stat)) is None
    assert read_idle_ticks({0}, str(tmp_path / "missing")) is None


def test_schedstat_reads_three_fields(tmp_path: Path) -> None:
    file = tmp_path / "schedstat"
    file.write_text("998485100 15373 412\n", encoding="ascii")
    assert read_schedstat(str(file)) == SchedTimes(998485100, 15373)
    file.write_text("", encoding="ascii")
    assert read_schedstat(str(file)) is None


def test_every_thread_of_a_task_folder(tmp_path: Path) -> None:
    for tid, line in ((101, "5 6 7"), (102, "8 9 1")):
        (tmp_path / str(tid)).mkdir()
        (tmp_path / str(tid) / "schedstat").write_text(line, encoding="ascii")
    (tmp_path / "103").mkdir()  # ended between the listing and the read
    assert read_threads_schedstat(str(tmp_path)) == {101: SchedTimes(5, 6), 102: SchedTimes(8, 9)}
    assert read_threads_schedstat(str(tmp_path / "missing")) is None


@linux_only
def test_the_real_accounting_sees_a_busy_neighbour() -> None:
    """A thread spinning on the same single CPU as a busy process waits for it about half the
    time, and the kernel's accounting says so."""
    cpu = min(os.sched_getaffinity(0))

    def spin_for(seconds: float) -> SchedTimes:
        out: list[SchedTimes] = []

        def spin() -> None:
            os.sched_setaffinity(0, {cpu})
            me = threading.get_native_id()
            before = read_threads_schedstat()
            end = time.monotonic() + seconds
            while time.monotonic() < end:
                pass
            after = read_threads_schedstat()
            assert before is not None and after is not None
            first, last = before[me], after[me]
            out.append(SchedTimes(last.run_ns - first.run_ns, last.wait_ns - first.wait_ns))

        thread = threading.Thread(target=spin)
        thread.start()
        thread.join()
        return out[0]

    neighbour = subprocess.Popen(
        [sys.executable, "-c", f"import os; os.sched_setaffinity(0, {{{cpu}}})\nwhile True: pass"]
    )
    try:
        time.sleep(0.2)
        shared = spin_for(1.0)
    finally:
        neighbour.kill()
        neighbour.wait()
    assert shared.wait_ns > 0.25 * (shared.run_ns + shared.wait_ns)
    idle = read_idle_ticks(os.sched_getaffinity(0))
    assert idle is not None and 0 <= idle[0] <= idle[1]
