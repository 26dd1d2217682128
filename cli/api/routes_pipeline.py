"""The plan pipeline over HTTP: run, approve, reject, cancel a plan, and its audit trail.

Included before the ledger's routes: `/plans/{id}/run` must not be read as a phase. Writes
need the write token when one is configured, and pass the same-origin guard every write
has (both are the ledger routes' dependencies); a plan not waiting at its gate is 409.
"""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Depends, Path
from pydantic import BaseModel, Field

from planq.cli import pipeline_services
from planq.cli.api.auth import require_read, require_write
from planq.cli.api.models import JobOut, PlanOut
from planq.cli.api.state import session
from planq.cli.context import Planq

router = APIRouter(prefix="/api/ledger", tags=["plan pipeline"])
Session = Annotated[Planq, Depends(session)]
PlanId = Annotated[str, Path(description="The plan's ULID.")]
READ = [Depends(require_read)]
WRITE = [Depends(require_write)]
API_ACTOR = "api"


class RunIn(BaseModel):
    """Where the pipeline stops, and the phase it waits for an approval before."""

    through: str = Field("apply", max_length=16)
    approve_before: str | None = Field(None, max_length=16)
    by: str | None = Field(None, max_length=200, description="Who, for the audit trail.")
    approval_timeout: float | None = Field(
        None, description="Seconds a decision may take at the gate; then the plan expires."
    )


class DecisionIn(BaseModel):
    """Who decides, and why."""

    by: str | None = Field(None, max_length=200)
    note: str | None = Field(None, max_length=2000)


class CancelIn(BaseModel):
    """Who cancels."""

    by: str | None = Field(None, max_length=200)


class PipelineOut(BaseModel):
    """The plan after the action, and the job it queued (if any)."""

    plan: PlanOut
    pipeline: dict[str, str | None] | None
    job: JobOut | None = None


class PlanCancelOut(BaseModel):
    """The plan after a whole-plan cancel, and the jobs the cancel reached."""

    plan: PlanOut
    pipeline: dict[str, str | None] | None
    cancelled_jobs: list[str]


class EventOut(BaseModel):
    """One line of a plan's audit trail."""

    event_id: str
    at: str
    kind: str
    phase: str | None
    job_id: str | None
    actor: str | None
    note: str | None


def _actor(by: str | None) -> str:
    return f"{API_ACTOR}:{by}" if by else API_ACTOR


def _out(plan: object, job: object | None) -> PipelineOut:
    return PipelineOut(
        plan=PlanOut.of(plan),
        pipeline=plan.pipeline_dict(),  # type: ignore[attr-defined]
        job=JobOut.of(job) if job is not None else None,
    )


@router.post(
    "/plans/{plan_id}/run",
    dependencies=WRITE,
    status_code=202,
    responses={404: {}, 409: {}, 422: {}, 503: {}},
)
def run_plan(planq: Session, plan_id: PlanId, body: RunIn | None = None) -> PipelineOut:
    """Store a pipeline on the plan and queue its next phase; the rest follow by themselves."""
    body = body or RunIn()
    plan, job = pipeline_services.run_plan(
        planq, plan_id, body.through, body.approve_before, _actor(body.by), body.approval_timeout
    )
    return _out(plan, job)


@router.post("/plans/{plan_id}/approve", dependencies=WRITE, responses={404: {}, 409: {}})
def approve_plan(planq: Session, plan_id: PlanId, body: DecisionIn | None = None) -> PipelineOut:
    """Let a plan waiting at its gate go on; 409 if it is not waiting (or was decided)."""
    body = body or DecisionIn()
    plan, job = pipeline_services.decide(planq, plan_id, True, _actor(body.by), body.note)
    return _out(plan, job)


@router.post("/plans/{plan_id}/reject", dependencies=WRITE, responses={404: {}, 409: {}})
def reject_plan(planq: Session, plan_id: PlanId, body: DecisionIn | None = None) -> PipelineOut:
    """Stop a plan waiting at its gate; 409 if it is not waiting (or was decided)."""
    body = body or DecisionIn()
    plan, _ = pipeline_services.decide(planq, plan_id, False, _actor(body.by), body.note)
    return _out(plan, None)


@router.post("/plans/{plan_id}/cancel", dependencies=WRITE, responses={404: {}})
def cancel_plan(planq: Session, plan_id: PlanId, body: CancelIn | None = None) -> PlanCancelOut:
    """Cancel the whole plan: its pipeline stops, its running phase is cancelled."""
    body = body or CancelIn()
    plan, cancelled = pipeline_services.cancel_plan(planq, plan_id, _actor(body.by))
    return PlanCancelOut(
        plan=PlanOut.of(plan), pipeline=plan.pipeline_dict(), cancelled_jobs=cancelled
    )


@router.get("/plans/{plan_id}/events", dependencies=READ, responses={404: {}})
def plan_events(planq: Session, plan_id: PlanId) -> list[EventOut]:
    """The plan's audit trail, oldest first."""
    return [
        EventOut.model_validate(e.as_cli_dict())
        for e in pipeline_services.plan_events(planq, plan_id)
    ]
