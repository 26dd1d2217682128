"""From Python: create a plan, queue its phases, wait for and read its jobs.

Thin functions over what planq already has (the phase tasks, the lifecycle service, the
ledger result backend), so a producer needs no Celery or ledger plumbing of its own::

    from planq.worker_config import client

    plan = client.create_plan(["survey", "score"], name="nightly")
    result = client.queue_phase(plan.plan_id, "strategize")  # an AsyncResult; id = job id
    info = client.wait_for_job(result.id, timeout=60)  # the finished job's ledger view
    job = client.get_job(result.id)  # the AsyncJob row itself

Every function takes an optional `app` (default: `worker_config.app`, configured from the
`PLANQ_*` environment). Waiting blocks the caller: call it from a producer, never from a
task body (Celery refuses `AsyncResult.get()` inside a task).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from celery import Celery
from celery.result import AsyncResult

from planq.domain.errors import ConfigurationError, JobNotFoundError
from planq.domain.ids import require_ulid
from planq.domain.jobs import AsyncJob
from planq.domain.plans import Plan, PlanPhase
from planq.tasks.result_backend import read_job
from planq.tasks.runtime import runtime_for


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


def create_plan(
    steps: list[str] | list[dict[str, object]], name: str = "", *, app: Celery | None = None
) -> Plan:
    """Store a new plan (state New) with these steps; strategize is its first phase."""
    return runtime_for(_app(app)).lifecycle.create_plan(steps, name=name)


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


__all__ = ["create_plan", "get_job", "queue_phase", "queue_phases", "wait_for_job"]
