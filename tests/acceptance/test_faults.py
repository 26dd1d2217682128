"""Real faults against real processes: each test is bounded and asserts the ledger at the end.

Results go to $PLANQ_RELIABILITY_LOG when set (docs/reliability.md is written from it).

Time here is the settings' (job_timeout 3 s, heartbeat 0.3 s, a stuck sweep and a relay
every second from the beat): every wait polls with a deadline, processes a test needs
together start together, and every process a test started is warm-shut-down at once at
its end (`stop_together`), not one after the other.
"""

from __future__ import annotations

import os
import random
import signal
import time
from collections.abc import Iterator
from typing import Any

import pytest
from celery import Celery

from planq.domain.jobs import AsyncJob, AsyncJobStatus
from planq.domain.plans import Plan
from planq.tasks.runtime import Runtime
from tests.acceptance.conftest import StartBeat, StartWorker
from tests.celery_support import CeleryProcess, WorkerProcess, wait_for_status
from tests.executors_for_tests import REDIS, runs_key
from tests.support import record_reliability, restart_postgres, restart_redis, wait_for

pytestmark = pytest.mark.processes
RETRYING = {"max_attempts": 2, "job_timeout": 3.0, "heartbeat_interval": 0.3}
#: A warm shutdown of an idle worker takes a second or two; one that takes longer than this
#: is killed (the test's checks are done by then; the fixtures' own stop would wait 15 s).
WARM_STOP_S = 10.0


def stop_together(processes: list[CeleryProcess], timeout: float = WARM_STOP_S) -> None:
    """SIGTERM every process still up at once, wait for them all, kill what is left."""
    running = [p for p in processes if p.proc.poll() is None]
    for process in running:
        process.proc.send_signal(signal.SIGTERM)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and any(p.proc.poll() is None for p in running):
        time.sleep(0.05)
    for process in running:
        if process.proc.poll() is None:
            print(f"{process.name}: no warm shutdown within {timeout:.0f}s; killed")
            process.kill()


@pytest.fixture
def started() -> list[CeleryProcess]:
    """Every worker and beat this module's tests started, in order."""
    return []


@pytest.fixture
def start_worker(start_worker: StartWorker, started: list[CeleryProcess]) -> Iterator[StartWorker]:
    """The acceptance fixture's, and at the end the test's processes stop together."""

    def start(*args: Any, **kwargs: Any) -> WorkerProcess:
        worker = start_worker(*args, **kwargs)
        started.append(worker)
        return worker

    yield start
    stop_together(started)


@pytest.fixture
def start_beat(start_beat: StartBeat, started: list[CeleryProcess]) -> Iterator[StartBeat]:
    """The acceptance fixture's, and at the end the test's processes stop together."""

    def start(*args: Any, **kwargs: Any) -> Any:
        beat = start_beat(*args, **kwargs)
        started.append(beat)
        return beat

    yield start
    stop_together(started)


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
