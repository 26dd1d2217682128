"""Real Celery, in-process: threads-pool worker on Redis, ledger on PostgreSQL."""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Iterator
from typing import Any

import pytest
import redis
from celery import Celery
from celery.signals import task_prerun
from sqlalchemy import event

from planq.domain.errors import InvalidIdError, InvalidPlanTransitionError, PlanNotFoundError
from planq.domain.ids import new_id
from planq.domain.jobs import AsyncJob, AsyncJobStatus
from planq.domain.plans import Plan, PlanPhase, PlanStatus
from planq.store import Database
from planq.tasks.runtime import Runtime
from tests.celery_support import embedded_runtime, embedded_worker, make_app, wait_for_status
from tests.executors_for_tests import REDIS, runs_key
from tests.support import wait_for

EXEC = "tests.executors_for_tests"


@pytest.fixture
def app(redis_url: str, pg_database: Database, pg_url: str) -> Celery:
    REDIS.delete("planq-test:concurrent", "planq-test:max-concurrent", "planq-test:pids")
    return make_app(redis_url, pg_url, default_executor=f"{EXEC}:counted", max_workers=4)


@pytest.fixture
def runtime(app: Celery) -> Iterator[Runtime]:
    with embedded_runtime(app) as rt:
        yield rt


def ready_plan(rt: Runtime, phase_done: PlanPhase | None = None) -> Plan:
    plan = Plan.with_steps(["a", "b"])
    rt.plans.add(plan)
    if phase_done is not None:
        stored = rt.plans.get(plan.plan_id)
        assert stored is not None
        stored.__dict__.update(phase=phase_done, status=PlanStatus.complete)
        rt.plans.update(stored)
    got = rt.plans.get(plan.plan_id)
    assert got is not None
    return got


def sibling_app(app: Celery, executor: str, **settings: Any) -> Celery:
    """An app on the same broker and ledger as `app`, running the named test executor."""
    return make_app(
        app.conf.broker_url,
        app.planq.config.database_url,
        default_executor=f"{EXEC}:{executor}",
        **settings,
    )


def queue_len(app: Celery, queue: str) -> int:
    return int(redis.Redis.from_url(app.conf.broker_url).llen(queue))


def test_delay_runs_the_phase_and_moves_the_plan(app: Celery, runtime: Runtime) -> None:
    plan = ready_plan(runtime, PlanPhase.strategize)
    result = app.tasks["planq.execute_plan"].delay(plan.plan_id)
    job = wait_for_status(runtime.jobs, result.id, AsyncJobStatus.succeeded)
    assert job.phase is PlanPhase.execute and job.plan_id == plan.plan_id
    assert job.dispatched_at is not None and job.dispatch_count == 1
    stored = runtime.plans.get(plan.plan_id)
    assert stored is not None and stored.label == "Execute/COMPLETE"
    assert int(REDIS.get(runs_key(job.job_id)) or 0) == 1


@pytest.mark.parametrize(
    ("plan_id", "error"),
    [("not-a-ulid", InvalidIdError), (new_id(), PlanNotFoundError), (None, InvalidIdError)],
    ids=["not-a-ulid", "unknown-plan", "none"],  # a fixed name: each xdist worker collects alike
)
def test_bad_producer_calls_raise_typed_errors_and_write_nothing(
    app: Celery, plan_id: Any, error: type[Exception]
) -> None:
    with embedded_runtime(app, start=False) as rt:
        with pytest.raises(error):
            app.tasks["planq.execute_plan"].delay(plan_id)
        assert rt.jobs.count() == 0
    assert queue_len(app, "planq.execute") == 0


def test_wrong_plan_state_is_refused_in_the_producer(app: Celery) -> None:
    with embedded_runtime(app, start=False) as rt:
        plan = ready_plan(rt)  # new: execute needs Strategize/COMPLETE
        with pytest.raises(InvalidPlanTransitionError):
            app.tasks["planq.execute_plan"].delay(plan.plan_id)
        assert rt.jobs.count() == 0
        stored = rt.plans.get(plan.plan_id)
        assert stored is not None and stored.label == "New"
    assert queue_len(app, "planq.execute") == 0


