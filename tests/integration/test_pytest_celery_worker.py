"""planq on pytest-celery's own fixtures: its session app and in-process worker, no Docker.

pytest-celery 1.x keeps Celery's classic fixtures (`celery_config`, `celery_parameters`,
`celery_worker_pool`, `celery_worker_parameters`, `celery_session_app`,
`celery_session_worker`) and shadows only the function-scoped `celery_worker` with its
Docker-based `CeleryTestWorker`. So these tests override the classic knobs and let the
plugin build the app and start the worker: `bootstrap(settings, app=…)` makes its app a planq app
before the worker starts (`celery_worker_parameters` depends on it), and the worker is a
threads pool on a Redis database of its own (it lives for the rest of the session).

The EmbeddedWorker tests (test_celery_embedded.py) test planq's laptop mode itself, which
is built on the same `celery.contrib.testing.worker.start_worker`.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import Any

import pytest
from celery import Celery

from planq.domain.errors import JobFailedError
from planq.domain.jobs import AsyncJobStatus
from planq.domain.plans import Plan
from planq.store.migrate import upgrade
from planq.tasks.runtime import Runtime, runtime_for
from planq.worker_config.bootstrap import bootstrap
from planq.worker_config.celery_config import celery_config as planq_celery_config
from planq.worker_config.settings import PlanqSettings, load_settings
from tests.celery_support import FAST, wait_for_status
from tests.support import create_pg_database, drop_pg_database, flush_redis

#: Not the shared DB 13: this worker consumes planq's queues until the session ends.
BROKER_URL = os.environ["PLANQ_TEST_PYTEST_CELERY_REDIS_URL"]  # tests/resources.py
STRATEGIZE = "planq.strategize_plan"

pytestmark = [pytest.mark.postgres, pytest.mark.redis]


@pytest.fixture(scope="session")
def planq_settings() -> Iterator[PlanqSettings]:
    """Settings on a ledger database and a Redis database of this module's own."""
    flush_redis(BROKER_URL)
    url = create_pg_database("planq_pc")
    upgrade(url)
    yield load_settings(
        broker_url=BROKER_URL,
        database_url=url,
        default_executor="tests.executors_for_tests:by_plan_name",
        **FAST,
    )
    drop_pg_database(url)


@pytest.fixture(scope="session")
def celery_config(planq_settings: PlanqSettings) -> dict[str, Any]:
    """The plugin's app gets planq's Celery configuration (JSON only, planq's queues)."""
    return planq_celery_config(planq_settings)


@pytest.fixture(scope="session")
def celery_worker_pool() -> str:
    """Threads: planq's tokens trip in the process that runs the job."""
    return "threads"


@pytest.fixture(scope="session")
def planq_app(celery_session_app: Celery, planq_settings: PlanqSettings) -> Celery:
    """The plugin's session app, made a planq app (tasks, ledger runtime, signals)."""
    return bootstrap(planq_settings, app=celery_session_app)


@pytest.fixture(scope="session")
def celery_worker_parameters(planq_app: Celery) -> dict[str, Any]:
    """Depends on planq_app, so planq's tasks exist before the plugin starts the worker."""
    return {"perform_ping_check": False, "concurrency": 4, "shutdown_timeout": 30.0}


@pytest.fixture
def runtime(planq_app: Celery, celery_session_worker: Any) -> Runtime:
    """The ledger of the app the plugin's worker runs."""
    return runtime_for(planq_app)


def queue_plan(app: Celery, rt: Runtime, name: str) -> str:
    plan = Plan.with_steps(["one"], name=name)
    rt.plans.add(plan)
    return app.tasks[STRATEGIZE].delay(plan.plan_id).id


def test_the_plugins_worker_runs_a_phase_and_asyncresult_reads_the_ledger(
    planq_app: Celery, runtime: Runtime
) -> None:
    job_id = queue_plan(planq_app, runtime, "ok")

    done = planq_app.AsyncResult(job_id).get(timeout=30)  # the job's row, as a dict

    assert done["job_id"] == job_id and done["status"] == "succeeded", done
    job = wait_for_status(runtime.jobs, job_id, AsyncJobStatus.succeeded)
    assert job.worker_id is not None and job.finished_at is not None


def test_a_failing_phase_is_failure_with_its_redacted_error(
    planq_app: Celery, runtime: Runtime
) -> None:
    job_id = queue_plan(planq_app, runtime, "fail")

    with pytest.raises(JobFailedError) as failed:
        planq_app.AsyncResult(job_id).get(timeout=30)
    assert planq_app.AsyncResult(job_id).state == "FAILURE"
    assert "PermissionError" in str(failed.value) and "SECRETVALUE123" not in str(failed.value)
    job = runtime.jobs.get(job_id)
    assert job is not None and job.error_message is not None
    assert "SECRETVALUE123" not in job.error_message


def test_celery_revoke_lands_on_the_running_jobs_token(planq_app: Celery, runtime: Runtime) -> None:
    job_id = queue_plan(planq_app, runtime, "slow")
    wait_for_status(runtime.jobs, job_id, AsyncJobStatus.running)

    planq_app.control.revoke(job_id)  # what Flower's button sends

    job = wait_for_status(runtime.jobs, job_id, AsyncJobStatus.cancelled)
    assert job.cancel_requested_at is not None and job.finished_at is not None
    assert planq_app.AsyncResult(job_id).state == "REVOKED"
