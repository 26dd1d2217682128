"""Riding out a ledger outage: transient errors are retried within a budget, nothing else is.

And quietly (issue 22, finding 5): one monitor per process logs one WARNING when an outage
starts, a one-line reminder every 30 s, one INFO on recovery; tracebacks only at DEBUG. The
heartbeats retry every second while the ledger is away, so they renew as soon as it is back.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Mapping
from typing import Any

import pytest
from sqlalchemy import text

from planq.domain.errors import LedgerUnavailableError
from planq.domain.ids import new_id
from planq.domain.jobs import AsyncJob, AsyncJobStatus
from planq.domain.ledger import JobLedger
from planq.domain.outage import OutageMonitor, ride_out_outage
from planq.domain.plans import PlanPhase
from planq.domain.runs import Fresh, RunHeartbeat
from planq.store import Database
from planq.store.memory import InMemoryJobStore
from planq.store.runs_memory import InMemoryRunStoreProvider
from planq.tasks.tracker import JobTracker
from tests.support import wait_for


def test_a_transient_error_is_retried_until_it_clears() -> None:
    calls: list[int] = []
    slept: list[float] = []

    def flaky() -> str:
        calls.append(1)
        if len(calls) < 3:
            raise LedgerUnavailableError("connection refused")
        return "written"

    monitor = OutageMonitor()
    assert (
        ride_out_outage(flaky, "test write", budget=10, sleep=slept.append, monitor=monitor)
        == "written"
    )
    assert len(calls) == 3 and slept == [0.2, 0.4]
    assert monitor.outages == 1 and not monitor.in_outage


def test_retries_through_a_long_outage_are_at_most_a_second_apart() -> None:
    """A write that reconnects goes through within a second, not after a 5 s backoff."""
    slept: list[float] = []

    def down_for_eight_tries() -> str:
        if len(slept) < 8:
            raise LedgerUnavailableError("connection refused")
        return "written"

    monitor = OutageMonitor()
    ride_out_outage(down_for_eight_tries, "finish X", sleep=slept.append, monitor=monitor)
    assert slept == [0.2, 0.4, 0.8, 1.0, 1.0, 1.0, 1.0, 1.0]


def test_any_other_error_is_raised_at_once() -> None:
    calls: list[int] = []

    def broken() -> None:
        calls.append(1)
        raise AttributeError("'int' object has no attribute 'upper'")

    with pytest.raises(AttributeError):
        ride_out_outage(broken, "test write", budget=10, sleep=lambda _: None)
    assert calls == [1]


def test_a_spent_budget_says_the_ledger_was_unavailable() -> None:
    def down() -> None:
        raise LedgerUnavailableError("connection refused")

    with pytest.raises(LedgerUnavailableError, match="ledger unavailable for 0s during finish X"):
        ride_out_outage(down, "finish X", budget=0.0, sleep=lambda _: None, monitor=OutageMonitor())


def test_an_unreachable_database_is_a_ledger_outage_without_its_password() -> None:
    db = Database(
        "postgresql://planq:s3cr3t@127.0.0.1:1/nowhere", connect_args={"connect_timeout": 2}
    )
    try:
        with pytest.raises(LedgerUnavailableError) as caught, db.session() as s:
            s.execute(text("SELECT 1"))
        assert "s3cr3t" not in str(caught.value)
    finally:
        db.close()


def test_a_data_error_is_not_an_outage(sqlite_database: Database) -> None:
    from sqlalchemy.exc import OperationalError

    with pytest.raises(OperationalError), sqlite_database.session() as s:
        s.execute(text("SELEC 1"))  # sqlite3 reports this as an OperationalError


class FakeClock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def sql_outage() -> LedgerUnavailableError:
    """An outage as the store raises it: chained from the driver's error, SQL and all."""
    db = Database(
        "postgresql://planq:s3cr3t@127.0.0.1:1/nowhere", connect_args={"connect_timeout": 2}
    )
    try:
        with db.session() as s:
            s.execute(text("SELECT job_id FROM async_jobs WHERE worker_id = :w"), {"w": "w1"})
    except LedgerUnavailableError as exc:
        return exc
    finally:
        db.close()
    raise AssertionError("the unreachable database answered")


def test_one_warning_per_outage_a_reminder_every_30s_and_one_info_on_recovery(
    caplog: pytest.LogCaptureFixture,
) -> None:
    clock = FakeClock()
    monitor = OutageMonitor(clock=clock)
    exc = sql_outage()
    with caplog.at_level(logging.DEBUG, logger="planq.ledger"):
        for _ in range(61):  # 60 s of failures, one a second, from three places
            for what in ("job heartbeat", "finish 01ABC", "stamping 3 dispatched job(s)"):
                monitor.failed(what, exc)
            clock.now += 1.0
        assert monitor.recovered_ago() == 0.0
        monitor.succeeded()
        monitor.succeeded()  # nothing more to say
    # Only this thread's records: a heartbeat thread left by an earlier test may log too.
    mine = [r for r in caplog.records if r.thread == threading.get_ident()]
    shown = [r for r in mine if r.levelno >= logging.INFO]
    assert [(r.levelname, r.getMessage()[:30]) for r in shown] == [
        ("WARNING", "ledger unavailable (job heartb"),
        ("WARNING", "ledger still unavailable after"),
        ("WARNING", "ledger still unavailable after"),
        ("INFO", "ledger available again after 6"),
    ]
    assert shown[1].getMessage().startswith("ledger still unavailable after 30s")
    assert all(r.exc_info is None for r in shown)  # no traceback above DEBUG
    text_shown = "\n".join(r.getMessage() for r in shown)
    for hidden in ("SELECT", "[parameters", "s3cr3t", "async_jobs"):
        assert hidden not in text_shown
    debug = [r for r in mine if r.levelno == logging.DEBUG]
    assert len(debug) == 183 and all(r.exc_info for r in debug)
    assert monitor.outages == 1 and monitor.recovered_ago() == 0.0
    clock.now += 5
    assert monitor.recovered_ago() == 5.0


