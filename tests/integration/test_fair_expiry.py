"""Fair lease expiry on real ledgers (issue 22, finding 3): the evidence lives in the ledger.

A heartbeat older than the timeout expires a job (or pauses a run) only once the ledger has
been available for that timeout: after a gap in the sweeps' sightings (an outage, a late or
failed sweep), a server restart, or an outage this process saw, the sweep holds off.
"""

from __future__ import annotations

import threading
from datetime import timedelta

import pytest
from sqlalchemy import select, update

from planq.domain.availability import JOB_SWEEP, RUN_SWEEP, Availability, allowed_gap
from planq.domain.clock import utcnow
from planq.domain.config import AsyncWorkerConfig
from planq.domain.errors import LedgerUnavailableError
from planq.domain.jobs import AsyncJob, AsyncJobStatus
from planq.domain.ledger import JobLedger
from planq.domain.outage import OutageMonitor
from planq.domain.plans import Plan, PlanPhase
from planq.domain.runs import Fresh
from planq.domain.runs.ports import RunStoreProvider
from planq.store import Database, InMemoryRunStoreProvider, SqlRunStoreProvider, sql_ledger
from planq.store.models import LedgerAvailabilityModel
from planq.store.runs_bound import Clock
from planq.store.sql_jobs import SqlJobStore
from planq.tasks.engine import AsyncWorker

SWEEP_EVERY = 30.0  #: the sweeps' schedule in these tests (allowed gap 45 s)


@pytest.fixture(params=["sqlite", "postgres"])
def database(request: pytest.FixtureRequest) -> Database:
    """A SQL ledger of each backend (the evidence is a row of ledger_availability)."""
    db: Database = request.getfixturevalue(
        "sqlite_database" if request.param == "sqlite" else "pg_database"
    )
    return db


def running_job(db: Database, heartbeat_age: float) -> tuple[SqlJobStore, AsyncJob]:
    """A running job whose last heartbeat is heartbeat_age seconds old."""
    jobs, plans = sql_ledger(db)
    plan = Plan.with_steps(["x"])
    plans.add(plan)
    job = AsyncJob(plan_id=plan.plan_id, phase=PlanPhase.execute)
    jobs.add(job)
    assert jobs.claim(job.job_id, "w1/1", utcnow()) is not None
    jobs.heartbeat([job.job_id], utcnow() - timedelta(seconds=heartbeat_age))
    return jobs, job


def backdate_last_sighting(db: Database, sweep: str, seconds: float) -> None:
    """As if the previous sweep reached the ledger `seconds` earlier than it did."""
    with db.session() as s:
        last = s.scalar(
            select(LedgerAvailabilityModel.last_seen_at).where(
                LedgerAvailabilityModel.sweep == sweep
            )
        )
        assert last is not None
        s.execute(
            update(LedgerAvailabilityModel)
            .where(LedgerAvailabilityModel.sweep == sweep)
            .values(last_seen_at=last - timedelta(seconds=seconds))
        )


def backdate_sightings(db: Database, sweep: str, seconds: float) -> None:
    """As if every sighting on record (the last one, the stretch's start) came `seconds` earlier."""
    with db.session() as s:
        row = s.execute(
            select(
                LedgerAvailabilityModel.last_seen_at, LedgerAvailabilityModel.available_since
            ).where(LedgerAvailabilityModel.sweep == sweep)
        ).one()
        shift = timedelta(seconds=seconds)
        since = row.available_since
        s.execute(
            update(LedgerAvailabilityModel)
            .where(LedgerAvailabilityModel.sweep == sweep)
            .values(
                last_seen_at=row.last_seen_at - shift,
                available_since=None if since is None else since - shift,
            )
        )


def status(jobs: SqlJobStore, job_id: str) -> AsyncJobStatus:
    row = jobs.get(job_id)
    assert row is not None
    return row.status


def test_sweeps_on_schedule_expire_a_silent_holder(database: Database) -> None:
    jobs, job = running_job(database, heartbeat_age=3600)
    ledger = JobLedger(jobs)
    assert [j.job_id for j in ledger.expire_stuck(60, sweep_interval=SWEEP_EVERY)] == [job.job_id]


