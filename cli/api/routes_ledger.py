"""The job ledger over HTTP: plans (list, show, create, queue a phase) and their phase jobs."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Depends, Path, Query

from planq.cli import services
from planq.cli.api.auth import caller
from planq.cli.api.models import (
    CancelJobOut,
    CleanupOut,
    JobDetail,
    JobOut,
    JobsPage,
    PlanDetail,
    PlanIn,
    PlanOut,
    PlansPage,
    QueuedOut,
    RetryOut,
    StuckOut,
)
from planq.cli.api.state import session
from planq.cli.context import Planq
from planq.domain.jobs import AsyncJobStatus
from planq.domain.plans import PlanPhase
from planq.domain.principals import Principal

MAX_PAGE = 500

router = APIRouter(prefix="/api/ledger", tags=["job ledger"])
Session = Annotated[Planq, Depends(session)]
Caller = Annotated[Principal, Depends(caller)]
PlanId = Annotated[str, Path(description="The plan's ULID.")]
JobId = Annotated[str, Path(description="The job's ULID.")]
Limit = Annotated[int, Query(ge=1, description=f"Clamped to {MAX_PAGE}.")]
Offset = Annotated[int, Query(ge=0)]


def plan_detail(planq: Planq, plan_id: str) -> PlanDetail:
    """The plan, its jobs (oldest first) and the latest job of each phase."""
    plan, rows = services.plan_jobs(planq, plan_id)
    jobs = [JobOut.of(j) for j in rows]
    phases: dict[str, JobOut | None] = {p.value: None for p in PlanPhase}
    for job in jobs:  # oldest first: the last one seen per phase is its latest
        phases[job.phase] = job
    return PlanDetail(
        **PlanOut.of(plan).model_dump(), step_list=plan.steps, jobs=jobs, phases=phases
    )


@router.get("/plans")
def list_plans(
    planq: Session,
    limit: Limit = 50,
    offset: Offset = 0,
    after: Annotated[
        str | None, Query(description="A plan id: the page after it (next_after of a page).")
    ] = None,
) -> PlansPage:
    """Plans, newest first, paged by `after`, with a bounded total.

    The total is counted to 10,000 at most (`total_is_lower_bound` beyond).
    """
    page = services.plan_page(planq, min(limit, MAX_PAGE), offset, after)
    return PlansPage(
        plans=[PlanOut.of(p) for p in page.rows],
        limit=page.limit,
        offset=offset,
        total=page.total,
        total_is_lower_bound=page.lower_bound,
        next_after=page.next_after,
    )


@router.post("/plans", status_code=201)
def create_plan(planq: Session, body: PlanIn) -> PlanOut:
    """Store a new plan (state New); nothing is queued yet."""
    return PlanOut.of(planq.service.plans.create(body.step_dicts(), name=body.name))


@router.get("/plans/{plan_id}")
def show_plan(planq: Session, plan_id: PlanId) -> PlanDetail:
    """One plan, with its phase jobs, their progress and checkpoints."""
    return plan_detail(planq, plan_id)


@router.post(
    "/plans/{plan_id}/{phase}",
    status_code=202,
    responses={404: {}, 409: {}, 422: {}, 503: {}},
)
def queue_phase(planq: Session, plan_id: PlanId, phase: PlanPhase) -> QueuedOut:
    """Queue the phase as a job: plan and row in one statement, then the message.

    409 if the plan is not ready (execute needs Strategize/COMPLETE, apply Execute/COMPLETE).
    """
    [(plan, job)] = planq.service.plans.queue([plan_id], phase, ready=planq.require_broker)
    return QueuedOut(plan=PlanOut.of(plan), job=JobOut.of(job) if job else None)


@router.get("/jobs")
def list_jobs(
    planq: Session,
    status: Annotated[AsyncJobStatus | None, Query()] = None,
    plan_id: Annotated[str | None, Query()] = None,
    limit: Limit = 50,
    offset: Offset = 0,
    after: Annotated[
        str | None, Query(description="A job id: the page after it (next_after of a page).")
    ] = None,
) -> JobsPage:
    """Phase jobs, newest first, filtered by status and/or plan, paged by `after`.

    The total is counted to 10,000 at most (`total_is_lower_bound` beyond). A row whose
    payload does not load is listed with `unreadable` naming why.
    """
    wanted = status.value if status else None
    page = services.job_page(planq, wanted, plan_id, min(limit, MAX_PAGE), offset, after)
    return JobsPage(
        jobs=[JobOut.of(j) for j in page.rows],
        limit=page.limit,
        offset=offset,
        status=wanted,
        plan_id=plan_id.upper() if plan_id else None,
        total=page.total,
        total_is_lower_bound=page.lower_bound,
        next_after=page.next_after,
    )


@router.get("/jobs/{job_id}")
def show_job(planq: Session, job_id: JobId) -> JobDetail:
    """One job: progress, heartbeat, dispatch and cancel facts, its checkpoint, its traceback."""
    return JobDetail.of(services.find_job(planq, job_id))


@router.post("/jobs/{job_id}/cancel", responses={404: {}, 409: {}})
def cancel_job(planq: Session, job_id: JobId, who: Caller) -> CancelJobOut:
    """A queued job ends now; a running one stops at its next safe point; 409 if ended."""
    job = planq.service.jobs.cancel(job_id, who.actor)
    outcome = "cancelled" if job.status is AsyncJobStatus.cancelled else "cancel requested"
    return CancelJobOut(outcome=outcome, job=JobOut.of(job))


@router.post("/jobs/{job_id}/retry", status_code=202, responses={404: {}, 409: {}})
def retry_job(planq: Session, job_id: JobId) -> RetryOut:
    """Queue a new attempt of a failed or cancelled job (from its checkpoint); 409 otherwise."""
    job, published = planq.service.jobs.retry(job_id, ready=planq.require_broker)
    return RetryOut(job=JobOut.of(job), published=published)


@router.post("/stuck")
def detect_stuck(planq: Session) -> StuckOut:
    """Stuck detection now: running jobs whose heartbeat expired become failed."""
    report = planq.service.jobs.detect_stuck()
    return StuckOut(
        job_timeout_seconds=planq.settings.job_timeout,
        expired=[JobOut.of(j) for j in report],  # the rows as the sweep failed them
        retried=dict(report.retried),
    )


@router.post("/cleanup")
def cleanup(planq: Session) -> CleanupOut:
    """Delete ended jobs older than PLANQ_JOB_TTL now (what beat does periodically)."""
    deleted = planq.service.jobs.cleanup()
    return CleanupOut(deleted=deleted, job_ttl_seconds=planq.settings.job_ttl)
