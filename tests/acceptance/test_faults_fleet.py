"""200 jobs on two workers and two beats, 30 random cancels, one worker killed: every plan ends.

Results go to $PLANQ_RELIABILITY_LOG when set (docs/reliability.md is written from it).
The shared settings and helpers are in faults_support.py.
"""

from __future__ import annotations

import random
import time

import pytest
from celery import Celery

from planq.domain.jobs import AsyncJobStatus
from planq.tasks.runtime import Runtime
from tests.acceptance.conftest import StartBeat, StartWorker
from tests.acceptance.faults_support import RETRYING, all_terminal, queue_jobs, runs
from tests.support import record_reliability, wait_for

pytestmark = pytest.mark.processes


@pytest.mark.heavy
def test_200_jobs_random_cancels_and_a_worker_killed(
    producer: Celery, runtime: Runtime, start_worker: StartWorker, start_beat: StartBeat
) -> None:
    settings = {**RETRYING, "test_seconds": 0.1}
    w1, w2 = [start_worker(name, wait=False, **settings) for name in ("w1", "w2")]
    start_beat("beat1", **RETRYING)
    start_beat("beat2", **RETRYING)  # two beats at once: maintenance must stay idempotent
    for worker in (w1, w2):
        worker.wait_ready(producer)
    t0 = time.monotonic()
    ids = queue_jobs(producer, runtime, 200)
    rng = random.Random(7)
    cancelled = rng.sample(ids, 30)
    for job_id in cancelled[:15]:
        runtime.worker.cancel_job(job_id)
    wait_for(
        lambda: runtime.jobs.count(AsyncJobStatus.succeeded) >= 40,
        timeout=60,
        what="work to be under way",
    )
    w1.kill()
    for job_id in cancelled[15:]:
        runtime.worker.cancel_job(job_id)
    wait_for(lambda: all_terminal(runtime), timeout=180, what="every job to end")
    recovered = time.monotonic() - t0
    rows = runtime.jobs.list_all()
    originals = [r for r in rows if r.retry_of is None]
    assert len(originals) == 200
    assert all(r.is_terminal for r in rows)
    by_status = {s: runtime.jobs.count(s) for s in AsyncJobStatus}
    assert sum(by_status.values()) == len(rows)
    assert all(runs(r.job_id) <= 1 for r in rows)  # no job id ran twice
    # every plan ended: its last attempt succeeded, was cancelled, or failed for a reason
    for original in originals:
        chain = [r for r in rows if r.plan_id == original.plan_id]
        last = max(chain, key=lambda r: r.attempt)
        assert last.is_terminal
        if last.status is AsyncJobStatus.failed:
            assert last.error_message
    ran_twice = sum(1 for r in rows if runs(r.job_id) > 1)
    record_reliability(
        "200 jobs, 2 workers, 30 random cancels, 1 worker kill -9, 2 beats",
        200,
        0,
        ran_twice,
        recovered,
    )
