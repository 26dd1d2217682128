"""Job fencing with real `celery worker` processes (issue 9, items 2 and 3).

1. `revoke(job_id, terminate=True)` reaches every node; only the node that runs the job
   may end its row, and only once its executor has stopped: a node that does not host
   the job (here a prefork node beside the threads node that runs it) writes nothing.
2. A prefork child frozen (SIGSTOP) past job_timeout loses its job to the stuck sweep;
   attempt 2 runs on another node. Thawed (SIGCONT), the old executor's token trips at its
   first heartbeat or write, and nothing it does reaches the ledger.

The executor (`tests.fencing_executors:stepped`) records each step it walks in Redis with
its pid and job id, so the tests see which process did what and when.
"""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Iterator
from datetime import datetime
from typing import Any

import pytest
from celery import Celery
from celery.utils.nodenames import gethostname

from planq.domain.jobs import AsyncJob, AsyncJobStatus
from planq.domain.ledger import STUCK_ERROR
from planq.domain.plans import Plan
from planq.tasks.runtime import Runtime, reset_runtime, runtime_for
from tests.acceptance.conftest import StartWorker
from tests.celery_support import make_app, wait_for_status
from tests.fencing_executors import events
from tests.support import wait_for

pytestmark = [pytest.mark.processes, pytest.mark.postgres, pytest.mark.redis]
STEPPED = "tests.fencing_executors:stepped"
HOST = gethostname()


def steps(count: int, seconds: float) -> list[dict[str, Any]]:
    return [{"name": f"s{i}", "seconds": seconds} for i in range(count)]


def event(plan_id: str, name: str, job_id: str, timeout: float = 30.0) -> dict[str, Any]:
    """Wait until job_id's executor recorded `name`; that record."""

    def seen() -> dict[str, Any] | None:
        found = [e for e in events(plan_id) if e["event"] == name and e["job"] == job_id]
        return found[0] if found else None

    found: dict[str, Any] = wait_for(seen, timeout=timeout, what=f"{job_id}: {name}")
    return found


def running_on(rt: Runtime, job_id: str, node: str, timeout: float = 60.0) -> AsyncJob:
    """Wait until job_id runs under node and checkpointed; the row."""

    def checkpointed() -> AsyncJob | None:
        job = rt.jobs.get(job_id)
        ok = job is not None and job.status is AsyncJobStatus.running and job.checkpoint
        return job if ok else None

    job: AsyncJob = wait_for(checkpointed, timeout=timeout, what=f"{job_id} to checkpoint")
    assert job.worker_id is not None and job.worker_id.startswith(f"{node}@{HOST}/")
    return job


def stamp(moment: datetime | None) -> float:
    assert moment is not None
    return moment.timestamp()


def test_terminate_ends_the_row_only_where_the_job_ran_once_its_executor_stopped(
    producer: Celery, runtime: Runtime, start_worker: StartWorker
) -> None:
    a = start_worker("fence-a", pool="threads", concurrency=2, default_executor=STEPPED)
    plan = Plan.with_steps(steps(100, 0.2), name="linger-terminate")
    runtime.plans.add(plan)
    first = producer.tasks["planq.strategize_plan"].delay(plan.plan_id).id
    running_on(runtime, first, "fence-a")
    b = start_worker("fence-b", pool="prefork", concurrency=1, default_executor=STEPPED)

    producer.control.revoke(first, terminate=True)  # broadcast: both nodes get it
    tripped = event(plan.plan_id, "tripped", first)
    # A's executor is still cleaning up (it lingers 1.5 s): the row must still be running,
    # although B (a prefork node that could terminate) has had the revoke as long as A.
    row = runtime.jobs.get(first)
    assert row is not None and row.status is AsyncJobStatus.running, row
    stopped = event(plan.plan_id, "stopped", first)
    done = wait_for_status(runtime.jobs, first, AsyncJobStatus.cancelled, timeout=30)
    assert stamp(done.finished_at) >= stopped["t"] > tripped["t"]
    assert done.worker_id == row.worker_id  # ended as A's own claim
    assert done.checkpoint is not None and done.checkpoint["by"] == first
    assert not [e for e in events(plan.plan_id) if e["event"] == "done"]  # it stopped early
    plan_row = runtime.plans.get(plan.plan_id)
    assert plan_row is not None and plan_row.label == "Strategize/CANCELLED"

    # The operator re-queues the phase: the new execution starts after the first stopped.
    second = producer.tasks["planq.strategize_plan"].delay(plan.plan_id).id
    started = event(plan.plan_id, "start", second, timeout=60)
    assert started["t"] >= stopped["t"]
    runtime.worker.cancel_job(second)
    wait_for_status(runtime.jobs, second, AsyncJobStatus.cancelled, timeout=30)
    runs = [e for e in events(plan.plan_id) if e["event"] in ("start", "stopped", "done")]
    assert [(e["job"], e["event"]) for e in runs] == [
        (first, "start"),
        (first, "stopped"),
        (second, "start"),
        (second, "stopped"),
    ]
    assert "terminated in child" not in (b.log_tail(400) + a.log_tail(400))


