"""The plan pipeline's actions, shared by the CLI and the admin API (as cli/services.py's).

Run, approve, reject, cancel a whole plan and read its audit trail. Every write goes
through the runtime's doors (the lifecycle for run/approve/reject, the engine for the
cancel); a plan not waiting at its gate is Refused (exit 1, HTTP 409).
"""

from __future__ import annotations

import time
from typing import Any

from planq.cli.context import Planq
from planq.cli.output import Refused
from planq.cli.services import find_plan


def run_plan(
    session: Planq,
    plan_id: str,
    through: str,
    approve_before: str | None,
    actor: str,
    approval_timeout: float | None = None,
    *,
    approvals: int | None = None,
    note: str | None = None,
    notify: list[str] | None = None,
) -> tuple[Any, Any]:
    """(plan, first job as stored): the pipeline stored and its first phase queued.

    `actor` is the caller's identity (`api:NAME`, `cli:USER@HOST`); `note` is only text.
    """
    find_plan(session, plan_id)  # a bad or unknown id first, before the broker
    session.require_broker()
    lifecycle = session.runtime.lifecycle
    queued = lifecycle.run_plan(
        plan_id, through, approve_before, actor, approval_timeout, approvals, note, notify
    )
    session.runtime.publisher.stamps.flush()
    job = session.runtime.jobs.get(queued.job.job_id) if queued.job else None
    return queued.plan, job


def decide(
    session: Planq,
    plan_id: str,
    approve: bool,
    actor: str,
    note: str | None,
    *,
    allow_self: bool | None = None,
) -> tuple[Any, Any]:
    """(plan, the job approval queued or None); Refused if the plan is not waiting.

    allow_self (default: PLANQ_APPROVAL_SELF) lets a pipeline's runner approve its gate.
    """
    if allow_self is None:
        allow_self = bool(session.settings.approval_self)
    from planq.domain.errors import NotAwaitingApprovalError

    find_plan(session, plan_id)
    if approve:
        session.require_broker()
    lifecycle = session.runtime.lifecycle
    try:
        if approve:
            queued = lifecycle.approve_plan(plan_id, actor, note, allow_self=allow_self)
            session.runtime.publisher.stamps.flush()
            return queued.plan, queued.job
        return lifecycle.reject_plan(plan_id, actor, note), None
    except NotAwaitingApprovalError as exc:
        raise Refused(str(exc)) from None


def cancel_plan(session: Planq, plan_id: str, actor: str, note: str | None = None) -> Any:
    """The PlanCancel that landed: the pipeline stopped, its live jobs cancelled at once.

    A running phase is asked to stop; the answer waits for it (PLANQ_CANCEL_WAIT seconds)
    so that it says what happened: cancelled, or Refused (409) when the phase finished
    first (the request stays in the trail; the pipeline ends as its phase did), or still
    "cancel requested" after the wait. Refused at once when the pipeline had ended and
    nothing is live.
    """
    plan = find_plan(session, plan_id)
    landed = session.runtime.worker.cancel_plan(plan.plan_id, actor, note)
    return _settle(session, landed, float(session.settings.cancel_wait))


def _settle(session: Planq, landed: Any, wait: float) -> Any:
    """The cancel's answer once its running jobs ended (or the wait is over)."""
    from planq.domain.ledger import PlanCancel
    from planq.domain.ports import CancelOutcome

    asked = [j for j, o in landed.outcomes.items() if o is CancelOutcome.requested]
    deadline = time.monotonic() + wait
    ends: dict[str, Any] = {}
    while asked and len(ends) < len(asked):
        for job_id in asked:
            job = session.runtime.jobs.get(job_id)
            if job is None or job.is_terminal:
                ends[job_id] = job
        if len(ends) < len(asked) and time.monotonic() >= deadline:
            return landed  # still stopping: "cancel requested", follow its job
        if len(ends) < len(asked):
            time.sleep(0.05)
    for job_id, job in ends.items():
        if job is not None and job.status.value != "cancelled":
            at = job.finished_at.isoformat() if job.finished_at else "?"
            raise Refused(
                f"the cancel came too late: plan {landed.plan.plan_id}'s {job.phase.value} job "
                f"{job_id} ended {job.status.value} at {at} before it reached a safe point "
                "(the request is in the plan's events)"
            )
    if not asked:
        return landed
    outcomes = {**landed.outcomes, **dict.fromkeys(asked, CancelOutcome.cancelled)}
    return PlanCancel(session.runtime.plans.get(landed.plan.plan_id), outcomes)


def plan_events(session: Planq, plan_id: str) -> list[Any]:
    """The plan's audit trail, oldest first."""
    plan = find_plan(session, plan_id)
    return list(session.ledger.plans.list_events(plan.plan_id))
