"""The plan pipeline's actions, shared by the CLI and the admin API (as cli/services.py's).

Run, approve, reject, cancel a whole plan and read its audit trail. Every write goes
through the runtime's doors (the lifecycle for run/approve/reject, the engine for the
cancel); a plan not waiting at its gate is Refused (exit 1, HTTP 409).
"""

from __future__ import annotations

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
) -> tuple[Any, Any]:
    """(plan, first job as stored): the pipeline stored and its first phase queued.

    `actor` is the caller's identity (`api:NAME`, `cli:USER@HOST`); `note` is only text.
    """
    find_plan(session, plan_id)  # a bad or unknown id first, before the broker
    session.require_broker()
    lifecycle = session.runtime.lifecycle
    queued = lifecycle.run_plan(
        plan_id, through, approve_before, actor, approval_timeout, approvals, note
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

    Refused (409) when it came too late: the pipeline ended and nothing is live.
    """
    plan = find_plan(session, plan_id)
    return session.runtime.worker.cancel_plan(plan.plan_id, actor, note)


def plan_events(session: Planq, plan_id: str) -> list[Any]:
    """The plan's audit trail, oldest first."""
    plan = find_plan(session, plan_id)
    return list(session.ledger.plans.list_events(plan.plan_id))