def test_a_second_outage_is_announced_again(caplog: pytest.LogCaptureFixture) -> None:
    monitor = OutageMonitor(clock=FakeClock())
    assert monitor.recovered_ago() is None
    with caplog.at_level(logging.INFO, logger="planq.ledger"):
        for _ in range(2):
            monitor.failed("job heartbeat", LedgerUnavailableError("connection refused"))
            monitor.succeeded()
    assert [r.levelname for r in caplog.records] == ["WARNING", "INFO", "WARNING", "INFO"]
    assert monitor.outages == 2


class FlakyBeat:
    """A heartbeat statement the ledger refuses `down` times; when each call came."""

    def __init__(self, down: int) -> None:
        self.down = down
        self.calls: list[float] = []
        self.lock = threading.Lock()

    def __call__(self, ids: object) -> set[str]:
        with self.lock:
            self.calls.append(time.monotonic())
            if len(self.calls) <= self.down:
                raise LedgerUnavailableError("connection refused")
        return set()


def test_the_job_heartbeat_retries_every_second_and_renews_at_once() -> None:
    beat = FlakyBeat(down=2)
    monitor = OutageMonitor()
    tracker = JobTracker(beat, interval=3.0, outages=monitor)
    tracker.track("01J0000000000000000000000A")
    try:
        wait_for(lambda: tracker.beats >= 1, timeout=20, what="a beat after two failures")
    finally:
        tracker.close()
    first_fail, second_fail, renewed = beat.calls[:3]
    assert second_fail - first_fail < 1.5 and renewed - second_fail < 1.5  # not 3 s apart
    assert monitor.outages == 1 and not monitor.in_outage


def test_the_run_heartbeat_retries_every_second_and_renews_at_once() -> None:
    provider = InMemoryRunStoreProvider()
    beat = FlakyBeat(down=2)

    def flaky(leases: Mapping[str, int]) -> set[str]:
        beat(leases)
        return provider.heartbeat_runs(leases)

    monitor = OutageMonitor()
    heartbeat = RunHeartbeat(flaky, interval=3.0, outages=monitor)
    opened = provider.open_or_start("scan", owner="w@h")
    assert isinstance(opened, Fresh)
    heartbeat.track(opened.store)
    try:
        wait_for(lambda: heartbeat.beats >= 1, timeout=20, what="a beat after two failures")
    finally:
        heartbeat.stop()
    first_fail, second_fail, renewed = beat.calls[:3]
    assert second_fail - first_fail < 1.5 and renewed - second_fail < 1.5
    assert monitor.outages == 1 and not monitor.in_outage and not opened.store.lease_lost


class FlakyJobStore(InMemoryJobStore):
    """A job store whose next `down` claims, progress writes and finishes meet an outage."""

    def __init__(self, down: int) -> None:
        super().__init__()
        self.down = down

    def _outage(self) -> None:
        if self.down > 0:
            self.down -= 1
            raise LedgerUnavailableError("connection refused")

    def _claim(self, *args: Any, **kwargs: Any) -> Any:
        self._outage()
        return super()._claim(*args, **kwargs)

    def _save_progress(self, *args: Any, **kwargs: Any) -> Any:
        self._outage()
        return super()._save_progress(*args, **kwargs)

    def _finish(self, *args: Any, **kwargs: Any) -> Any:
        self._outage()
        return super()._finish(*args, **kwargs)


def test_the_job_path_writes_ride_out_an_outage_inside_the_ledger_door() -> None:
    # Whoever calls the door (the engine, a test, a future caller) gets the ride-out.
    store, monitor = FlakyJobStore(down=0), OutageMonitor()
    ledger = JobLedger(store, outages=monitor)
    job = AsyncJob(plan_id=new_id(), phase=PlanPhase.strategize)
    store.add(job)
    store.down = 2
    claimed = ledger.claim(job.job_id, "w/1")
    assert claimed is not None and claimed[0].status is AsyncJobStatus.running
    store.down = 2
    assert ledger.save_progress(job.job_id, 0.5, None, "w/1") is True
    store.down = 2
    assert ledger.finish(claimed[0], AsyncJobStatus.succeeded, worker_id="w/1") is True
    row = store.get(job.job_id)
    assert row is not None and row.status is AsyncJobStatus.succeeded and row.progress == 0.5
    assert monitor.recovered_ago() is not None  # each outage was reported, and its end
