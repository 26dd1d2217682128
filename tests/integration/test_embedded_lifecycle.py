"""The embedded worker's start and stop: bounded, and private to the worker they belong to.

The suite once hung here: Celery's `start_worker` stops a worker through a process-global
flag and shares kombu's process-global event loop, so stopping one in-process worker
stopped a second one (pytest-celery's session worker) and could overrun its own join;
that left the flag set, and the next in-process worker stopped inside its own start,
which Celery waits for without a bound.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest
from celery import Celery
from celery.result import task_join_will_block
from celery.worker import state as worker_state

from planq.domain.errors import EmbeddedWorkerError
from planq.domain.jobs import AsyncJobStatus
from planq.domain.plans import Plan
from planq.tasks.embedded import EmbeddedWorker
from planq.tasks.runtime import Runtime, reset_runtime, runtime_for
from tests.celery_support import make_app, wait_for_status
from tests.support import flush_redis, wait_for

EXEC = "tests.executors_for_tests"
STRATEGIZE = "planq.strategize_plan"
#: A second broker database, so two in-process workers never take each other's messages.
OTHER_REDIS_URL = os.environ["PLANQ_TEST_OTHER_REDIS_URL"]  # tests/resources.py


@pytest.fixture
def apps(redis_url: str, tmp_path: Path) -> Iterator[tuple[Celery, Celery]]:
    """Two planq apps, each with its own broker database and SQLite ledger."""
    flush_redis(OTHER_REDIS_URL)
    made = [
        make_app(url, f"sqlite:///{tmp_path / f'ledger-{i}.db'}", auto_migrate=True)
        for i, url in enumerate((redis_url, OTHER_REDIS_URL))
    ]
    yield made[0], made[1]
    for app in made:
        reset_runtime(app)


def run_one_job(app: Celery, rt: Runtime) -> None:
    plan = Plan.with_steps(["a"], name="lifecycle")
    rt.plans.add(plan)
    job_id = app.tasks[STRATEGIZE].delay(plan.plan_id).id
    wait_for_status(rt.jobs, job_id, AsyncJobStatus.succeeded, timeout=30)


def flags_are_clear() -> bool:
    return worker_state.should_terminate is None and worker_state.should_stop is None


def answers_ping(app: Celery, worker: EmbeddedWorker) -> bool:
    """Whether the worker's consumer still runs (its control channel answers a ping)."""
    return bool(app.control.ping(destination=[worker.hostname], timeout=1.0))


def test_stopping_one_in_process_worker_leaves_another_consuming(
    apps: tuple[Celery, Celery],
) -> None:
    first, second = apps
    keeps_running = EmbeddedWorker(runtime_for(second))  # as pytest-celery's session worker
    keeps_running.start()
    try:
        assert wait_for(lambda: answers_ping(second, keeps_running), what="a first pong")
        stopped = EmbeddedWorker(runtime_for(first))
        stopped.start()
        run_one_job(first, stopped.runtime)
        stopped.stop()
        assert flags_are_clear()
        assert keeps_running.is_running and answers_ping(second, keeps_running)

        restarted = EmbeddedWorker(runtime_for(first))
        restarted.start(timeout=30)
        run_one_job(first, restarted.runtime)
        restarted.stop()
        assert answers_ping(second, keeps_running)
    finally:
        keeps_running.stop()
    assert flags_are_clear()


def test_a_stop_that_runs_out_of_time_names_the_job_and_leaves_the_process_usable(
    apps: tuple[Celery, Celery], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PLANQ_TEST_SECONDS", "6")
    first, _ = apps
    stuck_app = make_app(
        first.conf.broker_url,
        first.planq.config.database_url,
        default_executor=f"{EXEC}:ignores_cancel",
    )
    try:
        worker = EmbeddedWorker(runtime_for(stuck_app))
        worker.start()
        plan = Plan.with_steps(["a"], name="stuck")
        worker.runtime.plans.add(plan)
        job_id = stuck_app.tasks[STRATEGIZE].delay(plan.plan_id).id
        wait_for_status(worker.runtime.jobs, job_id, AsyncJobStatus.running)

        with pytest.raises(EmbeddedWorkerError) as raised:
            worker.stop(timeout=1.0)
        message = str(raised.value)
        assert "did not stop within 1s" in message and job_id in message
        assert "still in:" in message  # where the worker thread was, for the reader
        assert flags_are_clear()
    finally:
        reset_runtime(stuck_app)

    # The next worker in this process starts and runs a job (it hung here before).
    next_worker = EmbeddedWorker(runtime_for(first))
    next_worker.start(timeout=30)
    try:
        run_one_job(first, next_worker.runtime)
    finally:
        next_worker.stop()


def test_a_worker_whose_broker_never_answers_fails_its_start(tmp_path: Path) -> None:
    app = make_app("redis://127.0.0.1:1/0", f"sqlite:///{tmp_path / 'ledger.db'}")
    app.conf.broker_connection_max_retries = 1
    worker = EmbeddedWorker(runtime_for(app))
    try:
        with pytest.raises(EmbeddedWorkerError) as raised:
            worker.start(timeout=20)
        message = str(raised.value)
        assert "did not start within 20s" in message and "redis://127.0.0.1:1/0" in message
        assert worker.is_running is False
        assert flags_are_clear()
        assert not task_join_will_block()  # this thread may still wait on results
    finally:
        reset_runtime(app)
