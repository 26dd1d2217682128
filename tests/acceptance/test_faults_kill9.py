"""kill -9 mid-job, of a prefork child and of a whole worker.

The job ends failed and its retry completes from the checkpoint, on the same worker or another.

Results go to $PLANQ_RELIABILITY_LOG when set (docs/reliability.md is written from it).
The shared settings and helpers are in faults_support.py.
"""

from __future__ import annotations

import os
import signal
import time

import pytest
from celery import Celery

from planq.domain.jobs import AsyncJobStatus
from planq.tasks.runtime import Runtime
from tests.acceptance.conftest import StartBeat, StartWorker
from tests.acceptance.faults_support import (
    RETRYING,
    queue_jobs,
    retry_of,
    running_checkpointed,
    runs,
)
from tests.celery_support import wait_for_status
from tests.executors_for_tests import REDIS
from tests.support import record_reliability, wait_for

pytestmark = pytest.mark.processes


def test_kill_9_of_a_prefork_child_mid_job(
    producer: Celery, runtime: Runtime, start_worker: StartWorker, start_beat: StartBeat
) -> None:
    # 2.5 s: the kill lands between the first checkpoint (0.25 s) and the job's end, and
    # the retry on the same worker runs what is left of it from the checkpoint.
    worker = start_worker("w1", test_seconds=2.5, wait=False, **RETRYING)
    start_beat(**RETRYING)
    worker.wait_ready(producer)
    [job_id] = queue_jobs(producer, runtime, 1)
    running_checkpointed(runtime, job_id)
    child = int(next(iter(REDIS.smembers("planq-test:pids"))))
    assert child in worker.child_pids()
    killed_at = time.monotonic()
    os.kill(child, signal.SIGKILL)
    failed = wait_for_status(runtime.jobs, job_id, AsyncJobStatus.failed, timeout=30)
    assert failed.error_message == "heartbeat expired"
    assert time.monotonic() - killed_at < RETRYING["job_timeout"] + 1.0 + 5.0
    retry = wait_for(lambda: retry_of(runtime, job_id), timeout=30, what="the retry row")
    done = wait_for_status(runtime.jobs, retry.job_id, AsyncJobStatus.succeeded, timeout=60)
    recovered = time.monotonic() - killed_at
    assert done.attempt == 2 and done.checkpoint is not None
    assert runs(job_id) == 1  # the redelivered message found the row claimed: no second run
    plan = runtime.plans.get(done.plan_id)
    assert plan is not None and plan.label == "Strategize/COMPLETE"
    record_reliability("kill -9 of a prefork child mid-job", 1, 0, 0, recovered)


def test_kill_9_of_a_whole_worker_completes_on_another(
    producer: Celery, runtime: Runtime, start_worker: StartWorker, start_beat: StartBeat
) -> None:
    w1 = start_worker("w1", test_seconds=4.0, **RETRYING)
    [job_id] = queue_jobs(producer, runtime, 1)
    first = running_checkpointed(runtime, job_id)
    # Killed at once, mid-job: w2 is started after the kill, because on a loaded machine its
    # start-up outlasted the job's 4 s and w1 finished the job (succeeded, never failed).
    killed_at = time.monotonic()
    w1.kill()
    w2 = start_worker("w2", test_seconds=1.0, wait=False, **RETRYING)
    beat = start_beat(**RETRYING)  # starts while w2 does; its sweeps wait in the queue for w2
    w2.wait_ready(producer)
    # Polled: the margin is for a loaded machine (CI's), where the sweep can run late. If it
    # does not come, the job row, the ledger's sightings and the logs say why.
    try:
        wait_for_status(runtime.jobs, job_id, AsyncJobStatus.failed, timeout=150)
    except pytest.fail.Exception as exc:
        row = runtime.jobs.get(job_id)
        facts = None if row is None else (row.status, row.worker_id, row.last_heartbeat)
        with runtime.db.engine.connect() as conn:
            seen = conn.exec_driver_sql(
                "SELECT sweep, last_seen_at, available_since, clock_timestamp(), "
                "pg_postmaster_start_time() FROM ledger_availability"
            ).all()
        pytest.fail(
            f"{exc}\njob (status, worker, heartbeat): {facts}\nsightings: {seen}"
            f"\n--- beat ---\n{beat.log_tail()}\n--- w2 ---\n{w2.log_tail(80)}"
        )
    retry = wait_for(lambda: retry_of(runtime, job_id), timeout=30, what="the retry row")
    done = wait_for_status(runtime.jobs, retry.job_id, AsyncJobStatus.succeeded, timeout=60)
    recovered = time.monotonic() - killed_at
    assert done.worker_id != first.worker_id
    assert runs(job_id) == 1 and runs(retry.job_id) == 1
    record_reliability("kill -9 of a whole worker", 1, 0, 0, recovered)
