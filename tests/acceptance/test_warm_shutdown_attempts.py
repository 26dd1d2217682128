"""What a warm shutdown does to a running job, as the README says: PLANQ_MAX_ATTEMPTS decides.

SIGTERM (or one Ctrl-C) trips the job's token: it stops at its next safe point, keeps its
checkpoint and ends `failed: interrupted: worker shutdown`. With the default of one
attempt nothing retries it; with two, the stopping worker queues attempt 2 (the
checkpoint carried) and publishes it, and the next worker resumes it.
"""

from __future__ import annotations

import pytest
from celery import Celery

from planq.domain.jobs import AsyncJob, AsyncJobStatus
from planq.tasks.runtime import Runtime
from tests.acceptance.conftest import EXEC, StartWorker
from tests.celery_support import running_slow_job, wait_for_status

pytestmark = pytest.mark.processes


def interrupted(runtime: Runtime, job: AsyncJob) -> AsyncJob:
    done = runtime.jobs.get(job.job_id)
    assert done is not None
    assert done.status is AsyncJobStatus.failed
    assert done.error_message == "interrupted: worker shutdown"
    assert done.checkpoint is not None and done.checkpoint["step"] >= 1
    return done


@pytest.mark.parametrize("pool", ["prefork", "threads"])
def test_warm_shutdown_trips_tokens_and_keeps_checkpoints(
    pool: str, producer: Celery, runtime: Runtime, start_worker: StartWorker
) -> None:
    worker = start_worker("w1", pool=pool, default_executor=f"{EXEC}:slow")
    job = running_slow_job(producer, runtime)
    assert worker.terminate(timeout=30) == 0
    interrupted(runtime, job)


def test_default_one_attempt_a_warm_shutdown_fails_the_job_and_nothing_retries_it(
    producer: Celery, runtime: Runtime, start_worker: StartWorker
) -> None:
    worker = start_worker("w1", default_executor=f"{EXEC}:slow", max_attempts=1)
    job = running_slow_job(producer, runtime)
    assert worker.terminate(timeout=60) == 0
    interrupted(runtime, job)
    assert [j.job_id for j in runtime.jobs.list_by_plan(job.plan_id)] == [job.job_id]
    plan = runtime.plans.get(job.plan_id)
    assert plan is not None and plan.label == "Strategize/FAILED"


def test_two_attempts_the_stopping_worker_queues_attempt_2_and_the_next_worker_resumes_it(
    producer: Celery, runtime: Runtime, start_worker: StartWorker
) -> None:
    first = start_worker("w1", default_executor=f"{EXEC}:slow", max_attempts=2)
    job = running_slow_job(producer, runtime)
    assert first.terminate(timeout=60) == 0
    done = interrupted(runtime, job)
    retries = [j for j in runtime.jobs.list_by_plan(job.plan_id) if j.retry_of == job.job_id]
    assert len(retries) == 1
    retry = retries[0]
    assert (retry.attempt, retry.status) == (2, AsyncJobStatus.queued)
    assert retry.checkpoint == done.checkpoint  # attempt 2 resumes where attempt 1 stopped
    assert retry.dispatched_at is not None  # published before the worker exited

    # counted resumes from the checkpoint's step; past its last step it has nothing left to do
    start_worker("w2", default_executor=f"{EXEC}:counted", max_attempts=2)
    ended = wait_for_status(runtime.jobs, retry.job_id, AsyncJobStatus.succeeded, timeout=60)
    assert ended.worker_id is not None and ended.worker_id.startswith("w2@")
    plan = runtime.plans.get(job.plan_id)
    assert plan is not None and plan.label == "Strategize/COMPLETE"