def test_embedded_start_and_stop_are_idempotent(app: Celery) -> None:
    with embedded_worker(app, start=False) as worker:
        assert worker.is_running is False
        worker.start()
        worker.start()
        assert worker.is_running is True
        plan = ready_plan(worker.runtime)
        result = app.tasks["planq.strategize_plan"].delay(plan.plan_id)
        wait_for_status(worker.runtime.jobs, result.id, AsyncJobStatus.succeeded)
        worker.stop()
        worker.stop()
        assert worker.is_running is False


def test_rows_without_a_message_are_run(runtime: Runtime) -> None:
    plan = ready_plan(runtime)
    stored = runtime.plans.get(plan.plan_id)
    assert stored is not None
    stored.queue_phase(PlanPhase.strategize)
    runtime.plans.update(stored)
    job = AsyncJob(plan_id=plan.plan_id, phase=PlanPhase.strategize)
    runtime.jobs.add(job)  # no message published
    done = wait_for_status(runtime.jobs, job.job_id, AsyncJobStatus.succeeded)
    assert done.dispatch_count >= 1


def test_four_jobs_run_at_once_on_max_workers_4(app: Celery, runtime: Runtime) -> None:
    plans = [ready_plan(runtime) for _ in range(8)]
    results = [app.tasks["planq.strategize_plan"].delay(p.plan_id) for p in plans]
    for result in results:
        wait_for_status(runtime.jobs, result.id, AsyncJobStatus.succeeded)
    assert int(REDIS.get("planq-test:max-concurrent") or 0) == 4
    assert runtime.worker.health.jobs_processed == 8


def test_duplicate_delivery_runs_the_phase_once(app: Celery, runtime: Runtime) -> None:
    held_at_prerun: list[bool] = []

    def after_planqs_receiver(task_id: Any = None, **_: Any) -> None:
        held_at_prerun.append(runtime.worker.tracker.token(str(task_id)) is not None)

    task_prerun.connect(after_planqs_receiver, weak=False, dispatch_uid="test-held")
    try:
        plan = ready_plan(runtime)
        result = app.tasks["planq.strategize_plan"].delay(plan.plan_id)
        job = runtime.jobs.get(result.id)
        assert job is not None
        task = app.tasks["planq.strategize_plan"]
        task.publish_job(job)
        task.publish_job(job)  # the same message three times in all
        wait_for_status(runtime.jobs, job.job_id, AsyncJobStatus.succeeded)
        wait_for(lambda: len(held_at_prerun) == 3, what="all three deliveries")
    finally:
        task_prerun.disconnect(dispatch_uid="test-held")
    assert int(REDIS.get(runs_key(job.job_id)) or 0) == 1
    assert held_at_prerun == [True, True, True]  # before any claim, each delivery's token
    # ... and released it on task_postrun: nothing is left held or beaten.
    tracker = runtime.worker.tracker
    wait_for(lambda: tracker.token(job.job_id) is None, what="every hold released")
    assert tracker.in_flight() == []


