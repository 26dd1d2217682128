"""Redis loses its messages, PostgreSQL restarts, a job is delivered four times.

Every job still ends, and none runs twice.

Results go to $PLANQ_RELIABILITY_LOG when set (docs/reliability.md is written from it).
The shared settings and helpers are in faults_support.py.
"""

from __future__ import annotations

import time

import pytest
from celery import Celery

from planq.domain.jobs import AsyncJobStatus
from planq.domain.plans import Plan
from planq.tasks.runtime import Runtime
from tests.acceptance.conftest import StartBeat, StartWorker
from tests.acceptance.faults_support import (
    all_terminal,
    queue_jobs,
    running_checkpointed,
    runs,
    start_workers,
)
from tests.celery_support import wait_for_status
from tests.executors_for_tests import REDIS
from tests.support import record_reliability, restart_postgres, restart_redis, wait_for

pytestmark = pytest.mark.processes


@pytest.mark.parametrize(
    "how",
    # a restart cuts every connection to the machine's Redis: it runs in the serial group
    ["flushed", pytest.param("restarted", marks=pytest.mark.serial)],
)
def test_redis_loses_every_queued_message(
    how: str,
    producer: Celery,
    runtime: Runtime,
    start_worker: StartWorker,
    start_beat: StartBeat,
) -> None:
    ids = queue_jobs(producer, runtime, 20)  # no worker yet: all 20 messages wait in Redis
    t0 = time.monotonic()
    if how == "flushed":
        REDIS.flushdb()
    else:
        restart_redis()
    worker = start_worker("w1", dispatch_grace=2.0, test_seconds=0.1, wait=False)
    start_beat(dispatch_grace=2.0)
    worker.wait_ready(producer)
    wait_for(lambda: all_terminal(runtime), timeout=90, what="every job to end")
    recovered = time.monotonic() - t0
    statuses = {runtime.jobs.get(i).status for i in ids}  # type: ignore[union-attr]
    assert statuses == {AsyncJobStatus.succeeded}
    assert all(runs(i) == 1 for i in ids)
    record_reliability(f"Redis {how} with 20 jobs queued", 20, 0, 0, recovered)


@pytest.mark.serial  # a restart cuts every connection to the machine's PostgreSQL
def test_postgres_restarted_while_jobs_run(
    producer: Celery, runtime: Runtime, start_worker: StartWorker, start_beat: StartBeat
) -> None:
    worker = start_worker("w1", test_seconds=3.0, concurrency=2, wait=False)
    start_beat()
    worker.wait_ready(producer)
    ids = queue_jobs(producer, runtime, 4)
    running_checkpointed(runtime, ids[0])
    t0 = time.monotonic()
    restart_postgres()
    wait_for(lambda: all_terminal(runtime), timeout=120, what="every job to end")
    recovered = time.monotonic() - t0
    jobs = [runtime.jobs.get(i) for i in ids]
    assert all(j is not None and j.status is AsyncJobStatus.succeeded for j in jobs), jobs
    started = {i: runs(i) for i in ids}
    assert set(started.values()) == {1}, (started, jobs)
    record_reliability("PostgreSQL restarted with 4 jobs running", 4, 0, 0, recovered)


def test_two_workers_receive_the_same_job(
    producer: Celery, runtime: Runtime, start_worker: StartWorker
) -> None:
    start_workers(start_worker, producer, "w1", "w2", test_seconds=0.5)
    plan = Plan.with_steps(["x"])
    runtime.plans.add(plan)
    job = runtime.lifecycle.strategize_plan(plan.plan_id).job
    assert job is not None
    task = producer.tasks["planq.strategize_plan"]
    for _ in range(3):
        task.publish_job(job)  # the same message, three more times
    done = wait_for_status(runtime.jobs, job.job_id, AsyncJobStatus.succeeded, timeout=60)
    assert runs(job.job_id) == 1
    assert done.worker_id is not None
    record_reliability("same job delivered 4 times to 2 workers", 1, 0, 0, 0.0)
