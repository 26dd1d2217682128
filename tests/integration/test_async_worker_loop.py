"""The spec's worker loop (async_jobs.feature): start/stop, poll via a thread pool, cancel.

`AsyncWorker(config, store, executor)` with no broker: once started it runs the jobs
queued in its own store on max_workers threads. Each test follows its scenario's steps,
on memory, SQLite and PostgreSQL.
"""

from __future__ import annotations

import threading
from collections.abc import Callable

import pytest

from planq.domain.cancellation import CancellationToken
from planq.domain.config import AsyncWorkerConfig
from planq.domain.jobs import TERMINAL_STATUSES, AsyncJob, AsyncJobStatus
from planq.domain.plans import Plan, PlanPhase
from planq.domain.ports import JobStore, PlanStore
from planq.tasks.engine import AsyncWorker
from planq.tasks.executors import JobContext
from tests.support import wait_for


def initialised(
    jobs: JobStore,
    plans: PlanStore,
    max_workers: int,
    executor: Callable[[JobContext], None] | str = "noop",
) -> AsyncWorker:
    """Given an async worker is initialised with max_workers N."""
    config = AsyncWorkerConfig(max_workers=max_workers, poll_interval=0.05, heartbeat_interval=0.1)
    return AsyncWorker(config, jobs, executor, plans)


def queued_job(jobs: JobStore, plans: PlanStore) -> AsyncJob:
    """And a queued async job exists (its plan queued for the phase, as the lifecycle does)."""
    plan = Plan.with_steps(["a"])
    plan.queue_phase(PlanPhase.strategize)
    plans.add(plan)
    job = AsyncJob(plan_id=plan.plan_id, phase=PlanPhase.strategize)
    jobs.add(job)
    return job


def status(jobs: JobStore, job: AsyncJob) -> AsyncJobStatus:
    row = jobs.get(job.job_id)
    assert row is not None
    return row.status


def ended(jobs: JobStore, job: AsyncJob) -> bool:
    return status(jobs, job) in TERMINAL_STATUSES


@pytest.mark.spec("async_jobs: Worker start creates thread pool and stop destroys it cleanly")
def test_start_creates_thread_pool_and_stop_destroys_it_cleanly(
    jobs: JobStore, plans: PlanStore
) -> None:
    worker = initialised(jobs, plans, max_workers=2)
    job = queued_job(jobs, plans)
    worker.start()
    assert worker.is_running
    wait_for(lambda: ended(jobs, job), timeout=3, what="all queued jobs")
    worker.stop()
    assert not worker.is_running
    assert status(jobs, job) is AsyncJobStatus.succeeded


@pytest.mark.spec("async_jobs: Worker poll loop dispatches jobs via thread pool")
def test_poll_loop_dispatches_jobs_via_thread_pool(jobs: JobStore, plans: PlanStore) -> None:
    seen: set[str] = set()
    lock = threading.Lock()

    def record_thread(ctx: JobContext) -> None:
        with lock:
            seen.add(threading.current_thread().name)

    worker = initialised(jobs, plans, max_workers=4, executor=record_thread)
    created = [queued_job(jobs, plans) for _ in range(2)]
    worker.start()
    wait_for(
        lambda: all(ended(jobs, j) for j in created),
        timeout=3,
        what="every created job to end",
    )
    worker.stop()
    assert all(status(jobs, j) is AsyncJobStatus.succeeded for j in created)
    assert worker.health_report()["jobs_processed"] == 2
    assert seen and all(name.startswith("planq-job") for name in seen)  # the pool's threads


@pytest.mark.spec("async_jobs: Worker stop cancels in-flight jobs via tokens")
def test_stop_cancels_in_flight_jobs_via_tokens(jobs: JobStore, plans: PlanStore) -> None:
    entered = threading.Event()
    tokens: list[CancellationToken] = []

    def blocking(ctx: JobContext) -> None:
        tokens.append(ctx.token)
        entered.set()
        ctx.token.wait(30)  # blocks until its token is signalled

    worker = initialised(jobs, plans, max_workers=2, executor=blocking)
    job = queued_job(jobs, plans)
    worker.start()
    assert entered.wait(10), "the blocking executor was never entered"
    worker.stop()
    assert tokens and tokens[0].is_cancelled
    row = jobs.get(job.job_id)
    assert row is not None and row.status is AsyncJobStatus.failed
    assert row.error_message == "interrupted: worker shutdown"


@pytest.mark.spec("async_jobs: AsyncWorker start when already running does nothing")
def test_start_when_already_running_does_nothing(jobs: JobStore, plans: PlanStore) -> None:
    worker = initialised(jobs, plans, max_workers=2)
    worker.start()
    worker.start()
    assert worker.is_running
    worker.stop()


def test_stop_after_start_stops_cleanly_and_stop_when_not_running_does_nothing(
    jobs: JobStore, plans: PlanStore
) -> None:
    worker = initialised(jobs, plans, max_workers=2)
    worker.stop()
    assert not worker.is_running
    worker.start()
    worker.stop()
    assert not worker.is_running
    assert worker.health_report()["running"] is False


def test_a_job_taken_by_another_delivery_is_skipped_not_run_twice(
    jobs: JobStore, plans: PlanStore
) -> None:
    runs: list[str] = []
    lock = threading.Lock()

    def count(ctx: JobContext) -> None:
        with lock:
            runs.append(ctx.job.job_id)

    created = [queued_job(jobs, plans) for _ in range(6)]
    first = initialised(jobs, plans, max_workers=3, executor=count)
    second = initialised(jobs, plans, max_workers=3, executor=count)
    first.start()
    second.start()
    wait_for(lambda: all(ended(jobs, j) for j in created), timeout=10, what="every job")
    first.stop()
    second.stop()
    assert sorted(runs) == sorted(j.job_id for j in created)  # each exactly once
