"""PeriodicBatch: the one daemon loop behind the heartbeats and the dispatch stamps."""

from __future__ import annotations

import logging
import os
import signal
import threading
import time
from collections.abc import Iterator

import pytest

from planq.domain.errors import LedgerUnavailableError
from planq.domain.outage import OutageMonitor
from planq.domain.periodic import PeriodicBatch
from tests.support import wait_for

LOG = logging.getLogger("planq.test.periodic")


class Batch:
    """An owner with work to write: each tick writes `work` items, or raises what is queued."""

    def __init__(self, work: int = 1) -> None:
        self.work = work
        self.raises: list[Exception] = []
        self.ticks: list[float] = []  #: when each tick ran (monotonic)
        self.written = 0
        self.lock = threading.Lock()

    def tick(self) -> int:
        with self.lock:
            self.ticks.append(time.monotonic())
            if self.raises:
                raise self.raises.pop(0)
            self.written += self.work
            return self.work

    def idle(self) -> bool:
        with self.lock:
            return self.work == 0

    def count(self) -> int:
        with self.lock:
            return len(self.ticks)


def make(batch: Batch, interval: float, **kwargs: object) -> PeriodicBatch:
    return PeriodicBatch(
        batch.tick,
        interval,
        what="test batch",
        idle=batch.idle,
        name="planq-test-periodic",
        log=LOG,
        **kwargs,  # type: ignore[arg-type]
    )


@pytest.fixture
def loops() -> Iterator[list[PeriodicBatch]]:
    made: list[PeriodicBatch] = []
    yield made
    for loop in made:
        loop.close()


def test_it_ticks_every_interval(loops: list[PeriodicBatch]) -> None:
    batch = Batch()
    loop = make(batch, 0.05)
    loops.append(loop)
    started = time.monotonic()
    loop.start()
    wait_for(lambda: batch.count() >= 4, timeout=10, what="four ticks")
    assert batch.ticks[0] - started >= 0.04  # the first tick waits one interval too
    gaps = [b - a for a, b in zip(batch.ticks, batch.ticks[1:], strict=False)]
    assert all(gap >= 0.04 for gap in gaps), gaps


def test_an_outage_is_retried_at_the_short_period_and_reported_once(
    loops: list[PeriodicBatch], caplog: pytest.LogCaptureFixture
) -> None:
    batch = Batch()
    batch.raises = [LedgerUnavailableError("connection refused")] * 3
    monitor = OutageMonitor(log=LOG)
    loop = make(batch, 3.0, outages=monitor)  # retry_period(3.0) is 1 s
    loops.append(loop)
    with caplog.at_level(logging.INFO, logger=LOG.name):
        loop.start()
        wait_for(lambda: batch.written >= 1, timeout=20, what="a write after three failures")
    mine = [r for r in caplog.records if r.threadName == "planq-test-periodic"]
    gaps = [b - a for a, b in zip(batch.ticks, batch.ticks[1:], strict=False)]
    assert all(gap < 2.0 for gap in gaps[:3]), gaps  # not 3 s apart while it is away
    assert monitor.outages == 1 and not monitor.in_outage
    levels = [r.levelname for r in mine if r.levelno >= logging.INFO]
    assert levels == ["WARNING", "INFO"], [r.getMessage() for r in mine]  # start, recovery
    assert not loop.failing


def test_another_error_is_one_redacted_line_and_the_loop_goes_on(
    loops: list[PeriodicBatch], caplog: pytest.LogCaptureFixture
) -> None:
    batch = Batch()
    batch.raises = [ValueError("bad row, password=hunter2")]
    monitor = OutageMonitor(log=LOG)
    loop = make(batch, 0.02, outages=monitor)
    loops.append(loop)
    with caplog.at_level(logging.WARNING, logger=LOG.name):
        loop.start()
        wait_for(lambda: batch.written >= 2, timeout=10, what="ticks after the failure")
    lines = [r.getMessage() for r in caplog.records if r.threadName == "planq-test-periodic"]
    assert len(lines) == 1 and lines[0].startswith("test batch failed"), lines
    assert "\n" not in lines[0] and "hunter2" not in lines[0]
    assert monitor.outages == 0  # not an outage


def test_idle_ends_the_thread_and_new_work_starts_another(loops: list[PeriodicBatch]) -> None:
    batch = Batch()
    loop = make(batch, 0.02)
    loops.append(loop)
    loop.start()
    wait_for(lambda: batch.count() >= 1, timeout=10, what="a tick")
    with batch.lock:
        batch.work = 0
    wait_for(lambda: not loop.running, timeout=10, what="the idle loop to end")
    ticks = batch.count()
    with batch.lock:
        batch.work = 1
    assert loop.start() and loop.running
    wait_for(lambda: batch.count() > ticks, timeout=10, what="a tick after restarting")


def test_a_wake_from_a_signal_handler_ticks_at_once(loops: list[PeriodicBatch]) -> None:
    batch = Batch()
    notes: list[bytes] = []
    loop = make(batch, 3600.0, on_wake=notes.append)
    loops.append(loop)
    loop.start()
    previous = signal.signal(signal.SIGUSR1, lambda *_: loop.wake(b"x"))
    try:
        os.kill(os.getpid(), signal.SIGUSR1)
        wait_for(lambda: batch.count() == 1, timeout=10, what="a tick on the wake-up")
    finally:
        signal.signal(signal.SIGUSR1, previous)
    assert notes == [b"x"]


def test_stop_joins_and_close_ends_it_for_good(loops: list[PeriodicBatch]) -> None:
    batch = Batch()
    loop = make(batch, 3600.0)
    loop.start()
    thread = next(t for t in threading.enumerate() if t.name == "planq-test-periodic")
    assert loop.stop(timeout=10) and not thread.is_alive() and not loop.running
    assert batch.count() == 0  # stopping is not a tick
    assert loop.start() and loop.running  # restartable after stop()
    loop.close()
    assert not loop.running and not loop.start()
    loop.wake()  # a late signal handler's wake-up is harmless


def test_past_the_outage_budget_the_owner_is_told_to_give_up(loops: list[PeriodicBatch]) -> None:
    batch = Batch()
    batch.raises = [LedgerUnavailableError("connection refused")] * 1000
    spent: list[float] = []
    loop = make(
        batch,
        0.01,
        outages=OutageMonitor(log=LOG),
        outage_budget=0.05,
        on_budget_spent=lambda: spent.append(time.monotonic()),
    )
    loops.append(loop)
    loop.start()
    wait_for(lambda: spent, timeout=10, what="the budget to be spent")
    first_failure = batch.ticks[0]
    assert spent[0] - first_failure >= 0.05
    loop.stop()
    assert batch.count() >= 3  # it kept retrying until the budget was spent
