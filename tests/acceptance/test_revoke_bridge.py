"""Celery's revoke and planq's cancel land on the job's token, on prefork and threads pools."""

from __future__ import annotations

import subprocess
import sys
import time

import pytest
from celery import Celery

from planq.domain.jobs import AsyncJob, AsyncJobStatus
from planq.domain.plans import Plan
from planq.tasks.runtime import Runtime
from tests.acceptance.conftest import EXEC, StartWorker
from tests.celery_support import ROOT, running_slow_job, wait_for_status
from tests.executors_for_tests import REDIS, tripped_key
from tests.support import wait_for

pytestmark = pytest.mark.processes
POOLS = ["prefork", "threads"]


def tripped_after(job_id: str, since: float) -> float:
    raw = wait_for(lambda: REDIS.get(tripped_key(job_id)), timeout=10, what="token tripped")
    return float(raw) - since


@pytest.mark.parametrize("pool", POOLS)
def test_cancel_job_trips_the_token_in_the_process_that_runs_it(
    pool: str, producer: Celery, runtime: Runtime, start_worker: StartWorker
) -> None:
    start_worker("w1", pool=pool, default_executor=f"{EXEC}:slow", heartbeat_interval=2.0)
    job = running_slow_job(producer, runtime)
    t0 = time.time()
    assert runtime.worker.cancel_job(job.job_id) is True
    done = wait_for_status(runtime.jobs, job.job_id, AsyncJobStatus.cancelled, timeout=30)
    # heartbeat_interval is 2 s: tripping sooner proves the broadcast path, not the poll.
    # (Latency itself is measured by bench/cancel_latency.py, not asserted here.)
    assert tripped_after(job.job_id, t0) < 2.0
    assert done.checkpoint is not None and done.checkpoint["step"] >= 1
    plan = runtime.plans.get(job.plan_id)
    assert plan is not None and plan.label == "Strategize/CANCELLED"


@pytest.mark.parametrize("pool", POOLS)
def test_celery_revoke_without_terminate_cancels_cooperatively(
    pool: str, producer: Celery, runtime: Runtime, start_worker: StartWorker
) -> None:
    start_worker("w1", pool=pool, default_executor=f"{EXEC}:slow", heartbeat_interval=2.0)
    job = running_slow_job(producer, runtime)
    t0 = time.time()
    producer.control.revoke(job.job_id)  # what Flower's Revoke button sends
    wait_for_status(runtime.jobs, job.job_id, AsyncJobStatus.cancelled, timeout=30)
    assert tripped_after(job.job_id, t0) < 2.0


@pytest.mark.parametrize("pool", POOLS)
def test_revoke_with_terminate_ends_cancelled_in_the_ledger(
    pool: str, producer: Celery, runtime: Runtime, start_worker: StartWorker
) -> None:
    start_worker("w1", pool=pool, default_executor=f"{EXEC}:slow", heartbeat_interval=2.0)
    job = running_slow_job(producer, runtime)
    producer.control.revoke(job.job_id, terminate=True, signal="SIGTERM")
    done = wait_for_status(runtime.jobs, job.job_id, AsyncJobStatus.cancelled, timeout=30)
    assert done.finished_at is not None
    # the worker survives and keeps serving
    plan = Plan.with_steps(["next"])
    runtime.plans.add(plan)
    nxt = producer.tasks["planq.strategize_plan"].delay(plan.plan_id)
    wait_for(
        lambda: (runtime.jobs.get(nxt.id) or AsyncJob.model_construct()).checkpoint,
        timeout=60,
        what="the worker to take the next job",
    )
    runtime.worker.cancel_job(nxt.id)
    wait_for_status(runtime.jobs, nxt.id, AsyncJobStatus.cancelled, timeout=30)


def test_celery_control_revoke_command_line(
    producer: Celery, runtime: Runtime, start_worker: StartWorker
) -> None:
    worker = start_worker("w1", default_executor=f"{EXEC}:slow")
    job = running_slow_job(producer, runtime)
    subprocess.run(
        [
            sys.executable,
            "-m",
            "celery",
            "-A",
            "planq.worker_config",
            "control",
            "revoke",
            job.job_id,
        ],
        env=worker.env,
        cwd=ROOT,
        check=True,
        capture_output=True,
        timeout=60,
    )
    wait_for_status(runtime.jobs, job.job_id, AsyncJobStatus.cancelled, timeout=30)
