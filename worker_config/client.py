"""From Python: create a plan, queue its phases, wait for, read, cancel and retry its jobs.

Thin functions over what planq already has (the phase tasks, the lifecycle service, the
ledger result backend), so a producer needs no Celery or ledger plumbing of its own::

    from planq.worker_config import client

    plan = client.create_plan(["survey", "score"], name="nightly")
    batch = client.create_plans([["scan"]] * 1000)  # many plans, one statement
    client.queue_phases([p.plan_id for p in batch], "strategize")  # one statement, one pipeline
    result = client.queue_phase(plan.plan_id, "strategize")  # an AsyncResult; id = job id
    info = client.wait_for_job(result.id, timeout=60)  # the finished job's ledger view
    job = client.get_job(result.id)  # the AsyncJob row itself
    client.get_plan(plan.plan_id).label  # e.g. 'Strategize/COMPLETE'
    client.list_jobs(status="failed", limit=20)  # newest first, as `planq jobs list`
    client.cancel_job(job_id)  # the row after: cancelled, or asked to stop
    again = client.retry_job(job_id)  # a failed/cancelled job's next attempt (AsyncResult)

Every function takes an optional `app` (default: `worker_config.app`, configured from the
`PLANQ_*` environment). Each is a thin door onto the process's service object
(`tasks/service.py`), which the CLI and the API call too, never a second implementation.
Waiting blocks the caller: call it from a producer, never from a
task body (Celery refuses `AsyncResult.get()` inside a task).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from celery import Celery
from celery.result import AsyncResult

from planq.domain.errors import (
    ConfigurationError,
    JobNotFoundError,
)
from planq.domain.ids import require_ulid
from planq.domain.jobs import AsyncJob, AsyncJobStatus
from planq.domain.lifecycle import Steps
from planq.domain.plans import Plan, PlanPhase
from planq.tasks.result_backend import read_job
from planq.tasks.runtime import runtime_for, service_for


def _app(app: Celery | None) -> Celery:
    """The given app, or planq's default one (imported only when first needed)."""
    if app is not None:
        return app
    from planq import worker_config

    build = getattr(worker_config, "get_app", None)  # the package may build its app lazily
    default: Celery = build() if build is not None else worker_config.app
    return default


def _phase_task(app: Celery, phase: PlanPhase | str) -> Any:
    return app.tasks[f"planq.{PlanPhase(phase).value}_plan"]


def create_plan(steps: Steps, name: str = "", *, app: Celery | None = None) -> Plan:
    """Store a new plan (state New) with these steps; strategize is its first phase."""
    return service_for(_app(app)).plans.create(steps, name=name)


def create_plans(
    steps: Sequence[Steps], names: Sequence[str] | None = None, *, app: Celery | None = None
) -> list[Plan]:
    """Store many new plans in ONE statement, all or nothing: `steps[i]` (`names[i]`) each.

    Bad input raises its typed error with nothing stored: BatchError for the batch itself
    (not a list, empty, too long, names of another length), BoundsError for a plan's steps
    or name. Queue them next with `queue_phases` (also one statement, then one pipeline).
    """
    return service_for(_app(app)).plans.create_many(steps, names)


def queue_phase(plan_id: str, phase: PlanPhase | str, *, app: Celery | None = None) -> AsyncResult:
    """Queue one phase of one plan: `<phase>_plan.delay(plan_id)`, row first, then message.

    Returns the job's AsyncResult (its id is the job id). Bad input raises its typed error
    with nothing written: InvalidIdError, PlanNotFoundError, InvalidPlanTransitionError.
    """
    result: AsyncResult | None = _phase_task(_app(app), phase).delay(plan_id)
    if result is None:  # a runtime built with jobs disabled moves the plan and makes no job
        raise ConfigurationError("jobs are disabled in this runtime: the plan moved, no job")
    return result


