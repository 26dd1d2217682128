"""AsyncWorker's contract on every ledger backend (no broker needed for these)."""

from __future__ import annotations

import os
import socket
import threading
from collections.abc import Callable

import pytest

from planq.domain.clock import utcnow
from planq.domain.config import AsyncWorkerConfig
from planq.domain.jobs import AsyncJob, AsyncJobStatus
from planq.domain.plans import Plan, PlanPhase, PlanStatus
from planq.domain.ports import JobStore, PlanStore
from planq.tasks.engine import AsyncWorker, PickupResult
from planq.tasks.executors import JobContext
from tests.support import wait_for

CONFIG = AsyncWorkerConfig(heartbeat_interval=0.1, job_timeout=5.0, max_workers=4)


def queued_job(plans: PlanStore, jobs: JobStore, steps: int = 2) -> AsyncJob:
    plan = Plan.with_steps([{"name": f"s{i}", "seconds": 0.01} for i in range(steps)])
    plans.add(plan)
    stored = plans.get(plan.plan_id)
    assert stored is not None
    stored.queue_phase(PlanPhase.strategize)
    plans.update(stored)
    job = AsyncJob(plan_id=plan.plan_id, phase=PlanPhase.strategize)
    jobs.add(job)
    return job


def worker(
    jobs: JobStore, plans: PlanStore, executor: Callable[[JobContext], None] | str = "walk_steps"
) -> AsyncWorker:
    return AsyncWorker(CONFIG, jobs, executor, plans)


def test_identity_and_health_report(jobs: JobStore, plans: PlanStore) -> None:
    engine = worker(jobs, plans)
    # no Celery node: the spec's standalone form, unique per engine
    assert engine.worker_id.startswith(f"worker-{socket.gethostname()}-{os.getpid()}-")
    assert len(engine.worker_id) == len(f"worker-{socket.gethostname()}-{os.getpid()}-") + 8
    report = engine.health_report()
    assert report["worker_id"] == engine.worker_id
    assert report["jobs_processed"] == report["jobs_failed"] == report["jobs_cancelled"] == 0
    assert report["config"]["max_workers"] == 4 and report["config"]["job_timeout"] == 5.0
    assert engine.config is CONFIG


def test_constructor_rejects_wrong_types(jobs: JobStore) -> None:
    with pytest.raises(TypeError):
        AsyncWorker({"max_workers": 1}, jobs)  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        AsyncWorker(CONFIG, object())  # type: ignore[arg-type]


def test_success_completes_job_and_plan(jobs: JobStore, plans: PlanStore) -> None:
    job = queued_job(plans, jobs, steps=3)
    engine = worker(jobs, plans)
    assert engine.pickup_and_execute(job) is PickupResult.succeeded
    stored = jobs.get(job.job_id)
    assert stored is not None and stored.status is AsyncJobStatus.succeeded
    assert stored.progress == 1.0 and stored.checkpoint == {"next_step": 3}
    assert stored.worker_id == engine.worker_id
    plan = plans.get(job.plan_id)
    assert plan is not None and plan.label == "Strategize/COMPLETE"
    assert engine.health.jobs_processed == 1 and engine.health.jobs_failed == 0


def test_exception_fails_with_redacted_type_and_message(jobs: JobStore, plans: PlanStore) -> None:
    def explode(ctx: JobContext) -> None:
        raise ConnectionError("db refused: postgresql://app:s3cr3t-pw@db/x password=hunter22")

    job = queued_job(plans, jobs)
    engine = worker(jobs, plans, explode)
    assert engine.pickup_and_execute(job) is PickupResult.failed
    stored = jobs.get(job.job_id)
    assert stored is not None and stored.status is AsyncJobStatus.failed
    assert stored.error_message is not None
    assert stored.error_message.startswith("ConnectionError: db refused")
    assert "s3cr3t-pw" not in stored.error_message and "hunter22" not in stored.error_message
    plan = plans.get(job.plan_id)
    assert plan is not None and plan.status is PlanStatus.failed
    assert engine.health.jobs_failed == 1 and engine.health.jobs_processed == 0


def test_cancel_trips_the_token_and_ends_cancelled(jobs: JobStore, plans: PlanStore) -> None:
    started = threading.Event()

    def wait_for_cancel(ctx: JobContext) -> None:
        started.set()
        assert ctx.token.wait(30), "token never tripped"

    job = queued_job(plans, jobs)
    engine = worker(jobs, plans, wait_for_cancel)
    results: list[PickupResult] = []
    runner = threading.Thread(target=lambda: results.append(engine.pickup_and_execute(job)))
    runner.start()
    assert started.wait(10)
    assert engine.cancel_job(job.job_id.lower()) is True
    runner.join(10)
    assert results == [PickupResult.cancelled]
    stored = jobs.get(job.job_id)
    assert stored is not None and stored.status is AsyncJobStatus.cancelled
    plan = plans.get(job.plan_id)
    assert plan is not None and plan.label == "Strategize/CANCELLED"
    assert engine.health.jobs_cancelled == 1 and engine.health.jobs_processed == 0


def test_cancel_recorded_elsewhere_reaches_the_token_through_the_heartbeat(
    jobs: JobStore, plans: PlanStore
) -> None:
    """Another process recorded the cancel in the ledger; no broadcast reached us."""
    started = threading.Event()

    def wait_for_cancel(ctx: JobContext) -> None:
        started.set()
        assert ctx.token.wait(30)

    job = queued_job(plans, jobs)
    engine = worker(jobs, plans, wait_for_cancel)
    runner = threading.Thread(target=engine.pickup_and_execute, args=(job,))
    runner.start()
    assert started.wait(10)
    jobs.cancel(job.job_id, utcnow())  # the ledger only; this engine is not told
    runner.join(10)
    assert not runner.is_alive()
    stored = jobs.get(job.job_id)
    assert stored is not None and stored.status is AsyncJobStatus.cancelled