def test_a_gap_in_the_sweeps_holds_expiry_off_for_a_job_timeout(database: Database) -> None:
    jobs, job = running_job(database, heartbeat_age=3600)
    ledger = JobLedger(jobs)
    jobs.sight_ledger(JOB_SWEEP, allowed_gap(SWEEP_EVERY))  # a sweep on schedule
    # The next sweep comes 31 s later than allowed (the ledger refused every sweep between).
    backdate_last_sighting(database, JOB_SWEEP, allowed_gap(SWEEP_EVERY) + 31)
    assert ledger.expire_stuck(60, sweep_interval=SWEEP_EVERY) == []
    assert status(jobs, job.job_id) is AsyncJobStatus.running
    # Still held: the gap is recorded in the ledger, whichever process sweeps next.
    other = JobLedger(SqlJobStore(Database(database.url)))
    assert other.expire_stuck(60, sweep_interval=SWEEP_EVERY) == []
    assert status(jobs, job.job_id) is AsyncJobStatus.running
    # A timeout shorter than the availability since the gap: the holder had its chance.
    seen = jobs.sight_ledger(JOB_SWEEP, allowed_gap(SWEEP_EVERY))
    assert seen.available_since is not None and not seen.available_for(60)
    assert [j.job_id for j in ledger.expire_stuck(0.001, sweep_interval=SWEEP_EVERY)] == [
        job.job_id
    ]
    other.jobs.db.close()  # type: ignore[attr-defined]


def test_a_sweep_that_ran_late_errs_on_holding_off(database: Database) -> None:
    """Late by up to half an interval is on schedule; later holds off, like an outage."""
    jobs, job = running_job(database, heartbeat_age=3600)
    ledger = JobLedger(jobs)
    jobs.sight_ledger(JOB_SWEEP, allowed_gap(SWEEP_EVERY))
    backdate_last_sighting(database, JOB_SWEEP, SWEEP_EVERY * 1.4)  # busy workers: 12 s late
    assert [j.job_id for j in ledger.expire_stuck(60, sweep_interval=SWEEP_EVERY)] == [job.job_id]
    jobs2, job2 = running_job(database, heartbeat_age=3600)
    backdate_last_sighting(database, JOB_SWEEP, SWEEP_EVERY * 1.6)  # 18 s late: not vouched
    assert ledger.expire_stuck(60, sweep_interval=SWEEP_EVERY) == []
    assert status(jobs2, job2.job_id) is AsyncJobStatus.running


def test_an_outage_the_sweeping_process_saw_holds_expiry_off(database: Database) -> None:
    jobs, job = running_job(database, heartbeat_age=3600)
    outages = OutageMonitor()
    worker = AsyncWorker(
        AsyncWorkerConfig(job_timeout=60),
        jobs,
        "tests.executors_for_tests:counted",
        sweep_interval=SWEEP_EVERY,
        outages=outages,
    )
    outages.failed("job heartbeat", LedgerUnavailableError("connection refused"))
    outages.succeeded()  # back just now: the holders have had no time to renew
    assert worker.detect_stuck_jobs().expired == []
    assert status(jobs, job.job_id) is AsyncJobStatus.running
    # The evidence went to the ledger: another sweeper (no outage of its own) holds off too.
    assert JobLedger(jobs).expire_stuck(60, sweep_interval=SWEEP_EVERY) == []
    assert status(jobs, job.job_id) is AsyncJobStatus.running
    worker.tracker.close()


