"""The steps async_jobs.feature's scenarios share, as plain functions on a real job store.

A step that changes a job changes the domain object, then writes it with the store's
update(); a Then step reads the row back from the store, so every scenario checks what
the ledger kept, on memory, SQLite and PostgreSQL alike.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import timedelta
from typing import Any

from planq.domain.clock import utcnow
from planq.domain.config import AsyncWorkerConfig
from planq.domain.jobs import AsyncJob
from planq.domain.plans import PlanPhase
from planq.domain.ports import JobStore
from planq.tasks.engine import AsyncWorker
from planq.tasks.executors import JobContext

#: The plan id every scenario uses.
PLAN_ID = "01HXYZ01HXYZ01HXYZ01HXYZ01"


def create_job(jobs: JobStore, plan_id: str = PLAN_ID, phase: str = "execute") -> AsyncJob:
    """I create a new async job for plan <plan_id> phase <phase> (and it is stored)."""
    job = AsyncJob(plan_id=plan_id, phase=PlanPhase(phase))
    jobs.add(job)
    return job


def create_running_job(jobs: JobStore, worker_id: str = "worker-001") -> AsyncJob:
    """I create a running async job."""
    job = create_job(jobs)
    job.mark_running(worker_id)
    jobs.update(job)
    return job


def stored(jobs: JobStore, job: AsyncJob) -> AsyncJob:
    """The job as the store keeps it."""
    row = jobs.get(job.job_id)
    assert row is not None, f"job {job.job_id} is not in the store"
    return row


def running_with_expired_heartbeat(jobs: JobStore, seconds_ago: float = 10.0) -> AsyncJob:
    """A running async job with expired heartbeat exists."""
    job = AsyncJob(plan_id=PLAN_ID, phase=PlanPhase.execute)
    job.mark_running("worker-001")
    job.started_at = job.last_heartbeat = utcnow() - timedelta(seconds=seconds_ago)
    jobs.add(job)
    return job


def spec_worker(
    jobs: JobStore, executor: Callable[[JobContext], None] | str = "noop", **config: Any
) -> AsyncWorker:
    """An async worker is initialised with <config>: `AsyncWorker(config, store, executor)`."""
    return AsyncWorker(AsyncWorkerConfig(**config), jobs, executor)


def processed(worker: AsyncWorker) -> int:
    """The worker health's jobs processed."""
    return int(worker.health_report()["jobs_processed"])
