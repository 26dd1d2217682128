"""The spec's admin routes of recoverable runs: jobs, trigger, cancel, runs, findings, purge."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Body, Depends, Path, Query

from planq.cli import services
from planq.cli.api.errors import Conflict
from planq.cli.api.models import (
    CancelRunOut,
    FindingOut,
    FindingsPage,
    PurgeOut,
    RecoverableJobOut,
    RunOutcomeOut,
    RunSummaryOut,
    TriggerAccepted,
    TriggerIn,
    TriggerSkipped,
    severity_counts,
)
from planq.cli.api.state import session
from planq.cli.context import Planq

#: The API clamps page sizes too (the spec: "the API layer clamps it too").
MAX_RUNS = 100
MAX_FINDINGS = 500
#: Seconds a trigger waits for the worker to open the run it handed over.
TRIGGER_WAIT = 5.0

router = APIRouter(prefix="/api/admin/jobs", tags=["recoverable runs"])
Session = Annotated[Planq, Depends(session)]
Name = Annotated[str, Path(min_length=1, max_length=200, description="The job's stable name.")]
RunId = Annotated[str, Path(description="The run's ULID.")]


def recoverable_job(planq: Planq, name: str) -> RecoverableJobOut:
    """A registered job with its active run and the outcome of its newest ended/paused run."""
    from planq.tasks.run_service import task_name

    schedule = planq.app.conf.beat_schedule or {}
    entry = next((e for e in schedule.values() if e.get("task") == task_name(name)), None)
    interval = entry.get("schedule") if entry else None
    runs = planq.runs.list_runs(name, limit=5)
    active = next((r for r in runs if r.status.is_active), None)
    last = next((r for r in runs if not r.status.is_active), None)
    outcome = None
    if last is not None:
        outcome = RunOutcomeOut.of(last, planq.runs.finding_severity_counts(last.id))
    return RecoverableJobOut(
        name=name,
        task=task_name(name),
        interval_seconds=float(interval) if isinstance(interval, int | float) else None,
        active_run=RunSummaryOut.of(active) if active else None,
        last_outcome=outcome,
    )


@router.get("", response_model_exclude_none=True)
def list_recoverable_jobs(planq: Session) -> list[RecoverableJobOut]:
    """Every registered recoverable job, with the badge of its last outcome."""
    from planq.tasks.run_service import registered_jobs

    return [recoverable_job(planq, name) for name in sorted(registered_jobs(planq.app))]


@router.post(
    "/{name}/trigger",
    status_code=202,
    response_model_exclude_none=True,
    responses={409: {"model": TriggerSkipped}, 404: {}, 422: {}, 503: {}},
)
def trigger(
    planq: Session,
    name: Name,
    body: Annotated[TriggerIn | None, Body()] = None,
    force: Annotated[bool, Query(description="Passed to the handler as args.force.")] = False,
) -> TriggerAccepted:
    """Start a run (or resume the Paused one) and hand it to a worker.

    409 while one is active, or while a trigger is queued and no worker took it yet.
    """
    args = dict(body.args) if body else {}
    if force:
        args["force"] = "true"
    result = planq.service.runs.trigger(name, args, wait=TRIGGER_WAIT, ready=planq.require_broker)
    run = result.run
    if result.decision == "already_running":
        raise Conflict(
            TriggerSkipped(
                job_name=name,
                run_id=run.id,
                status=run.status.as_str(),
                message=f"skipped: run {run.id} is {run.status.as_str()}",
            ).model_dump(exclude_none=True)
        )
    if result.decision == "already_queued":
        raise Conflict(
            TriggerSkipped(
                job_name=name,
                skipped="already_queued",
                task_id=result.task_id,
                message=f"skipped: trigger {result.task_id} is queued, not yet taken by a worker",
            ).model_dump(exclude_none=True)
        )
    return TriggerAccepted(
        job_name=name,
        decision="resumed" if result.decision == "resumed" else "fresh",
        task_id=result.task_id,
        run_id=run.id if run else None,
        status=run.status.as_str() if run else None,
        run=RunSummaryOut.of(run) if run else None,
    )


@router.post("/{name}/cancel", responses={409: {}, 404: {}})
def cancel(planq: Session, name: Name) -> CancelRunOut:
    """Ask the Running run to stop at its next batch (it ends Paused, cursor kept)."""
    return CancelRunOut(job_name=name, run_id=planq.service.runs.cancel(name))


@router.get("/{name}/runs", response_model_exclude_none=True)
def list_runs(
    planq: Session,
    name: Name,
    limit: Annotated[int, Query(ge=1, description=f"Clamped to {MAX_RUNS}.")] = 20,
) -> list[RunSummaryOut]:
    """The job's runs, newest first, terminal and active alike."""
    planq.service.runs.handler(name)  # 404 for a name no handler has
    runs = planq.runs.list_runs(name, limit=min(limit, MAX_RUNS))
    return [RunSummaryOut.of(r) for r in runs]


@router.get("/{name}/runs/{run_id}", response_model_exclude_none=True)
def get_run(planq: Session, name: Name, run_id: RunId) -> RunSummaryOut:
    """One run of the job (404 if unknown, purged, or another job's)."""
    return RunSummaryOut.of(services.find_run(planq, run_id, job_name=name))


@router.get("/{name}/runs/{run_id}/findings", response_model_exclude_none=True)
def findings(
    planq: Session,
    name: Name,
    run_id: RunId,
    limit: Annotated[int, Query(ge=1, description=f"Clamped to {MAX_FINDINGS}.")] = 100,
    offset: Annotated[int, Query(ge=0)] = 0,
    after: Annotated[
        str | None, Query(description="A finding id: the findings recorded after it.")
    ] = None,
) -> FindingsPage:
    """The run's findings in the order recorded, one page (`after=` the last id: the next)."""
    size = min(limit, MAX_FINDINGS)
    run, page, found = services.finding_page(planq, run_id, size, offset, after, job_name=name)
    counts = severity_counts(found)
    return FindingsPage(
        run_id=run.id,
        job_name=name,
        severity_counts=counts,
        total=page.total,
        limit=size,
        offset=offset,
        next_after=page.next_after,
        findings=[FindingOut.of(f) for f in page.rows],
    )


@router.post("/runs/purge")
def purge(
    planq: Session,
    retention_days: Annotated[
        float,
        Query(
            le=36_500,
            allow_inf_nan=False,
            description="Ended runs older than max(1, days) go, with their findings.",
        ),
    ] = 30,
) -> PurgeOut:
    """Delete Completed/Failed runs ended over max(1, days) ago; active runs are never touched."""
    purged, days = planq.service.runs.purge(retention_days)
    return PurgeOut(purged=purged, retention_days=days)
