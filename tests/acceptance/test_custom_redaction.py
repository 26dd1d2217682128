"""A site's own secret pattern on every surface a real fleet shows (issue 22, findings 1, 4).

Real `celery -A worker_config worker` processes with PLANQ_REDACTION_PATTERNS set, Flower
on the same broker, the ledger on PostgreSQL. The executor raises `RuntimeError(token)
from KeyError(other token)` after logging the chain; none of the tokens may appear in
the row, the worker's log file, Flower's task (exception, traceback, result, args) or a
producer's AsyncResult. And a write the ledger's schema refuses ends the job with the
constraint's name, never the SQL text or its parameters.
"""

from __future__ import annotations

import re
import socket
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from celery import Celery
from sqlalchemy import text

from planq.domain.errors import JobFailedError
from planq.domain.jobs import AsyncJobStatus
from planq.domain.plans import Plan
from planq.domain.redaction import REDACTED
from planq.store import Database
from planq.tasks.runtime import Runtime, reset_runtime
from planq.worker_config.celery_config import ALL_QUEUES
from tests.acceptance.conftest import EXEC, StartWorker
from tests.acceptance.flower_support import FlowerServer, StartFlower
from tests.celery_support import (
    CeleryProcess,
    WorkerProcess,
    make_app,
    wait_for_status,
    worker_env,
)
from tests.executors_for_tests import CHAINED_TOKEN, CUSTOM_TOKEN, LOGGED_TOKEN
from tests.support import wait_for

pytestmark = pytest.mark.processes

PATTERNS = '["tok_[A-Za-z0-9]+"]'
TOKENS = (CUSTOM_TOKEN, CHAINED_TOKEN, LOGGED_TOKEN)
STRATEGIZE = "planq.strategize_plan"
#: Imported by the worker only (`--include`): importing it here would build the default app.
HANDLERS = "tests.run_handlers_for_tests"
PANICS = "redaction_panics_in_worker"  #: its job's name
#: A CHECK the test adds: the ledger refuses a failed row whose error names the upstream.
CONSTRAINT = "ck_async_jobs_test_refused"
SQL_TEXT = re.compile(r"\bUPDATE\b|\bSELECT\b|\bINSERT\b|\[parameters|\[SQL")


@pytest.fixture
def producer(redis_url: str, pg_database: Database, pg_url: str) -> Iterator[Celery]:
    """The producer runs on the fleet's settings: the same PLANQ_REDACTION_PATTERNS."""
    app = make_app(redis_url, pg_url, redaction_patterns=PATTERNS)
    yield app
    reset_runtime(app)


def no_token(where: str, shown: str) -> None:
    """None of the custom-pattern tokens is in shown (nor any tok_… at all)."""
    leaked = [token for token in TOKENS if token in shown]
    assert not leaked, f"{where} shows {leaked}:\n{shown[-3000:]}"
    assert re.search(r"tok_[A-Za-z0-9]", shown) is None, f"{where}:\n{shown[-3000:]}"


def failing_job(producer: Celery, runtime: Runtime, name: str = "custom") -> str:
    """Queue a strategize job through the producer; its id."""
    plan = Plan.with_steps(["one"], name=name)
    runtime.plans.add(plan)
    return str(producer.tasks[STRATEGIZE].delay(plan.plan_id).id)


def flower_task(flower: FlowerServer, job_id: str, state: str) -> dict[str, Any]:
    """Flower's task info once it shows state."""

    def shown() -> dict[str, Any] | None:
        task = flower.api("/api/tasks").get(job_id)
        return task if task is not None and task.get("state") == state else None

    found: dict[str, Any] = wait_for(
        shown, timeout=60, interval=0.5, what=f"Flower to show {job_id} {state}"
    )
    return found


def failed_row(runtime: Runtime, job_id: str, worker: WorkerProcess) -> Any:
    """The row once failed (the worker's log in the failure message otherwise)."""
    try:
        return wait_for_status(runtime.jobs, job_id, AsyncJobStatus.failed, timeout=60)
    except pytest.fail.Exception:
        row = runtime.jobs.get(job_id)
        pytest.fail(f"{job_id} is {row and row.status}; worker log:\n{worker.log_tail(80)}")


