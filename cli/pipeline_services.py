"""The plan pipeline's actions, shared by the CLI and the admin API (as cli/services.py's).

Run, approve, reject, cancel a whole plan and read its audit trail. Every write goes
through the runtime's doors (the lifecycle for run/approve/reject, the engine for the
cancel); a plan not waiting at its gate is Refused (exit 1, HTTP 409).
"""

from __future__ import annotations

import getpass
from typing import Any

from planq.cli.context import Planq
from planq.cli.output import Refused
from planq.cli.services import find_plan


def cli_user() -> str:
    """Who runs this command, for the audit trail when no --by is given."""
    try:
        return f"cli:{getpass.getuser()}"
    except (KeyError, OSError):  # no user name in a bare container
        return "cli"


def run_plan(
    session: Planq,
    plan_id: str,
    through: str,
    approve_before: str | None,
    actor: str,
    approval_timeout: float | None = None,
) -> tuple[Any, Any]:
    """(plan, first job as stored): the pipeline stored and its first phase queued."""
    find_plan(session, plan_id)  # a bad or unknown id first, before the broker
    session.require_broker()
    lifecycle = session.runtime.lifecycle
    queued = lifecycle.run_plan(plan_id, through, approve_before, actor, approval_timeout)
    session.runtime.publisher.stamps.flush()
    job = session.runtime.jobs.get(queued.job.job_id) if queued.job else None
    return queued.plan, job


def decide(
    session: Planq, plan_id: str, approve: bool, actor: str, note: str | None
) -> tuple[Any, Any]:
    """(plan, the job approval queued or None); Refused if the plan is not waiting."""
    from planq.domain.errors import NotAwaitingApprovalError

    find_plan(session, plan_id)
    if approve:
        session.require_broker()
    lifecycle = session.runtime.lifecycle
    try:
        if approve:
            queued = lifecycle.approve_plan(plan_id, actor, note)
            session.runtime.publisher.stamps.flush()
            return queued.plan, queued.job
        return lifecycle.reject_plan(plan_id, actor, note), None
    except NotAwaitingApprovalError as exc:
        raise Refused(str(exc)) from None


def cancel_plan(session: Planq, plan_id: str, actor: str) -> tuple[Any, list[str]]:
    """(plan, ids of the jobs the cancel reached): the pipeline stops, its phase is cancelled."""
    plan = find_plan(session, plan_id)
    stopped, cancelled = session.runtime.worker.cancel_plan(plan.plan_id, actor)
    return stopped, list(cancelled)


def plan_events(session: Planq, plan_id: str) -> list[Any]:
    """The plan's audit trail, oldest first."""
    plan = find_plan(session, plan_id)
    return list(session.ledger.plans.list_events(plan.plan_id))
