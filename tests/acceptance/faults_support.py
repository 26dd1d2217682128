"""What the fault tests share: their settings, and how they queue jobs and read outcomes.

Time here is the settings' (job_timeout 3 s, heartbeat 0.3 s, a stuck sweep and a relay
every second from the beat): every wait polls with a deadline, processes a test needs
together start together, and the acceptance fixtures stop every process a test started at
once at its end.
"""

from __future__ import annotations

from typing import Any

from celery import Celery

from planq.domain.jobs import AsyncJob, AsyncJobStatus
from planq.domain.plans import Plan
from planq.tasks.runtime import Runtime
from tests.acceptance.conftest import StartWorker
from tests.celery_support import WorkerProcess
from tests.executors_for_tests import REDIS, runs_key
from tests.support import wait_for

RETRYING = {"max_attempts": 2, "job_timeout": 3.0, "heartbeat_interval": 0.3}


def start_workers(
    start_worker: StartWorker, producer: Celery, *names: str, **settings: Any
) -> list[WorkerProcess]:
    """Workers started at once, then awaited: one start-up's wait, not one per worker."""
    workers = [start_worker(name, wait=False, **settings) for name in names]
    for worker in workers:
        worker.wait_ready(producer)
    return workers


def queue_jobs(producer: Celery, rt: Runtime, n: int) -> list[str]:
    ids = []
    for _ in range(n):
        plan = Plan.with_steps(["x"])
        rt.plans.add(plan)
        ids.append(producer.tasks["planq.strategize_plan"].delay(plan.plan_id).id)
    return ids


def runs(job_id: str) -> int:
    return int(REDIS.get(runs_key(job_id)) or 0)


def all_terminal(rt: Runtime) -> bool:
    return rt.jobs.count(AsyncJobStatus.queued) + rt.jobs.count(AsyncJobStatus.running) == 0


def retry_of(rt: Runtime, job_id: str) -> AsyncJob | None:
    original = rt.jobs.get(job_id)
    assert original is not None
    return next((j for j in rt.jobs.list_by_plan(original.plan_id) if j.retry_of == job_id), None)


def running_checkpointed(rt: Runtime, job_id: str) -> AsyncJob:
    def check() -> AsyncJob | None:
        job = rt.jobs.get(job_id)
        return job if job and job.status is AsyncJobStatus.running and job.checkpoint else None

    return wait_for(check, timeout=60, what=f"{job_id} to run and checkpoint")