def test_cancel_job_edge_cases(jobs: JobStore, plans: PlanStore) -> None:
    engine = worker(jobs, plans)
    with pytest.raises(ValueError):
        engine.cancel_job("")
    assert engine.cancel_job("01J00000000000000000000000") is False
    job = queued_job(plans, jobs)
    assert engine.cancel_job(job.job_id) is True  # queued: cancelled at once
    assert engine.cancel_job(job.job_id) is False  # already terminal
    assert engine.pickup_and_execute(job) is PickupResult.skipped


def test_job_running_elsewhere_is_untouched(jobs: JobStore, plans: PlanStore) -> None:
    ran: list[str] = []
    job = queued_job(plans, jobs)
    assert jobs.claim(job.job_id, "worker-other-1", utcnow())
    engine = worker(jobs, plans, lambda ctx: ran.append(ctx.job.job_id))
    before = jobs.get(job.job_id)
    assert engine.pickup_and_execute(job) is PickupResult.skipped
    assert ran == []
    assert jobs.get(job.job_id) == before
    assert engine.health.as_dict()["jobs_processed"] == 0


def test_terminal_job_is_untouched(jobs: JobStore, plans: PlanStore) -> None:
    job = queued_job(plans, jobs)
    jobs.claim(job.job_id, "worker-other-1", utcnow())
    jobs.finish(job.job_id, AsyncJobStatus.succeeded, utcnow())
    engine = worker(jobs, plans)
    assert engine.pickup_and_execute(job) is PickupResult.skipped
    stored = jobs.get(job.job_id)
    assert stored is not None and stored.worker_id == "worker-other-1"


@pytest.mark.parametrize("then_raise", [False, True])
def test_executor_that_finishes_the_job_itself(
    jobs: JobStore, plans: PlanStore, then_raise: bool
) -> None:
    def finish_myself(ctx: JobContext) -> None:
        jobs.finish(ctx.job.job_id, AsyncJobStatus.failed, utcnow(), "done my own way")
        if then_raise:
            raise RuntimeError("and then crashed")

    job = queued_job(plans, jobs)
    engine = worker(jobs, plans, finish_myself)
    assert engine.pickup_and_execute(job) is PickupResult.finished_elsewhere
    stored = jobs.get(job.job_id)
    assert stored is not None and stored.error_message == "done my own way"
    counts = engine.health.as_dict()
    assert counts["jobs_processed"] == counts["jobs_failed"] == counts["jobs_cancelled"] == 0


def test_pickup_rejects_non_jobs(jobs: JobStore, plans: PlanStore) -> None:
    with pytest.raises(TypeError):
        worker(jobs, plans).pickup_and_execute({"job_id": "x"})  # type: ignore[arg-type]


def test_heartbeat_advances_while_running_and_stops_after(jobs: JobStore, plans: PlanStore) -> None:
    release = threading.Event()
    job = queued_job(plans, jobs)
    engine = worker(jobs, plans, lambda ctx: release.wait(30) and None)
    runner = threading.Thread(target=engine.pickup_and_execute, args=(job,))
    runner.start()

    def advanced() -> bool:
        row = jobs.get(job.job_id)
        return bool(
            row and row.started_at and row.last_heartbeat and row.last_heartbeat > row.started_at
        )

    wait_for(advanced, timeout=10, what="a heartbeat after start")
    release.set()
    runner.join(10)
    assert engine.tracker.in_flight() == []
    wait_for(lambda: not engine.tracker.loop.running, timeout=5, what="heartbeat thread to stop")


def test_retry_policy_queues_a_new_attempt_with_the_checkpoint(
    jobs: JobStore, plans: PlanStore
) -> None:
    def fail_after_checkpoint(ctx: JobContext) -> None:
        if ctx.job.attempt == 1:
            ctx.checkpoint({"next_step": 1})
            raise RuntimeError("transient")

    published: list[AsyncJob] = []
    job = queued_job(plans, jobs)
    engine = AsyncWorker(
        AsyncWorkerConfig(heartbeat_interval=0.1, max_attempts=2),
        jobs,
        fail_after_checkpoint,
        plans,
        publish=published.extend,
    )
    assert engine.pickup_and_execute(job) is PickupResult.failed
    assert len(published) == 1
    retry = published[0]
    assert retry.attempt == 2 and retry.retry_of == job.job_id
    assert retry.checkpoint == {"next_step": 1}
    plan = plans.get(job.plan_id)
    assert plan is not None and plan.label == "Strategize/QUEUED"
    assert engine.pickup_and_execute(retry) is PickupResult.succeeded
    plan = plans.get(job.plan_id)
    assert plan is not None and plan.label == "Strategize/COMPLETE"


def test_unstorable_error_still_fails_the_job_at_once(jobs: JobStore, plans: PlanStore) -> None:
    """A NUL byte cannot be stored on PostgreSQL: the job fails now, with a printable error."""

    def explode(ctx: JobContext) -> None:
        raise ValueError("bad\x00byte password=hunter22 \udc80")

    job = queued_job(plans, jobs)
    engine = worker(jobs, plans, explode)
    assert engine.run_job(job.job_id) is PickupResult.failed
    stored = jobs.get(job.job_id)
    assert stored is not None and stored.status is AsyncJobStatus.failed
    assert stored.error_message is not None
    assert stored.error_message.startswith("ValueError: bad\ufffdbyte")
    assert "\x00" not in stored.error_message and "hunter22" not in stored.error_message
