"""AsyncResult reads the ledger: a real in-process worker on Redis, SQLite and PostgreSQL ledgers.

Every state is produced by a real job (counted, slow, failing executors), never by a mock;
every wait polls with a deadline.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from datetime import datetime
from pathlib import Path

import pytest
from celery import Celery, states
from celery.exceptions import TimeoutError as CeleryTimeoutError
from celery.result import AsyncResult

from planq.domain.errors import (
    InvalidIdError,
    InvalidJobTransitionError,
    InvalidPlanTransitionError,
    JobCancelledError,
    JobFailedError,
    JobNotFoundError,
    PlanNotFoundError,
)
from planq.domain.ids import new_id
from planq.domain.jobs import AsyncJobStatus
from planq.domain.plans import Plan, PlanPhase
from planq.tasks.result_backend import LedgerBackend
from planq.tasks.runtime import Runtime
from planq.worker_config import client
from tests.celery_support import embedded_runtime, make_app, wait_for_status
from tests.executors_for_tests import REDIS
from tests.support import wait_for

EXEC = "tests.executors_for_tests"
STRATEGIZE = "planq.strategize_plan"

Started = Callable[..., AbstractContextManager[tuple[Celery, Runtime]]]


@pytest.fixture(params=["sqlite", "postgres"])
def database_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """A fresh ledger: a new SQLite file (migrated by the runtime) or the emptied PG database."""
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'ledger.db'}"
    request.getfixturevalue("pg_database")  # truncates the session database
    url: str = request.getfixturevalue("pg_url")
    return url


@pytest.fixture
def planq(redis_url: str, database_url: str) -> Started:
    """Open an app whose phases run `executor` (in tests.executors_for_tests), worker optional."""

    @contextmanager
    def started(executor: str = "counted", start: bool = True) -> Iterator[tuple[Celery, Runtime]]:
        app = make_app(redis_url, database_url, default_executor=f"{EXEC}:{executor}")
        with embedded_runtime(app, start=start) as rt:
            yield app, rt

    return started


def new_plan(rt: Runtime) -> Plan:
    return rt.lifecycle.create_plan(["a", "b"], name="result-backend")


def state_is(result: AsyncResult, *wanted: str) -> bool:
    return bool(result.state in wanted)


def test_the_app_reads_results_from_the_ledger(planq: Started) -> None:
    with planq(start=False) as (app, _):
        assert isinstance(app.backend, LedgerBackend)
        assert app.backend.as_uri() == "planq-ledger://"  # never the database URL
        assert app.backend.supports_autoexpire  # no celery.backend_cleanup beat entry


def test_pending_started_success_follow_the_row(
    planq: Started, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PLANQ_TEST_SECONDS", "2")
    with planq(start=False) as (app, rt):
        plan = new_plan(rt)
        result = app.tasks[STRATEGIZE].delay(plan.plan_id)
        assert result.state == states.PENDING
        assert not result.ready() and not result.successful()
        assert result.exists()  # queued, yet known (Celery's default would say no)
        assert result.info["status"] == "queued" and result.info["plan_id"] == plan.plan_id

        rt.worker.start()
        wait_for(lambda: state_is(result, states.STARTED), timeout=20, what="STARTED")
        info = wait_for(
            lambda: result.info if (result.info or {}).get("progress") else None,
            timeout=20,
            what="progress while running",
        )
        assert result.state in (states.STARTED, states.SUCCESS)
        assert 0 < info["progress"] <= 1 and info["checkpoint"]["step"] >= 1
        assert info["worker_id"] and info["attempt"] == 1 and info["phase"] == "strategize"
        assert datetime.fromisoformat(info["started_at"]).tzinfo is not None

        done = result.get(timeout=30)
        assert result.state == states.SUCCESS and result.ready() and result.successful()
        assert done["status"] == "succeeded" and done["progress"] == 1.0
        assert done["checkpoint"] == {"step": 10}
        row = rt.jobs.get(result.id)
        assert row is not None and row.finished_at is not None
        assert done["finished_at"] == row.finished_at.isoformat()
        assert result.date_done == row.finished_at
        assert result.name == STRATEGIZE and result.worker == row.worker_id

        result.forget()  # a no-op: the row is the result
        assert app.AsyncResult(result.id).state == states.SUCCESS
    assert REDIS.keys("celery-task-meta-*") == []  # nothing stored beside the ledger


def test_failure_raises_the_typed_error_with_the_redacted_text(planq: Started) -> None:
    with planq("leak_secret") as (app, rt):
        result = app.tasks[STRATEGIZE].delay(new_plan(rt).plan_id)
        with pytest.raises(JobFailedError) as raised:
            result.get(timeout=30)
        row = rt.jobs.get(result.id)
        assert row is not None and row.status is AsyncJobStatus.failed
        err = raised.value
        assert err.job_id == result.id and err.error == row.error_message
        assert err.error is not None and err.error.startswith("PermissionError:")
        assert "SECRETVALUE123" not in str(err) and "SECRETVALUE123" not in repr(err.info)
        assert err.info["status"] == "failed" and err.info["error"] == row.error_message
        assert result.state == states.FAILURE and result.ready() and result.failed()
        assert not result.successful()
        # The row's traceback: the user's frame, redacted (issue 19, item 2).
        assert result.traceback == row.error_traceback
        assert 'executors_for_tests.py", line' in result.traceback
        assert "in leak_secret" in result.traceback and "SECRETVALUE123" not in result.traceback
        assert result.get(propagate=False) is result.info  # Celery's convention: the error
        with pytest.raises(JobFailedError):  # and the client's wait says the same
            client.wait_for_job(result.id, timeout=5, app=app)


@pytest.mark.parametrize("how", ["cancel_job", "revoke"])
def test_a_cancelled_job_is_revoked(planq: Started, how: str) -> None:
    with planq("slow") as (app, rt):
        result = app.tasks[STRATEGIZE].delay(new_plan(rt).plan_id)
        wait_for(
            lambda: (result.info or {}).get("checkpoint"), timeout=20, what="a first checkpoint"
        )
        assert result.state == states.STARTED
        if how == "cancel_job":
            assert rt.worker.cancel_job(result.id)
        else:
            result.revoke()  # Celery's control path, through planq's revoke bridge
        with pytest.raises(JobCancelledError) as raised:
            result.get(timeout=30)
        assert result.state == states.REVOKED and result.ready() and not result.successful()
        assert raised.value.job_id == result.id
        assert raised.value.info["status"] == "cancelled"
        assert raised.value.info["checkpoint"]["step"] >= 1  # kept for a retry


def test_get_times_out_on_a_slow_job(planq: Started) -> None:
    with planq("slow") as (app, rt):
        result = app.tasks[STRATEGIZE].delay(new_plan(rt).plan_id)
        wait_for(lambda: state_is(result, states.STARTED), timeout=20, what="STARTED")
        began = time.monotonic()
        with pytest.raises(CeleryTimeoutError):
            result.get(timeout=0.5)
        assert 0.5 <= time.monotonic() - began < 2.0
        assert result.state == states.STARTED
        assert rt.worker.cancel_job(result.id)
        wait_for_status(rt.jobs, result.id, AsyncJobStatus.cancelled)


@pytest.mark.parametrize(
    "task_id",
    [new_id(), "not-a-job-id", "celery-uuid-like-1234"],
    ids=["unknown-ulid", "not-a-job-id", "celery-uuid-like-1234"],  # alike on every xdist worker
)
def test_an_unknown_id_is_pending_as_in_celery(planq: Started, task_id: str) -> None:
    with planq(start=False) as (app, _):
        result = app.AsyncResult(task_id)
        assert result.state == states.PENDING and result.info is None
        assert not result.ready() and not result.exists()
        with pytest.raises(CeleryTimeoutError):
            result.get(timeout=0.2)


def test_the_client_end_to_end(planq: Started) -> None:
    with planq() as (app, _):
        plans = [client.create_plan(["a", "b"], name=f"client-{i}", app=app) for i in range(2)]
        assert [p.label for p in plans] == ["New", "New"]

        bulk = client.queue_phases([p.plan_id for p in plans], "strategize", app=app)
        assert len(bulk) == 2
        for result in bulk:
            assert client.wait_for_job(result.id, timeout=30, app=app)["status"] == "succeeded"

        with pytest.raises(InvalidPlanTransitionError):  # apply needs Execute/COMPLETE
            client.queue_phase(plans[0].plan_id, PlanPhase.apply, app=app)
        result = client.queue_phase(plans[0].plan_id, PlanPhase.execute, app=app)
        info = client.wait_for_job(result.id, timeout=30, app=app)
        assert info["phase"] == "execute" and info["progress"] == 1.0

        job = client.get_job(result.id, app=app)
        assert job.status is AsyncJobStatus.succeeded and job.plan_id == plans[0].plan_id
        with pytest.raises(JobNotFoundError):
            client.get_job(new_id(), app=app)
        with pytest.raises(InvalidIdError):
            client.get_job("nope", app=app)
        with pytest.raises(CeleryTimeoutError):
            client.wait_for_job(new_id(), timeout=0.2, app=app)


def test_the_client_reads_plans_lists_cancels_and_retries_jobs(planq: Started) -> None:
    """get_plan, list_jobs, cancel_job, retry_job: the CLI's doors, from Python."""
    with planq("slow") as (app, rt):
        plan = client.create_plan(["a"], name="client-ops", app=app)
        first = client.queue_phase(plan.plan_id, "strategize", app=app)
        wait_for(lambda: (first.info or {}).get("checkpoint"), timeout=20, what="a checkpoint")
        assert client.get_plan(plan.plan_id.lower(), app=app).label == "Strategize/RUNNING"

        asked = client.cancel_job(first.id, app=app)  # running: asked to stop
        assert asked.job_id == first.id and asked.cancel_requested_at is not None
        with pytest.raises(JobCancelledError):
            client.wait_for_job(first.id, timeout=30, app=app)
        assert rt.jobs.get(first.id).status is AsyncJobStatus.cancelled  # type: ignore[union-attr]
        with pytest.raises(InvalidJobTransitionError):  # already ended: nothing written
            client.cancel_job(first.id, app=app)
        assert client.get_plan(plan.plan_id, app=app).label == "Strategize/CANCELLED"

        second = client.retry_job(first.id, app=app)
        row = client.get_job(second.id, app=app)
        assert (row.attempt, row.retry_of, row.plan_id) == (2, first.id, plan.plan_id)
        assert row.checkpoint is not None and row.checkpoint["step"] >= 1  # carried over
        with pytest.raises(InvalidPlanTransitionError):  # retried already
            client.retry_job(first.id, app=app)
        with pytest.raises(InvalidJobTransitionError):  # live: only an ended job retries
            client.retry_job(second.id, app=app)

        newest_first = client.list_jobs(plan_id=plan.plan_id, app=app)
        assert [j.job_id for j in newest_first] == [second.id, first.id]
        cancelled = client.list_jobs(status="cancelled", app=app)
        assert [j.job_id for j in cancelled] == [first.id]
        assert client.list_jobs(plan_id=plan.plan_id, limit=1, offset=1, app=app)[0].job_id == (
            first.id
        )

        client.cancel_job(second.id, app=app)  # the retry is a real job: stop it too
        with pytest.raises(JobCancelledError):
            second.get(timeout=30)

        with pytest.raises(PlanNotFoundError):
            client.get_plan(new_id(), app=app)
        with pytest.raises(JobNotFoundError):
            client.cancel_job(new_id(), app=app)
        with pytest.raises(JobNotFoundError):
            client.retry_job(new_id(), app=app)
        with pytest.raises(InvalidIdError):
            client.list_jobs(plan_id="nope", app=app)
        with pytest.raises(ValueError):
            client.list_jobs(status="exploded", app=app)


def test_the_client_cancels_a_queued_job_at_once(planq: Started) -> None:
    with planq(start=False) as (app, _):  # no worker: the job stays queued
        plan = client.create_plan(["a"], app=app)
        queued = client.queue_phase(plan.plan_id, "strategize", app=app)
        row = client.cancel_job(queued.id, app=app)
        assert row.status is AsyncJobStatus.cancelled and row.is_terminal
        assert queued.state == states.REVOKED
