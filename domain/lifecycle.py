"""The plan lifecycle: queue a phase and its job in one transaction, then hand off."""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass

from domain.config import AsyncWorkerConfig
from domain.errors import ConcurrentUpdateError, PlanNotFoundError
from domain.ids import require_ulid
from domain.jobs import AsyncJob
from domain.plans import Plan, PlanPhase
from domain.ports import JobStore, PlanStore

logger = logging.getLogger("planq.lifecycle")

#: Called after commit with the new job; publishes its message (Celery wiring) and may
#: raise: the row is already durable, and the dispatch relay re-publishes it.
Enqueue = Callable[[AsyncJob], None]


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
    ) -> None:
        self.plans = plans
        self.jobs = jobs
        self.config = config or AsyncWorkerConfig()
        self.enqueue = enqueue

    def create_plan(self, steps: list[str] | list[dict[str, object]], name: str = "") -> Plan:
        """Store a new plan with these steps."""
        plan = Plan.with_steps(steps, name=name)
        self.plans.add(plan)
        return plan

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
        """Validate, then move the plan and insert its job in ONE transaction, then enqueue.

        Row first, message second: a message never exists without its row.
        """
        plan_id = require_ulid("plan_id", plan_id)
        use_jobs = self.config.enabled and self.jobs is not None
        with self.plans.transaction():
            plan = self.get_plan(plan_id)
            plan.queue_phase(phase)  # raises InvalidPlanTransitionError, nothing written
            job = AsyncJob(plan_id=plan.plan_id, phase=phase) if use_jobs else None
            self.plans.update(plan)  # optimistic: a concurrent queue of this plan loses here
            if job is not None:
                assert self.jobs is not None
                self.jobs.add(job)
        if job is not None and self.enqueue is not None:
            try:
                self.enqueue(job)
            except Exception:  # the row is durable; the dispatch relay publishes it later
                logger.exception("job %s committed but not published; the relay will", job.job_id)
        return PhaseQueued(plan=plan, job=job)


__all__ = ["ConcurrentUpdateError", "Enqueue", "PhaseQueued", "PlanLifecycleService"]
