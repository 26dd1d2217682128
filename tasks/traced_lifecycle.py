"""The plan lifecycle with spans: the producer's (queue, run a pipeline) and the gate's.

Every producer path goes through the Runtime's lifecycle (`execute_plan.delay`,
`run_plan.delay`, `delay_many`, the CLI and the API), so the producer spans live here,
once; the messages published inside them carry their context (tasks/publisher.py).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TypeVar

from opentelemetry import trace
from opentelemetry.trace import Status, StatusCode

from planq.domain.ids import is_ulid
from planq.domain.lifecycle import PhaseQueued, PlanLifecycleService
from planq.domain.pipeline import waiting_for
from planq.domain.plans import Plan, PlanPhase
from planq.domain.redaction import BUILTIN, Redactor
from planq.tasks import tracing

T = TypeVar("T")


def _plan_ids(plan_ids: object) -> list[str]:
    """The valid ids among what a producer passed (the lifecycle raises for the rest)."""
    if isinstance(plan_ids, str) or not isinstance(plan_ids, Sequence):
        return []
    return [p for p in plan_ids if is_ulid(p)]


class TracedLifecycle(PlanLifecycleService):
    """PlanLifecycleService whose producer calls and gate decisions are spans."""

    def queue_phases(self, plan_ids: Sequence[str], phase: PlanPhase) -> list[PhaseQueued]:
        """Queue the phase for the plans, inside a producer span in the first plan's trace."""
        ids = _plan_ids(plan_ids)
        name = tracing.SPAN_QUEUE.format(phase=getattr(phase, "value", phase))
        with tracing.producer_span(name, ids, {tracing.JOBS: len(ids)}):
            return super().queue_phases(plan_ids, phase)

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
        """Start the pipeline inside the producer span that begins the plan's trace."""
        ids = [plan_id] if isinstance(plan_id, str) and is_ulid(plan_id) else []
        with tracing.producer_span(tracing.SPAN_RUN_PLAN, ids):
            return super().run_plan(
                plan_id, through, approve_before, actor, approval_timeout, approvals, note, notify
            )

    def approve_plan(
        self,
        plan_id: str,
        actor: object = None,
        note: object = None,
        *,
        allow_self: bool = False,
    ) -> PhaseQueued:
        """Count an approval; the gate's span ends with it (the next phase is its child)."""

        def approve() -> PhaseQueued:
            return super(TracedLifecycle, self).approve_plan(
                plan_id, actor, note, allow_self=allow_self
            )

        def outcome(queued: PhaseQueued) -> tuple[str, Plan]:
            return ("approved" if queued.job is not None else "approval_counted"), queued.plan

        return self._at_gate(plan_id, actor, approve, outcome)

    def reject_plan(self, plan_id: str, actor: object = None, note: object = None) -> Plan:
        """Reject a plan waiting at its gate; the gate's span ends with it."""

        def reject() -> Plan:
            return super(TracedLifecycle, self).reject_plan(plan_id, actor, note)

        return self._at_gate(plan_id, actor, reject, lambda plan: ("rejected", plan))

    def _at_gate(
        self,
        plan_id: str,
        actor: object,
        decide: Callable[[], T],
        outcome: Callable[[T], tuple[str, Plan]],
    ) -> T:
        """Run a decision inside the gate's span (started when the plan began waiting)."""
        waiting = self._waiting(plan_id)
        if waiting is None:
            return decide()
        gate_phase = waiting_for(waiting)
        span = tracing.gate_span(
            waiting.plan_id,
            None if gate_phase is None else gate_phase.value,
            waiting.updated_at,  # the wait's start, as the pipeline ledger counts it
            "pending",
            actor if isinstance(actor, str) else None,
            self._redactor,
        )
        try:
            with trace.use_span(span, end_on_exit=False):
                decided = decide()
        except Exception as exc:  # refused: four-eyes, decided elsewhere, ... (type only)
            span.set_attribute(tracing.DECISION, "refused")
            span.set_status(Status(StatusCode.ERROR, type(exc).__name__))
            span.end()
            raise
        decision, plan = outcome(decided)
        span.set_attribute(tracing.DECISION, decision)
        approvers = [self._redactor(a) for a in plan.pipeline_approved_by]
        if approvers:
            span.set_attribute(tracing.APPROVERS, approvers)
        span.end()
        return decided

    @property
    def _redactor(self) -> Redactor:
        """The one redactor (the ledger's: the runtime builds it from settings)."""
        return BUILTIN if self.ledger is None else self.ledger.redactor

    def _waiting(self, plan_id: object) -> Plan | None:
        """The plan if it waits at its gate and spans are recorded (one read), else None."""
        if not tracing.active() or not isinstance(plan_id, str) or not is_ulid(plan_id):
            return None
        plan = self.plans.get(plan_id)
        return plan if plan is not None and waiting_for(plan) is not None else None
