"""The pipeline's writes, each one transaction in the ledger: run, advance, decide, stop.

Part of the jobs door (`JobLedger.pipeline`): every job it makes goes through the job
store's queue compare-and-set, inside the same transaction as the write that caused it
(the finish of the phase before, or the approval), so a plan is never COMPLETE with its
next phase due and nothing queued. Publishing happens after the commit (`enqueue`); a
process that dies in between leaves a durable row the dispatch relay publishes.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from datetime import datetime, timedelta
from typing import TYPE_CHECKING

from planq.domain.clock import utcnow
from planq.domain.errors import (
    ConcurrentUpdateError,
    InvalidPlanTransitionError,
    NotAwaitingApprovalError,
    PlanNotFoundError,
)
from planq.domain.jobs import AsyncJob, AsyncJobStatus
from planq.domain.pipeline import (
    EventKind,
    PipelineRequest,
    PlanEvent,
    Step,
    after_success,
    check_actor,
    check_note,
    first_phase,
    waiting_for,
)
from planq.domain.plans import PipelineState, Plan, PlanPhase

if TYPE_CHECKING:
    from planq.domain.ledger import JobLedger
    from planq.domain.ports import PlanStore

logger = logging.getLogger("planq.pipeline")

#: Called after commit with the jobs a pipeline queued (the runtime's publish).
Enqueue = Callable[[Sequence[AsyncJob]], None]
#: Called after commit when a wait at a gate ended: (approved|rejected|expired, since when).
GateObserver = Callable[[str, datetime], None]

_ENDED = {
    AsyncJobStatus.succeeded: EventKind.succeeded,
    AsyncJobStatus.failed: EventKind.failed,
    AsyncJobStatus.cancelled: EventKind.cancelled,
}
_ACTIVE = (PipelineState.running, PipelineState.awaiting_approval)
_RETRIES = 5


class PipelineLedger:
    """The pipeline half of the jobs door: it writes only through its JobLedger's stores."""

    def __init__(self, ledger: JobLedger) -> None:
        self.ledger = ledger

    @property
    def _plans(self) -> PlanStore:
        plans = self.ledger.plans
        if plans is None:
            raise PlanNotFoundError("(no plan store)")
        return plans

    # -- the audit trail ------------------------------------------------------------------
    def record(
        self,
        plan_id: str,
        kind: EventKind,
        phase: PlanPhase | None = None,
        job_id: str | None = None,
        actor: str | None = None,
        note: str | None = None,
    ) -> PlanEvent:
        """Append one event; its texts pass through the ledger's redactor."""
        redact = self.ledger.redactor
        event = PlanEvent(
            plan_id=plan_id,
            kind=kind,
            phase=phase,
            job_id=job_id,
            actor=None if actor is None else redact(actor),
            note=None if note is None else redact(note),
        )
        self._plans.add_event(event)
        return event

    def events(self, plan_id: str, limit: int = 500) -> list[PlanEvent]:
        """A plan's trail, oldest first."""
        return self._plans.list_events(plan_id, limit)

    # -- run: queue the first phase and store the pipeline, one transaction ---------------
    def start(
        self,
        plan: Plan,
        through: object,
        approve_before: object,
        actor: object = None,
        approval_timeout: object = None,
    ) -> AsyncJob:
        """Store the pipeline on the plan and queue its first phase; the job (published).

        Bad input (a phase that is not one, a gate outside (start, through]) is a
        PipelineError and a plan that can run nothing now an InvalidPlanTransitionError,
        with nothing written. A plan that changed since it was read loses (optimistic).
        """
        start = first_phase(plan)
        if plan.pipeline_state is PipelineState.awaiting_approval:  # only a decision passes
            raise InvalidPlanTransitionError(
                plan.plan_id, f"{plan.label} (awaiting approval)", "a new pipeline"
            )
        if start is None:
            raise InvalidPlanTransitionError(plan.plan_id, plan.label, "a pipeline")
        request = PipelineRequest.check(start, through, approve_before, approval_timeout)
        who = check_actor(actor)
        job = AsyncJob(plan_id=plan.plan_id, phase=start)
        with self.ledger.jobs.transaction():
            plan.pipeline_through = request.through
            plan.pipeline_gate = request.gate
            plan.pipeline_state = PipelineState.running
            plan.pipeline_approval_timeout = request.approval_timeout
            self._plans.update(plan)  # ConcurrentUpdateError: it moved since it was read
            gate = request.gate.value if request.gate else "none"
            self._queue(job, who, f"pipeline through {request.through.value}, gate {gate}")
        self._publish([job])
        return job

    # -- advance: the finish of a phase and the pipeline's next step, one transaction ------
    def finish(
        self,
        job: AsyncJob,
        status: AsyncJobStatus,
        error: str | None,
        worker_id: str | None,
        traceback: str | None,
    ) -> bool:
        """End the job (the one finish statement) and take the pipeline's step, atomically."""
        with self.ledger.jobs.transaction():
            won = self.ledger.jobs.finish(
                job.job_id,
                status,
                utcnow(),
                error,
                worker_id=worker_id,
                follow_plan=True,
                traceback=traceback,
            )
            if not won:  # not ours any more: the finish writes nothing, so neither do we
                return False
            queued = self._after_finish(job, status, error)
        if queued is not None:
            self._publish([queued])
        return True

    def _after_finish(
        self, job: AsyncJob, status: AsyncJobStatus, error: str | None
    ) -> AsyncJob | None:
        plan = self._plans.get(job.plan_id)
        if plan is None or plan.pipeline_state is None:
            return None
        self.ended(plan, job, status, error)
        if status is not AsyncJobStatus.succeeded:
            return None  # a failed or cancelled phase stops it; `jobs retry` resumes it
        step, following = after_success(plan, job.phase)
        if step is Step.queue_next and following is not None:
            return self._queue(AsyncJob(plan_id=plan.plan_id, phase=following))
        if step is Step.await_approval:
            self._set_state(plan, PipelineState.awaiting_approval)
            self.record(plan.plan_id, EventKind.awaiting_approval, following)
        elif step is Step.done:
            self._set_state(plan, PipelineState.done)
            self.record(plan.plan_id, EventKind.done, job.phase)
        return None

    def ended(
        self, plan: Plan | None, job: AsyncJob, status: AsyncJobStatus, error: str | None
    ) -> None:
        """A phase job's end on its pipeline plan's trail, in the caller's transaction.

        Every way a job ends records it: the worker's finish, a cancel of a queued job, the
        stuck sweep, a message no worker picked up. A plan without a pipeline keeps no trail.
        """
        if plan is not None and plan.pipeline_state is not None:
            self.record(plan.plan_id, _ENDED[status], job.phase, job.job_id, note=error)

    # -- the gate: approve or reject, a compare-and-set ---------------------------------------
    def decide(self, plan: Plan, approve: bool, actor: object, note: object) -> AsyncJob | None:
        """Approve (queue the next phase) or reject a waiting plan; the job approve queued.

        A compare-and-set on the plan's version: of two decisions at once one wins and the
        other is a NotAwaitingApprovalError, as is a plan that is not waiting at all.
        """
        who, text = check_actor(actor), check_note(note)
        following, since = waiting_for(plan), plan.updated_at  # it waits since then
        if following is None:
            state = plan.pipeline_state.value if plan.pipeline_state else "none"
            raise NotAwaitingApprovalError(plan.plan_id, state)
        job = AsyncJob(plan_id=plan.plan_id, phase=following) if approve else None
        try:
            with self.ledger.jobs.transaction():
                state = PipelineState.running if approve else PipelineState.rejected
                self._set_state(plan, state)
                kind = EventKind.approved if approve else EventKind.rejected
                self.record(plan.plan_id, kind, following, actor=who, note=text)
                if job is not None:
                    self._queue(job, who)
        except ConcurrentUpdateError:
            raise NotAwaitingApprovalError(plan.plan_id, "decided by someone else") from None
        self._observe(kind.value, since)
        if job is not None:
            self._publish([job])
        return job

    # -- stop: a whole-plan cancel ------------------------------------------------------------
    def stop(self, plan_id: str, actor: object = None) -> tuple[Plan, list[AsyncJob]]:
        """Stop the plan's pipeline (if active), record who asked; its live jobs, to cancel.

        The caller cancels those jobs through the worker's cancel (the ledger's request,
        the token, the broadcast), so a running phase stops cooperatively.
        """
        who = check_actor(actor)
        for _ in range(_RETRIES):
            try:
                with self.ledger.jobs.transaction():
                    plan = self._plans.get(plan_id)
                    if plan is None:
                        raise PlanNotFoundError(plan_id)
                    if plan.pipeline_state in _ACTIVE:
                        self._set_state(plan, PipelineState.cancelled)
                    self.record(plan.plan_id, EventKind.cancel_requested, plan.phase, actor=who)
                live = [j for j in self.ledger.jobs.list_by_plan(plan_id) if not j.is_terminal]
                return plan, live
            except ConcurrentUpdateError:
                continue  # the finish advanced it meanwhile: read it again
        raise ConcurrentUpdateError(f"plan {plan_id} kept changing while it was cancelled")

    # -- expiry: a gate nobody decided in time ------------------------------------------------
    def expire_waiting(self, limit: int = 100) -> list[str]:
        """End plans waiting past their approval timeout as `expired`; their ids.

        Each is the same compare-and-set as a decision (the plan's version): an approval
        that wins first leaves it alone. The wait counts from entering the gate (the
        plan's `updated_at`, which nothing else moves while it waits).
        """
        now = utcnow()
        expired: list[str] = []
        for plan in self._plans.list_awaiting(limit):
            timeout = plan.pipeline_approval_timeout
            if timeout is None or plan.updated_at + timedelta(seconds=timeout) > now:
                continue
            phase, note = waiting_for(plan), f"no decision within {timeout:g} s"
            since = plan.updated_at
            try:
                with self.ledger.jobs.transaction():
                    self._set_state(plan, PipelineState.expired)
                    self.record(plan.plan_id, EventKind.expired, phase, actor="timeout", note=note)
            except ConcurrentUpdateError:
                continue  # decided meanwhile
            expired.append(plan.plan_id)
            self._observe(EventKind.expired.value, since)
        return expired

    # -- helpers ------------------------------------------------------------------------------
    def _set_state(self, plan: Plan, state: PipelineState) -> None:
        plan.pipeline_state = state
        plan.updated_at = utcnow()  # an expiry counts the wait at the gate from here
        self._plans.update(plan)

    def _queue(self, job: AsyncJob, actor: str | None = None, note: str | None = None) -> AsyncJob:
        """The queue compare-and-set inside the caller's transaction; refused: roll back."""
        if self.ledger.jobs.queue([job], utcnow()) is None:
            raise ConcurrentUpdateError(f"plan {job.plan_id} changed while its pipeline moved")
        self.record(job.plan_id, EventKind.queued, job.phase, job.job_id, actor, note)
        return job

    def _observe(self, decision: str, since: datetime) -> None:
        """Tell the ledger's gate observer (metrics) of a decided wait; never fail for it."""
        observe = self.ledger.on_gate_decided
        if observe is None:
            return
        try:
            observe(decision, since)
        except Exception:
            logger.exception("the gate observer failed")

    def _publish(self, jobs: list[AsyncJob]) -> None:
        if self.ledger.enqueue is None:
            return
        try:
            self.ledger.enqueue(jobs)
        except Exception:  # the rows are durable; the dispatch relay publishes them later
            logger.exception("%d pipeline job(s) committed but not published", len(jobs))