def test_heartbeat_is_one_statement_per_interval_for_all_jobs(
    app: Celery, runtime: Runtime, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PLANQ_TEST_SECONDS", "1.5")
    statements: list[int] = []
    lock = threading.Lock()

    def count(conn: Any, cursor: Any, statement: str, params: Any, *_: Any) -> None:
        sets = "".join(statement.split()).upper()
        if sets.startswith("UPDATE") and "SETLAST_HEARTBEAT=" in sets:
            values = params.values() if isinstance(params, dict) else params or ()
            items = [x for v in values for x in (v if isinstance(v, list) else [v])]
            ids = sum(1 for x in items if isinstance(x, str) and len(x) == 26)  # a ULID each
            with lock:
                statements.append(ids)

    for engine in runtime.db.engines:
        event.listen(engine, "before_cursor_execute", count)
    plans = [ready_plan(runtime) for _ in range(4)]
    results = [app.tasks["planq.strategize_plan"].delay(p.plan_id) for p in plans]
    for result in results:
        wait_for_status(runtime.jobs, result.id, AsyncJobStatus.succeeded)
    for engine in runtime.db.engines:
        event.remove(engine, "before_cursor_execute", count)
    # 4 jobs x ~1.5 s at 0.2 s would be ~30 statements if each job beat on its own.
    assert 3 <= len(statements) <= 15, statements
    assert max(statements) == 4, statements  # one statement carried all four jobs


def test_stop_trips_in_flight_tokens_and_keeps_checkpoints(app: Celery) -> None:
    slow = sibling_app(app, "slow")
    with embedded_worker(slow) as worker:
        rt = worker.runtime
        plan = ready_plan(rt)
        result = slow.tasks["planq.strategize_plan"].delay(plan.plan_id)
        wait_for(
            lambda: (rt.jobs.get(result.id) or AsyncJob.model_construct()).checkpoint,
            what="a first checkpoint",
        )
        worker.stop()
        job = rt.jobs.get(result.id)
        assert job is not None
        assert job.status is AsyncJobStatus.failed
        assert job.error_message == "interrupted: worker shutdown"
        assert job.checkpoint is not None and job.checkpoint["step"] >= 1


def test_secrets_never_reach_ledger_logs_or_events(
    app: Celery, caplog: pytest.LogCaptureFixture
) -> None:
    # task_sent_events: the producer's event is checked too
    leaky = sibling_app(app, "leak_secret", task_sent_events=True)
    captured: list[dict[str, Any]] = []
    ready, stop = threading.Event(), threading.Event()

    def listen() -> None:
        with leaky.connection_for_read() as conn:
            recv = leaky.events.Receiver(conn, handlers={"*": captured.append})
            ready.set()
            while not stop.is_set():
                try:
                    recv.capture(limit=None, timeout=0.5, wakeup=False)
                except TimeoutError:
                    continue

    listener = threading.Thread(target=listen, daemon=True)
    listener.start()
    assert ready.wait(10)
    caplog.set_level(logging.DEBUG)
    with embedded_runtime(leaky) as rt:
        plan = ready_plan(rt)
        result = leaky.tasks["planq.strategize_plan"].delay(plan.plan_id)
        job = wait_for_status(rt.jobs, result.id, AsyncJobStatus.failed)
        failed = wait_for(
            lambda: [e for e in captured if e.get("type") == "task-failed"],
            what="the task's task-failed event",
        )
    stop.set()
    listener.join(10)
    assert job.error_message is not None and job.error_message.startswith("PermissionError")
    assert "SECRETVALUE123" not in job.error_message
    assert "***REDACTED***" in job.error_message
    assert "SECRETVALUE123" not in caplog.text
    sent = [e for e in captured if e.get("type") == "task-sent"]
    assert sent and all(
        e["kwargs"] == repr({"job_id": job.job_id, "plan_id": plan.plan_id})
        for e in sent
        if e.get("uuid") == job.job_id
    )
    assert "SECRETVALUE123" not in json.dumps(captured, default=str)
    assert "PermissionError" in failed[0]["exception"]  # Flower's FAILURE, redacted


def test_an_exception_whose_str_raises_still_fails_the_job_redacted(
    app: Celery, caplog: pytest.LogCaptureFixture
) -> None:
    broken = sibling_app(app, "unprintable_secret")
    caplog.set_level(logging.DEBUG)
    with embedded_runtime(broken) as rt:
        plan = ready_plan(rt)
        result = broken.tasks["planq.strategize_plan"].delay(plan.plan_id)
        job = wait_for_status(rt.jobs, result.id, AsyncJobStatus.failed)
    assert job.error_message == "_Unprintable: <unprintable message>"  # not "heartbeat expired"
    assert "hunter2" not in caplog.text
