"""A plan's operator actions: the lifecycle's own, answered with the rows as stored.

The CLI, the HTTP API and the dashboard show what a write did: the plan after it and its
job as the ledger keeps it, dispatch stamp included (so "dispatched" is true once the
broker took the message). The producer path (`delay()`) uses the lifecycle directly and
reads nothing back.
"""

from __future__ import annotations

from collections.abc import Sequence

from planq.domain.jobs import AsyncJob
from planq.domain.lifecycle import PhaseQueued, PlanLifecycleService, Steps
from planq.domain.pipeline import PlanEvent
from planq.domain.plans import Plan, PlanPhase
from planq.domain.ports import JobStore
from planq.tasks.job_service import Ready, Settle, ready_now

#: A write's answer: the plan after it, and the job it queued as stored (None: no job).
Queued = tuple[Plan, AsyncJob | None]


def parse_phase(phase: object) -> PlanPhase:
    """The PlanPhase named; ValueError naming the phases otherwise."""
    try:
        return PlanPhase(str(getattr(phase, "value", phase)))
    except ValueError:
        valid = ", ".join(p.value for p in PlanPhase)
        raise ValueError(f"unknown phase {phase!r} (one of: {valid})") from None


class PlanService:
    """Create, queue, run through a pipeline, approve, reject, read a plan's trail."""

    def __init__(
        self,
        lifecycle: PlanLifecycleService,
        jobs: JobStore,
        settle: Settle | None = None,
        allow_self: bool = False,
    ) -> None:
        self.lifecycle = lifecycle
        self.jobs = jobs
        self.settle = settle
        #: PLANQ_APPROVAL_SELF: a pipeline's runner may approve its own gate
        self.allow_self = allow_self

    def _stored(self, queued: PhaseQueued) -> Queued:
        """The plan, and its new job as the ledger keeps it (its dispatch stamp durable)."""
        if queued.job is None:
            return queued.plan, None
        if self.settle is not None:
            self.settle()
        return queued.plan, self.jobs.get(queued.job.job_id)

    def find(self, plan_id: object) -> Plan:
        """The plan; InvalidIdError for a malformed id, PlanNotFoundError for an unknown one."""
        return self.lifecycle.get_plan(plan_id)  # type: ignore[arg-type]  # checked there

    def with_jobs(self, plan_id: object) -> tuple[Plan, list[AsyncJob]]:
        """(plan, its jobs oldest first: the order its phases ran in)."""
        plan = self.find(plan_id)
        return plan, self.jobs.list_by_plan(plan.plan_id)

    def create(self, steps: Steps, name: str = "") -> Plan:
        """Store a new plan (state New); nothing is queued. Bounds are the domain's."""
        return self.lifecycle.create_plan(steps, name=name)

    def create_many(self, steps: Sequence[Steps], names: Sequence[str] | None = None) -> list[Plan]:
        """Store many new plans in one statement, all or nothing."""
        return self.lifecycle.create_plans(steps, names)

    def queue(
        self, plan_ids: Sequence[str], phase: object, *, ready: Ready = ready_now
    ) -> list[Queued]:
        """Queue a phase of each plan: one transaction, then the messages; rows as stored.

        Every plan is checked first (InvalidIdError, PlanNotFoundError), then `ready` (the
        caller's broker check), then the rows are written.
        """
        wanted = parse_phase(phase)
        for plan_id in plan_ids:
            self.find(plan_id)
        ready()
        queued = self.lifecycle.queue_phases(plan_ids, wanted)
        if any(q.job is not None for q in queued) and self.settle is not None:
            self.settle()
        return [(q.plan, self.jobs.get(q.job.job_id) if q.job else None) for q in queued]

    def run(
        self,
        plan_id: str,
        through: object,
        approve_before: object,
        actor: str,
        approval_timeout: float | None = None,
        approvals: int | None = None,
        note: str | None = None,
        notify: list[str] | None = None,
        *,
        ready: Ready = ready_now,
    ) -> Queued:
        """The pipeline stored and its first phase queued (`actor`: who runs it)."""
        self.find(plan_id)
        ready()
        queued = self.lifecycle.run_plan(
            plan_id, through, approve_before, actor, approval_timeout, approvals, note, notify
        )
        return self._stored(queued)

    def approve(
        self,
        plan_id: str,
        actor: str,
        note: str | None = None,
        *,
        allow_self: bool | None = None,
        ready: Ready = ready_now,
    ) -> Queued:
        """Count an approval; the job it queued (None until the gate has enough).

        allow_self (default: PLANQ_APPROVAL_SELF) lets the pipeline's runner approve.
        """
        self.find(plan_id)
        ready()
        own = self.allow_self if allow_self is None else allow_self
        return self._stored(self.lifecycle.approve_plan(plan_id, actor, note, allow_self=own))

    def reject(self, plan_id: str, actor: str, note: str | None = None) -> Plan:
        """Stop a plan waiting at its gate."""
        return self.lifecycle.reject_plan(plan_id, actor, note)

    def events(self, plan_id: object) -> list[PlanEvent]:
        """The plan's audit trail, oldest first."""
        return self.lifecycle.plan_events(self.find(plan_id).plan_id)