@pytest.fixture
def sweeper(redis_url: str, pg_url: str) -> Iterator[Runtime]:
    """A process-side stuck sweep with max_attempts=2 (what beat's task runs on a worker)."""
    app = make_app(redis_url, pg_url, max_attempts=2, job_timeout=5.0)
    yield runtime_for(app)
    reset_runtime(app)


def test_a_frozen_prefork_child_loses_its_job_and_writes_nothing_after_it_thaws(
    producer: Celery, runtime: Runtime, start_worker: StartWorker, sweeper: Runtime
) -> None:
    timings = {"default_executor": STEPPED, "heartbeat_interval": 0.5, "max_attempts": 2}
    a = start_worker("fence-a", pool="prefork", concurrency=1, **timings)
    plan = Plan.with_steps(steps(40, 0.25), name="frozen")
    runtime.plans.add(plan)
    first = producer.tasks["planq.strategize_plan"].delay(plan.plan_id).id
    claimed = running_on(runtime, first, "fence-a")
    assert claimed.worker_id is not None
    child = int(claimed.worker_id.rsplit("/", 1)[1])  # the ledger names the process
    assert child in a.child_pids()

    os.kill(child, signal.SIGSTOP)
    thawed = False
    try:
        start_worker("fence-b", pool="prefork", concurrency=1, **timings)
        report = wait_for(
            lambda: sweeper.worker.detect_stuck_jobs().retried.get(first),
            timeout=60,
            interval=0.5,
            what="the stuck sweep to fail attempt 1 and queue attempt 2",
        )
        swept = runtime.jobs.get(first)
        assert swept is not None and swept.status is AsyncJobStatus.failed
        assert swept.error_message == STUCK_ERROR
        second = running_on(runtime, report, "fence-b")
        assert second.attempt == 2 and second.retry_of == first

        thawed_at = time.time()
        os.kill(child, signal.SIGCONT)
        thawed = True
        stopped = event(plan.plan_id, "stopped", first, timeout=30)
    finally:
        if not thawed:
            os.kill(child, signal.SIGCONT)

    done = wait_for_status(runtime.jobs, second.job_id, AsyncJobStatus.succeeded, timeout=60)
    # The old claim wrote nothing after the sweep: its row is exactly as the sweep left it.
    after = runtime.jobs.get(first)
    assert after is not None
    keep = ("status", "error_message", "progress", "checkpoint", "finished_at", "worker_id")
    assert after.model_dump(include=set(keep)) == swept.model_dump(include=set(keep))
    # Attempt 2's row holds only attempt 2's writes, from B's process.
    assert done.checkpoint == {"step": 40, "by": second.job_id} and done.progress == 1.0
    assert done.worker_id == second.worker_id and done.worker_id.startswith(f"fence-b@{HOST}/")
    # The thawed executor stopped at once (its first heartbeat or write was refused): at
    # most one step walked after it thawed, and never the whole plan.
    old = [e for e in events(plan.plan_id) if e["job"] == first]
    assert all(e["pid"] == child for e in old)
    assert [e for e in old if e["event"] == "step" and e["t"] >= thawed_at][1:] == []
    assert not [e for e in old if e["event"] == "done"] and stopped["step"] < 40
    assert wait_for(
        lambda: "no longer ours" in a.log_tail(200),
        timeout=30,
        what="A's child to drop its finish",
    )
