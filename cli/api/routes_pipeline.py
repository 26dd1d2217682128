"""The plan pipeline over HTTP: run, approve, reject, cancel a plan, and its audit trail.

Included before the ledger's routes: `/plans/{id}/run` must not be read as a phase. Each
route's role is in access.py; the actor every event records is the caller's principal
(`api:NAME`), never a name the body gives: a body's `by` is kept in the note. A plan not
waiting at its gate is 409, the runner approving its own gate 403 (four-eyes), a cancel
that came too late 409 with the last job's end.
"""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Depends, Path
from pydantic import BaseModel, Field

from planq.cli import services
from planq.cli.api.auth import auth_on, caller
from planq.cli.api.models import JobOut, PlanOut
from planq.cli.api.state import session
from planq.cli.context import Planq
from planq.domain.principals import Principal

router = APIRouter(prefix="/api/ledger", tags=["plan pipeline"])
Session = Annotated[Planq, Depends(session)]
Caller = Annotated[Principal, Depends(caller)]
PlanId = Annotated[str, Path(description="The plan's ULID.")]


class RunIn(BaseModel):
    """Where the pipeline stops, and the phase it waits for an approval before."""

    through: str = Field("apply", max_length=16)
    approve_before: str | None = Field(None, max_length=16)
    by: str | None = Field(
        None, max_length=200, description="A note for the audit trail (the actor is the caller)."
    )
    approval_timeout: float | None = Field(
        None, description="Seconds a decision may take at the gate; then the plan expires."
    )
    approvals: int | None = Field(
        None, ge=1, le=10, description="Distinct approvers the gate needs (default 1)."
    )
    notify: list[str] | None = Field(
        None,
        max_length=5,
        description="Webhook URLs told of the gate, a failure and the end (signed; needs "
        "PLANQ_WEBHOOK_SECRET on the server).",
    )


class DecisionIn(BaseModel):
    """Why (the actor is the caller; `by` is kept as part of the note)."""

    by: str | None = Field(None, max_length=200)
    note: str | None = Field(None, max_length=2000)


class CancelIn(BaseModel):
    """A note (the actor is the caller)."""

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
    #: "cancelled": nothing of the plan runs now; "cancel requested": a running phase was
    #: asked to stop and decides at its next safe point (follow its job).
    outcome: str
    cancelled_jobs: list[str]
    jobs: dict[str, str] = Field(default_factory=dict, description="Each live job's outcome.")


class EventOut(BaseModel):
    """One line of a plan's audit trail."""

    event_id: str
    at: str
    kind: str
    phase: str | None
    job_id: str | None
    actor: str | None
    note: str | None


def _note(by: str | None, note: str | None = None) -> str | None:
    """A body's `by` is only text: it joins the note, it never names the actor."""
    said = f"by: {by}" if by else None
    return "; ".join(t for t in (said, note) if t) or None


def _out(plan: object, job: object | None) -> PipelineOut:
    return PipelineOut(
        plan=PlanOut.of(plan),
        pipeline=plan.pipeline_dict(),  # type: ignore[attr-defined]
        job=JobOut.of(job) if job is not None else None,
    )


@router.post(
    "/plans/{plan_id}/run",
    status_code=202,
    responses={404: {}, 409: {}, 422: {}, 503: {}},
)
def run_plan(
    planq: Session, plan_id: PlanId, who: Caller, body: RunIn | None = None
) -> PipelineOut:
    """Store a pipeline on the plan and queue its next phase; the rest follow by themselves."""
    body = body or RunIn()
    plan, job = planq.service.plans.run(
        plan_id,
        body.through,
        body.approve_before,
        who.actor,
        body.approval_timeout,
        body.approvals,
        _note(body.by),
        body.notify,
        ready=planq.require_broker,
    )
    return _out(plan, job)


@router.post("/plans/{plan_id}/approve", responses={403: {}, 404: {}, 409: {}})
def approve_plan(
    planq: Session, plan_id: PlanId, who: Caller, body: DecisionIn | None = None
) -> PipelineOut:
    """Count the caller's approval; with enough, the next phase is queued.

    409 if it is not waiting (or was decided), or this principal already approved; 403 if
    it ran the pipeline (four-eyes; no-token mode has one principal, so the rule is off).
    """
    body = body or DecisionIn()
    allow_self = planq.settings.approval_self or not auth_on(planq.settings)
    plan, job = planq.service.plans.approve(
        plan_id,
        who.actor,
        _note(body.by, body.note),
        allow_self=allow_self,
        ready=planq.require_broker,
    )
    return _out(plan, job)


@router.post("/plans/{plan_id}/reject", responses={404: {}, 409: {}})
def reject_plan(
    planq: Session, plan_id: PlanId, who: Caller, body: DecisionIn | None = None
) -> PipelineOut:
    """Stop a plan waiting at its gate (one reject ends the wait); 409 if it is not waiting."""
    body = body or DecisionIn()
    plan = planq.service.plans.reject(plan_id, who.actor, _note(body.by, body.note))
    return _out(plan, None)


@router.post("/plans/{plan_id}/cancel", responses={403: {}, 404: {}, 409: {}})
def cancel_plan(
    planq: Session, plan_id: PlanId, who: Caller, body: CancelIn | None = None
) -> PlanCancelOut:
    """Cancel the whole plan: its pipeline stops, its live jobs are cancelled, at once.

    409 when it came too late (the pipeline ended and no job is live), with the last
    job's end; a landed cancel is recorded once, with the caller as its actor.
    """
    body = body or CancelIn()
    wait = float(planq.settings.cancel_wait)
    landed = planq.service.jobs.cancel_plan(plan_id, who.actor, _note(body.by), wait=wait)
    plan = landed.plan
    return PlanCancelOut(
        plan=PlanOut.of(plan),
        pipeline=plan.pipeline_dict(),
        outcome="cancelled" if landed.finished else "cancel requested",
        cancelled_jobs=list(landed.outcomes),
        jobs={job_id: o.value for job_id, o in landed.outcomes.items()},
    )


@router.get("/plans/{plan_id}/events", responses={404: {}})
def plan_events(planq: Session, plan_id: PlanId) -> list[EventOut]:
    """The plan's audit trail, oldest first."""
    return [EventOut.model_validate(e.as_cli_dict()) for e in services.plan_events(planq, plan_id)]