def test_concurrent_sweepers_queue_on_the_evidence(database: Database) -> None:
    """Eight sweeps at once after a gap: one resets, the rest see its sighting (one since)."""
    jobs, _ = running_job(database, heartbeat_age=0)
    jobs.sight_ledger(JOB_SWEEP, allowed_gap(SWEEP_EVERY))
    backdate_last_sighting(database, JOB_SWEEP, 3600)
    seen: list[Availability] = []
    errors: list[BaseException] = []
    start = threading.Barrier(8)

    def sweep() -> None:
        start.wait()
        try:
            seen.append(jobs.sight_ledger(JOB_SWEEP, allowed_gap(SWEEP_EVERY)))
        except BaseException as exc:  # collected: the test asserts there are none
            errors.append(exc)

    threads = [threading.Thread(target=sweep) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert errors == [] and len(seen) == 8
    assert len({s.available_since for s in seen}) == 1  # reset once, by the first
    first = min(seen, key=lambda s: s.now)
    assert first.available_since == first.now


def test_the_first_sightings_race_to_create_the_row(database: Database) -> None:
    jobs, _ = running_job(database, heartbeat_age=0)
    seen: list[Availability] = []
    start = threading.Barrier(6)

    def sweep() -> None:
        start.wait()
        seen.append(jobs.sight_ledger(JOB_SWEEP, allowed_gap(SWEEP_EVERY)))

    threads = [threading.Thread(target=sweep) for _ in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert len(seen) == 6


def test_an_unknown_sweep_kind_is_refused(database: Database) -> None:
    jobs, _ = sql_ledger(database)
    with pytest.raises(ValueError, match="sweep must be one of"):
        jobs.sight_ledger("nightly", 45.0)
    with database.session() as s:
        assert s.scalars(select(LedgerAvailabilityModel)).all() == []


# -- recoverable runs: the stale sweep --------------------------------------------------------


@pytest.fixture(params=["memory", "sqlite", "postgres"])
def run_backend(request: pytest.FixtureRequest) -> str:
    return str(request.param)


def provider_for(
    backend: str, request: pytest.FixtureRequest, outages: OutageMonitor, clock: Clock
) -> RunStoreProvider:
    if backend == "memory":
        return InMemoryRunStoreProvider(clock, outages=outages)
    db: Database = request.getfixturevalue(
        "sqlite_database" if backend == "sqlite" else "pg_database"
    )
    return SqlRunStoreProvider(db, clock, outages=outages)


def test_the_stale_run_sweep_holds_off_after_this_process_saw_an_outage(
    run_backend: str, request: pytest.FixtureRequest
) -> None:
    outages = OutageMonitor()
    clock_now = [utcnow()]
    provider = provider_for(run_backend, request, outages, lambda: clock_now[0])
    opened = provider.open_or_start("scan", owner="w1@h")
    assert isinstance(opened, Fresh)
    clock_now[0] += timedelta(seconds=120)  # silent for two minutes (stale_after 60)
    outages.failed("run heartbeat", LedgerUnavailableError("connection refused"))
    outages.succeeded()
    assert provider.boot_recovery_sweep(stale_after=60).run_ids == ()
    summary = provider.get_run_by_id(opened.store.run_id)
    assert summary is not None and summary.status.is_active
    # The owner's own runs are still paused at its boot, whatever the availability.
    assert provider.boot_recovery_sweep("w1@h", stale_after=60).run_ids == (opened.store.run_id,)


def test_the_stale_run_sweep_holds_off_after_a_gap(database: Database) -> None:
    clock_now = [utcnow()]
    provider = SqlRunStoreProvider(database, lambda: clock_now[0], outages=OutageMonitor())
    opened = provider.open_or_start("scan", owner="w1@h")
    assert isinstance(opened, Fresh)
    assert provider.boot_recovery_sweep(stale_after=60).run_ids == ()  # fresh: a sighting
    backdate_last_sighting(database, RUN_SWEEP, 3600)  # no stale sweep for an hour
    clock_now[0] += timedelta(seconds=120)
    assert provider.boot_recovery_sweep(stale_after=60).run_ids == ()
    # Sightings on schedule (40 s apart, allowed gap 45 s), whatever the host's load: the
    # ledger has been available for 40 s, then 80 s, of the 60 s the holder is owed.
    backdate_sightings(database, RUN_SWEEP, 40)
    assert provider.boot_recovery_sweep(stale_after=60).run_ids == ()
    backdate_sightings(database, RUN_SWEEP, 40)
    assert provider.boot_recovery_sweep(stale_after=60) == 1  # past the availability