def queue_phases(
    plan_ids: Sequence[str], phase: PlanPhase | str, *, app: Celery | None = None
) -> list[AsyncResult]:
    """Queue one phase for many plans in ONE transaction (`delay_many`), all or nothing."""
    task = _phase_task(_app(app), phase)
    return [task.AsyncResult(job_id) for job_id in task.delay_many(plan_ids)]


def wait_for_job(
    job_id: str, timeout: float | None = None, interval: float = 0.5, *, app: Celery | None = None
) -> dict[str, Any]:
    """Block until the job ends (`AsyncResult.get`); its ledger view if it succeeded.

    Raises JobFailedError (with the redacted error) or JobCancelledError when it ended
    otherwise, and celery.exceptions.TimeoutError when `timeout` seconds pass first.
    The ledger is polled from every 50 ms up to every `interval` seconds.
    """
    result = _app(app).AsyncResult(require_ulid("job_id", job_id))
    info: dict[str, Any] = result.get(timeout=timeout, interval=interval)
    return info


def get_job(job_id: str, *, app: Celery | None = None) -> AsyncJob:
    """The job's ledger row now (status, progress, checkpoint, error, timestamps)."""
    job = read_job(_app(app), require_ulid("job_id", job_id))
    if job is None:
        raise JobNotFoundError(job_id)
    return job


def get_plan(plan_id: str, *, app: Celery | None = None) -> Plan:
    """The plan now (its phase and status: `.label`, e.g. 'Execute/RUNNING'; its steps).

    Raises InvalidIdError for an id that is not a ULID, PlanNotFoundError for an unknown one.
    """
    return service_for(_app(app)).plans.find(plan_id)


def list_jobs(
    *,
    status: AsyncJobStatus | str | None = None,
    plan_id: str | None = None,
    limit: int = 50,
    offset: int = 0,
    app: Celery | None = None,
) -> list[AsyncJob]:
    """One page of job rows, newest first (as `planq jobs list`), by status and/or plan.

    `limit` and `offset` are checked by the store (BoundsError past `MAX_LIST_LIMIT` or
    below 0); a status that is not a job status is a ValueError.
    """
    wanted = AsyncJobStatus(status) if status is not None else None
    plan = require_ulid("plan_id", plan_id) if plan_id is not None else None
    jobs = runtime_for(_app(app)).jobs
    return jobs.list_recent(wanted, plan, limit=limit, offset=offset)


def cancel_job(job_id: str, *, app: Celery | None = None) -> AsyncJob:
    """Cancel a job, as `planq jobs cancel` does; the row after the cancel.

    A queued job ends `cancelled` at once. A running one is asked to stop: the row keeps
    `running` with `cancel_requested_at` set until its executor reaches a safe point and it
    ends `cancelled` (follow it with `wait_for_job`, which then raises JobCancelledError).
    Raises JobNotFoundError for an unknown id and InvalidJobTransitionError for a job that
    had already ended (nothing written).
    """
    return service_for(_app(app)).jobs.cancel(require_ulid("job_id", job_id))


def retry_job(job_id: str, *, app: Celery | None = None) -> AsyncResult:
    """Queue the next attempt of a failed or cancelled job, as `planq jobs retry` does.

    A NEW row (attempt + 1, `retry_of` = job_id, the checkpoint carried), then its message;
    returns its AsyncResult (id = the new job id). Raises JobNotFoundError for an unknown
    id, InvalidJobTransitionError unless the job failed or was cancelled,
    PlanNotFoundError (PlanGoneError) when its plan is gone, and InvalidPlanTransitionError
    when it was retried already or its plan has moved on (nothing written in each case).
    An unpublished retry is the dispatch relay's to send.
    """
    application = _app(app)
    retried = service_for(application).jobs.retry(job_id)
    result: AsyncResult = application.AsyncResult(retried.job.job_id)
    return result


__all__ = [
    "cancel_job",
    "create_plan",
    "create_plans",
    "get_job",
    "get_plan",
    "list_jobs",
    "queue_phase",
    "queue_phases",
    "retry_job",
    "wait_for_job",
]
