"""The plan lifecycle: queue a phase and its job (one statement on one ledger), then hand off."""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from planq.domain.bounds import MAX_BATCH
from planq.domain.config import AsyncWorkerConfig
from planq.domain.errors import (
    BatchError,
    ConcurrentUpdateError,
    ConfigurationError,
    PlanNotFoundError,
)
from planq.domain.ids import require_ulid
from planq.domain.jobs import AsyncJob
from planq.domain.ledger import JobLedger
from planq.domain.pipeline import PlanEvent
from planq.domain.plans import Plan, PlanPhase
from planq.domain.ports import JobStore, PlanStore, one_ledger
from planq.domain.redaction import BUILTIN, Redactor

logger = logging.getLogger("planq.lifecycle")

#: One plan's steps: step names, or step objects ({"name": ..., "seconds": ...}).
Steps = list[str] | list[dict[str, object]]

#: Called after commit with the new jobs; publishes their messages (Celery wiring) and may
#: raise: the rows are already durable, and the dispatch relay re-publishes them.
Enqueue = Callable[[Sequence[AsyncJob]], None]


@dataclass(frozen=True)
class PhaseQueued:
    """The result of queueing a phase: the plan as saved and its job (None when sync)."""

    plan: Plan
    job: AsyncJob | None


class PlanLifecycleService:
    """Moves plans through strategize -> execute -> apply, creating one job per phase."""

    def __init__(
        self,
        plans: PlanStore,
        jobs: JobStore | None = None,
        config: AsyncWorkerConfig | None = None,
        enqueue: Enqueue | None = None,
        redactor: Redactor = BUILTIN,
        ledger: JobLedger | None = None,
    ) -> None:
        self.plans = plans
        self.jobs = jobs
        self.config = config or AsyncWorkerConfig()
        #: The door every job write goes through, the queue included (domain/ledger.py):
        #: the runtime's own (one per process), or one over these stores (the spec's form).
        #: It publishes what it committed (`LedgerParts.publish_committed`), with `enqueue`.
        if ledger is None and jobs is not None:
            ledger = JobLedger(jobs, plans, redactor, enqueue=enqueue)
        elif ledger is not None and enqueue is not None:
            ledger.enqueue = enqueue
        self.ledger = ledger

    def create_plan(self, steps: Steps, name: str = "") -> Plan:
        """Store a new plan with these steps.

        Steps that are not a list of valid steps, or a name that does not fit, raise
        BoundsError (domain/bounds.py) and nothing is stored.
        """
        plan = Plan.with_steps(steps, name=name)
        self.plans.add(plan)
        return plan

    def create_plans(
        self, steps: Sequence[Steps], names: Sequence[str] | None = None
    ) -> list[Plan]:
        """Store many new plans at once (one statement on SQL), all or nothing.

        `steps[i]` (and `names[i]`, default "") make plan i, as create_plan would. A batch
        that is not a list, is empty, holds more than MAX_BATCH plans or has names of
        another length raises BatchError; bad steps or a bad name raise BoundsError. In
        each case nothing is stored.
        """
        if isinstance(steps, str) or not isinstance(steps, Sequence):
            raise BatchError("steps must be a list with one list of steps per plan")
        if not steps:
            raise BatchError("steps is empty: no plan to create")
        if len(steps) > MAX_BATCH:
            raise BatchError(f"steps: at most {MAX_BATCH} plans per call, got {len(steps)}")
        if names is None:
            names = [""] * len(steps)
        elif isinstance(names, str) or not isinstance(names, Sequence):
            raise BatchError("names must be a list with one name per plan")
        if len(names) != len(steps):
            raise BatchError(f"{len(names)} names for {len(steps)} plans: one name per plan")
        plans = [Plan.with_steps(s, name=n) for s, n in zip(steps, names, strict=True)]
        self.plans.add_many(plans)
        return plans

    def get_plan(self, plan_id: str) -> Plan:
        """The plan, or PlanNotFoundError (a bad id is an InvalidIdError)."""
        plan = self.plans.get(require_ulid("plan_id", plan_id))
        if plan is None:
            raise PlanNotFoundError(plan_id)
        return plan

    def strategize_plan(self, plan_id: str) -> PhaseQueued:
        """Queue the strategize phase."""
        return self.queue_phase(plan_id, PlanPhase.strategize)

    def execute_plan(self, plan_id: str) -> PhaseQueued:
        """Queue the execute phase (needs Strategize/COMPLETE)."""
        return self.queue_phase(plan_id, PlanPhase.execute)

    def apply_plan(self, plan_id: str) -> PhaseQueued:
        """Queue the apply phase (needs Execute/COMPLETE)."""
        return self.queue_phase(plan_id, PlanPhase.apply)

    def queue_phase(self, plan_id: str, phase: PlanPhase) -> PhaseQueued:
        """Move the plan to <phase>/QUEUED and insert its job, then enqueue.

        One statement when the stores are one ledger (`domain.ports.one_ledger`); plan
        then job through each store when they are two. Row first, message second: a message
        never exists without its row.
        """
        return self.queue_phases([plan_id], phase)[0]

    def queue_phases(self, plan_ids: Sequence[str], phase: PlanPhase) -> list[PhaseQueued]:
        """queue_phase for many plans: all or nothing, then one enqueue for every job.

        Bad input (an invalid id, a missing plan, a plan not ready for the phase, a plan
        named twice) raises its typed error with nothing written and nothing enqueued.
        """
        if isinstance(plan_ids, str) or not isinstance(plan_ids, Sequence):
            raise BatchError("plan_ids must be a list of plan ids")
        if len(plan_ids) > MAX_BATCH:
            raise BatchError(f"plan_ids: at most {MAX_BATCH} plans per call, got {len(plan_ids)}")
        ids = [require_ulid("plan_id", plan_id) for plan_id in plan_ids]
        if not ids:
            raise BatchError("plan_ids is empty: nothing to queue")
        if len(set(ids)) != len(ids):
            raise BatchError("a plan id appears twice: a phase is queued once per plan")
        if not (self.config.enabled and self.ledger is not None):
            return [self._queue_without_job(plan_id, phase) for plan_id in ids]
        jobs = [AsyncJob(plan_id=plan_id, phase=phase) for plan_id in ids]
        moved = self.ledger.queue(jobs)
        if moved is None:
            self._raise_refusal(ids, phase)
        by_id = {plan.plan_id: plan for plan in moved or []}
        self.ledger.parts.publish_committed(jobs)
        return [PhaseQueued(plan=by_id[job.plan_id], job=job) for job in jobs]

    # -- the pipeline (domain/pipeline.py): the plan runs its phases by itself ------------------
    def run_plan(
        self,
        plan_id: object,
        through: object = PlanPhase.apply,
        approve_before: object = None,
        actor: object = None,
        approval_timeout: object = None,
        approvals: object = None,
        note: object = None,
        notify: object = None,
    ) -> PhaseQueued:
        """Queue the plan's next phase with a pipeline that queues the rest by itself.

        It stops after `through` and waits for a person before `approve_before` (for at
        most `approval_timeout` seconds, then it ends `expired`), for `approvals`
        distinct approvers other than `actor` (four-eyes, see PipelineLedger.decide); `notify`
        URLs hear of its gate and its end (domain/webhooks.py). Bad input
        is a typed error (InvalidIdError, PlanNotFoundError, PipelineError,
        InvalidPlanTransitionError) with nothing written.
        """
        ledger = self._pipeline_ledger()
        plan = self.get_plan(require_ulid("plan_id", plan_id))
        job = ledger.pipeline.start(
            plan, through, approve_before, actor, approval_timeout, approvals, note, notify
        )
        return PhaseQueued(plan=self.get_plan(plan.plan_id), job=job)

    def approve_plan(
        self,
        plan_id: str,
        actor: object = None,
        note: object = None,
        *,
        allow_self: bool = False,
    ) -> PhaseQueued:
        """Count an approval; once enough, the next phase is queued (compare-and-set).

        A plan that is not waiting, or that someone else decided first, is a
        NotAwaitingApprovalError, with nothing written; the pipeline's runner approving
        its own gate is a SelfApprovalError unless allow_self (PLANQ_APPROVAL_SELF).
        """
        ledger = self._pipeline_ledger()
        job = ledger.pipeline.decide(
            self.get_plan(plan_id), True, actor, note, allow_self=allow_self
        )
        return PhaseQueued(plan=self.get_plan(plan_id), job=job)

    def reject_plan(self, plan_id: str, actor: object = None, note: object = None) -> Plan:
        """Stop a plan waiting at its gate (compare-and-set, as approve_plan)."""
        self._pipeline_ledger().pipeline.decide(self.get_plan(plan_id), False, actor, note)
        return self.get_plan(plan_id)

    def plan_events(self, plan_id: str, limit: int = 500) -> list[PlanEvent]:
        """The plan's audit trail, oldest first."""
        return self.plans.list_events(self.get_plan(plan_id).plan_id, limit)

    def _pipeline_ledger(self) -> JobLedger:
        """The ledger, if a pipeline can run here: jobs enabled, plans and jobs one ledger.

        A pipeline's steps commit with the finish that causes them, which two stores (the
        spec's composition) cannot do: there it is a ConfigurationError, nothing written.
        """
        if self.ledger is None or not self.config.enabled:
            raise ConfigurationError("a plan pipeline needs the job ledger (jobs are disabled)")
        if not one_ledger(self.ledger.jobs, self.plans):
            raise ConfigurationError("a plan pipeline needs its plans and jobs in one ledger")
        return self.ledger

    def _raise_refusal(self, ids: list[str], phase: PlanPhase) -> None:
        """Say why the queue CAS refused: the first plan that is missing or not ready."""
        for plan_id in ids:
            self.get_plan(plan_id).queue_phase(phase)  # PlanNotFound / InvalidPlanTransition
        raise ConcurrentUpdateError(f"a plan changed while its {phase.value} phase was queued")

    def _queue_without_job(self, plan_id: str, phase: PlanPhase) -> PhaseQueued:
        """Jobs disabled (or no job store): the plan moves, and no job is made."""
        with self.plans.transaction():
            plan = self.get_plan(plan_id)
            plan.queue_phase(phase)  # raises InvalidPlanTransitionError, nothing written
            self.plans.update(plan)  # optimistic: a concurrent queue of this plan loses here
        return PhaseQueued(plan=plan, job=None)


__all__ = ["ConcurrentUpdateError", "Enqueue", "PhaseQueued", "PlanLifecycleService", "Steps"]