def logged_failure(worker: WorkerProcess) -> str:
    """The worker's log file once it has logged the task's failure."""
    path = worker.log_path
    assert path is not None

    def logged() -> str | None:
        text = path.read_text(errors="replace")
        return text if "PhaseJobFailed" in text else None

    found: str = wait_for(logged, timeout=30, what="the worker to log the task's failure")
    return found


def start_custom_worker(start_worker: StartWorker, name: str) -> WorkerProcess:
    return start_worker(
        name,
        default_executor=f"{EXEC}:custom_token_chain",
        redaction_patterns=PATTERNS,
    )


def test_the_worker_log_never_shows_a_custom_pattern_secret_even_in_a_chained_traceback(
    producer: Celery, runtime: Runtime, start_worker: StartWorker
) -> None:
    worker = start_custom_worker(start_worker, "redactlog")
    job_id = failing_job(producer, runtime)
    row = failed_row(runtime, job_id, worker)
    assert row.error_message == f"RuntimeError: upstream refused {REDACTED}"

    log = logged_failure(worker)
    # The executor's logged chain is there, cause and all, with every token redacted.
    assert "upstream call failed with" in log
    assert "The above exception was the direct cause of the following exception" in log
    assert f"KeyError: 'credential {REDACTED} not accepted'" in log
    assert f"RuntimeError: upstream refused {REDACTED}" in log
    # The engine logs the failure once, ERROR, with the executor's stack (issue 19, item 2).
    assert log.count(f"job {job_id} failed:") == 1, log[-3000:]
    failed = re.search(rf"ERROR/\S+\] job {job_id} failed: RuntimeError: upstream refused", log)
    assert failed is not None, log[-3000:]
    after = log[failed.end() :]
    assert after.index("in custom_token_chain") < after.index("PhaseJobFailed")
    no_token("the worker log", log)


def test_flower_shows_only_redacted_text_for_a_custom_pattern_secret(
    producer: Celery, runtime: Runtime, start_worker: StartWorker, start_flower: StartFlower
) -> None:
    flower = start_flower()
    worker = start_custom_worker(start_worker, "redactflower")
    wait_for(
        lambda: f"redactflower@{socket.gethostname()}" in flower.api("/api/workers", refresh="1"),
        timeout=60,
        interval=0.5,
        what="Flower to list the worker",
    )
    job_id = failing_job(producer, runtime)
    failed_row(runtime, job_id, worker)
    # A recoverable run whose operator input carries a token: its args, and the error
    # that echoes the bad value, go through the same redactor.
    run_id = producer.tasks["planq.runs.ledger_consistency"].delay({"batch_size": CUSTOM_TOKEN}).id

    job = flower_task(flower, job_id, "FAILURE")
    assert job["exception"] == f"PhaseJobFailed('RuntimeError: upstream refused {REDACTED}')"
    assert "PhaseJobFailed: RuntimeError: upstream refused" in job["traceback"]
    # The user's frames, from the row's redacted traceback, above planq's own.
    assert 'executors_for_tests.py", line' in job["traceback"]
    assert "in custom_token_chain" in job["traceback"]
    assert f"KeyError: 'credential {REDACTED} not accepted'" in job["traceback"]
    shown = job["traceback"]
    assert shown.index("in custom_token_chain") < shown.index('phase_tasks.py", line')
    run = flower_task(flower, run_id, "FAILURE")
    assert run["exception"].startswith('RunFailed("ledger_consistency param batch_size'), run
    assert REDACTED in run["exception"] and REDACTED in run["args"]
    for task in (job, run):
        no_token(f"Flower's task {task['uuid']}", repr(task))
    no_token("Flower's task list", repr(flower.api("/api/tasks")))


