"""A decode that lost its cores is stopped while it runs (``engine/worker/stall_watch.py``).

The watch's looks are played with an injected accounting, as the governor's windows are in
``test_thread_governor.py``; one test runs its thread.
"""

from __future__ import annotations

import threading
import time

import pytest

from llamacpp_integrations.engine.worker.stall_watch import WATCH_S, StallWatch
from llamacpp_integrations.engine.worker.thread_governor import SchedTimes


class Decode:
    """This process's threads while a decode runs: llama.cpp's threads 1 and 2, each running
    ``ran`` of every second and waiting ``waited`` for a CPU; and the calls to stop it."""

    def __init__(self, *, ran: float, waited: float = 0.0) -> None:
        self.ran, self.waited = ran, waited
        self.now = 50.0
        self.sched = {1: SchedTimes(0, 0), 2: SchedTimes(0, 0)}
        self.reads = 0
        self.stops = 0
        self.during_read: list[object] = []  # called as the accounting is read

    def read(self) -> dict[int, SchedTimes]:
        self.reads += 1
        for call in self.during_read:
            call()  # type: ignore[operator]
        return dict(self.sched)

    def stop(self) -> None:
        self.stops += 1

    def watch(self) -> StallWatch:
        return StallWatch(read_sched=self.read, clock=self.clock, start=False)

    def clock(self) -> float:
        return self.now

    def look(self, watch: StallWatch) -> bool:
        """One look ``WATCH_S`` after the last."""
        self.now += WATCH_S
        for tid, times in self.sched.items():
            self.sched[tid] = SchedTimes(
                times.run_ns + int(self.ran * WATCH_S * 1e9),
                times.wait_ns + int(self.waited * WATCH_S * 1e9),
            )
        return watch.look(self.now)


def test_a_decode_beside_a_busy_group_is_stopped_on_the_second_look() -> None:
    """As measured beside a busy program in another session: the two threads share one core."""
    decode = Decode(ran=0.5, waited=0.5)
    watch = decode.watch()
    watch.decoding(2, decode.stop)
    assert decode.look(watch)  # the first look only reads where the decode stands
    assert decode.stops == 0 and decode.reads == 1
    assert decode.look(watch)
    assert decode.stops == 1
    assert watch.got_cores == pytest.approx(1.0)
    assert watch.decoded()  # the worker learns it asked
    assert not watch.decoded()


def test_a_decode_with_its_cores_runs_on() -> None:
    decode = Decode(ran=1.0, waited=0.05)
    watch = decode.watch()
    watch.decoding(2, decode.stop)
    for _ in range(20):  # a long prompt's read: five seconds
        assert decode.look(watch)
    assert decode.stops == 0 and watch.got_cores is None
    assert not watch.decoded()


def test_short_decodes_are_not_read_and_none_is_judged_on_an_earlier_one() -> None:
    decode = Decode(ran=0.4)
    watch = decode.watch()
    for _ in range(5):  # steps of milliseconds: each look finds a new one, too young to read
        decode.now += WATCH_S
        watch.decoding(2, decode.stop)
        decode.now += 0.01
        assert watch.look(decode.now)
        watch.decoded()
    assert decode.reads == 0
    for _ in range(5):  # older ones: each read from its own first reading
        watch.decoding(2, decode.stop)
        assert decode.look(watch)
        watch.decoded()
    assert decode.reads == 5 and decode.stops == 0


def test_nothing_is_read_between_decodes_or_on_one_thread() -> None:
    decode = Decode(ran=0.1)
    watch = decode.watch()
    assert not decode.look(watch)  # no decode: the thread goes to sleep
    watch.decoding(1, decode.stop)
    for _ in range(3):
        assert decode.look(watch)
    assert decode.reads == 0 and decode.stops == 0


def test_a_decode_that_ends_while_it_is_read_is_not_stopped() -> None:
    """The request only lands while the worker says the decode runs: the context may be
    decoding something else (an image) a moment later."""
    decode = Decode(ran=0.3)
    watch = decode.watch()
    watch.decoding(2, decode.stop)
    decode.look(watch)
    decode.during_read.append(watch.decoded)
    decode.look(watch)
    assert decode.stops == 0 and watch.got_cores is None


def test_its_thread_sleeps_until_a_decode_and_stops_it() -> None:
    decode = Decode(ran=0.0)
    decode.during_read.append(lambda: decode.sched.update({1: SchedTimes(decode.reads, 0)}))
    stopped = threading.Event()  # each look finds a nanosecond more run: no cores to speak of
    watch = StallWatch(read_sched=decode.read)
    try:
        time.sleep(3 * WATCH_S)
        assert decode.reads == 0  # asleep: no decode yet
        watch.decoding(2, stopped.set)
        assert stopped.wait(timeout=30)  # a bound against a hang, not a measurement
        assert watch.decoded()
    finally:
        watch.close()
    assert watch._thread is not None and not watch._thread.is_alive()