class IncludingWorker(WorkerProcess):
    """A prefork `celery worker` that also imports the test's recoverable job."""

    def __init__(self, env: dict[str, str], name: str, log_path: Path) -> None:
        args = ["worker", "-P", "prefork", "-c", "1", "-n", f"{name}@%h"]
        args += ["-Q", ",".join(ALL_QUEUES), "--loglevel", "INFO"]
        args += ["--without-mingle", "--without-gossip", "--include", HANDLERS]
        CeleryProcess.__init__(self, env, name, args, log_path)


def test_flower_shows_a_paused_runs_result_redacted(
    producer: Celery,
    redis_url: str,
    pg_url: str,
    start_flower: StartFlower,
    tmp_path: Path,
) -> None:
    flower = start_flower()
    env = worker_env(redis_url, pg_url, redaction_patterns=PATTERNS)
    worker = IncludingWorker(env, "redactrun", tmp_path / "redactrun.log")
    try:
        worker.wait_ready(producer)
        run_task = producer.send_task(f"planq.runs.{PANICS}")
        task = flower_task(flower, run_task.id, "SUCCESS")
        assert "'paused': True" in task["result"], task
        assert f"'error': 'RuntimeError: upstream refused {REDACTED}'" in task["result"], task
        no_token("Flower's run task", repr(task))
        no_token("the worker log", worker.log_path.read_text() if worker.log_path else "")
    finally:
        worker.close()


def test_async_result_shows_only_redacted_text_for_a_custom_pattern_secret(
    producer: Celery, runtime: Runtime, start_worker: StartWorker
) -> None:
    worker = start_custom_worker(start_worker, "redactresult")
    job_id = failing_job(producer, runtime)
    failed_row(runtime, job_id, worker)
    result = producer.AsyncResult(job_id)
    assert result.state == "FAILURE"
    with pytest.raises(JobFailedError) as raised:
        result.get(timeout=30)
    assert str(raised.value).endswith(f"RuntimeError: upstream refused {REDACTED}")
    no_token("AsyncResult.get()", str(raised.value))
    no_token("AsyncResult.info", repr(result.info))
    no_token("AsyncResult.traceback", repr(result.traceback))
    assert result.traceback is not None and "in custom_token_chain" in result.traceback


@pytest.fixture
def refusing_ledger(pg_database: Database) -> Iterator[None]:
    """The schema refuses a failed row that names the upstream (a test-only CHECK)."""
    with pg_database.engine.begin() as conn:
        conn.execute(
            text(
                f"ALTER TABLE async_jobs ADD CONSTRAINT {CONSTRAINT} "
                "CHECK (error_message IS NULL OR error_message NOT LIKE '%upstream%')"
            )
        )
    try:
        yield
    finally:
        with pg_database.engine.begin() as conn:
            conn.execute(text(f"ALTER TABLE async_jobs DROP CONSTRAINT IF EXISTS {CONSTRAINT}"))


def test_a_finish_the_ledger_rejects_ends_the_job_with_the_constraint_never_the_sql(
    refusing_ledger: None,
    producer: Celery,
    runtime: Runtime,
    start_worker: StartWorker,
    start_flower: StartFlower,
) -> None:
    flower = start_flower()
    worker = start_custom_worker(start_worker, "rejected")
    job_id = failing_job(producer, runtime)
    row = failed_row(runtime, job_id, worker)
    reason = f"ledger rejected the finish: {CONSTRAINT}"
    assert row.error_message == reason  # the cause, not "heartbeat expired"

    task = flower_task(flower, job_id, "FAILURE")
    assert task["exception"] == f"PhaseJobFailed('{reason}')"
    shown = repr(task)
    assert SQL_TEXT.search(shown) is None, shown
    with pytest.raises(JobFailedError) as raised:
        producer.AsyncResult(job_id).get(timeout=30)
    assert str(raised.value).endswith(reason)

    log = logged_failure(worker)
    assert reason in log
    assert SQL_TEXT.search(log) is None, log[-3000:]
    no_token("the worker log", log)
