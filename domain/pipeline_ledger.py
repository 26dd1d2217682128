"""The pipeline's writes, each one transaction in the ledger: run, advance, decide, stop.

Part of the jobs door (`JobLedger.pipeline`): every job it makes goes through the job
store's queue compare-and-set, inside the same transaction as the write that caused it
(the finish of the phase before, or the approval), so a plan is never COMPLETE with its
next phase due and nothing queued. Publishing happens after the commit (`enqueue`); a
process that dies in between leaves a durable row the dispatch relay publishes.
"""

from __future__ import annotations

import logging
from datetime import datetime, timedelta

from planq.domain.clock import utcnow
from planq.domain.errors import (
    AlreadyApprovedError,
    ConcurrentUpdateError,
    InvalidPlanTransitionError,
    NotAwaitingApprovalError,
    PlanNotFoundError,
    SelfApprovalError,
)
from planq.domain.jobs import AsyncJob, AsyncJobStatus
from planq.domain.pipeline import (
    EventKind,
    PipelineRequest,
    PlanEvent,
    Step,
    after_success,
    check_actor,
    check_approvals,
    check_note,
    finished_despite_cancel,
    first_phase,
    waiting_for,
)
from planq.domain.plans import PipelineState, Plan, PlanPhase
from planq.domain.ports import LedgerParts, PlanStore
from planq.domain.webhooks import NOTIFY, deliveries_for

logger = logging.getLogger("planq.pipeline")


_ENDED = {
    AsyncJobStatus.succeeded: EventKind.succeeded,
    AsyncJobStatus.failed: EventKind.failed,
    AsyncJobStatus.cancelled: EventKind.cancelled,
}
_ACTIVE = (PipelineState.running, PipelineState.awaiting_approval)
_RETRIES = 5
TOO_LATE = "the cancel came too late: the last phase finished before a safe point"


class PipelineLedger:
    """The pipeline half of the jobs door: it writes only through the ledger's parts."""

    def __init__(self, parts: LedgerParts) -> None:
        self.parts = parts

    @property
    def _plans(self) -> PlanStore:
        plans = self.parts.plans
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
        *,
        plan: Plan | None = None,
    ) -> PlanEvent:
        """Append one event, and its notifications to the outbox, in one transaction.

        Its texts pass through the ledger's redactor. An event that notifies (domain/
        webhooks.py's NOTIFY) is told to every receiver of `plan` (read if not given).
        """
        redact = self.parts.redactor
        event = PlanEvent(
            plan_id=plan_id,
            kind=kind,
            phase=phase,
            job_id=job_id,
            actor=None if actor is None else redact(actor),
            note=None if note is None else redact(note),
        )
        with self.parts.jobs.transaction():
            self._plans.add_event(event)
            self._notify(event, plan)
        return event

    def _notify(self, event: PlanEvent, plan: Plan | None) -> None:
        """The outbox rows of an event that notifies, when there is anyone to tell."""
        policy = self.parts.webhooks
        if event.kind not in NOTIFY or not policy.enabled:
            return
        plan = plan if plan is not None else self._plans.get(event.plan_id)
        if plan is None:
            return
        deliveries = deliveries_for(event, plan, policy, self.parts.redactor)
        if deliveries:
            self._plans.add_deliveries(deliveries)

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
        approvals: object = None,
        note: object = None,
        notify: object = None,
    ) -> AsyncJob:
        """Store the pipeline on the plan and queue its first phase; the job (published).

        `notify` (URLs) are the pipeline's own webhook receivers, beside the fleet's
        (PLANQ_WEBHOOK_URLS); without a signing secret they are a PipelineError.

        `actor` (who runs it, from the credential) is kept on the plan: by the four-eyes
        rule it may not approve the gate; `approvals` distinct approvers open it (default 1).

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
        need = check_approvals(approvals, request.gate)
        receivers = self.parts.webhooks.check_receivers(notify)
        job = AsyncJob(plan_id=plan.plan_id, phase=start)
        with self.parts.jobs.transaction():
            plan.pipeline_started_by = who
            plan.pipeline_approvals = need
            plan.pipeline_approved_by = []
            plan.pipeline_notify = receivers
            plan.pipeline_through = request.through
            plan.pipeline_gate = request.gate
            plan.pipeline_state = PipelineState.running
            plan.pipeline_approval_timeout = request.approval_timeout
            self._plans.update(plan)  # ConcurrentUpdateError: it moved since it was read
            gate = request.gate.value if request.gate else "none"
            said = f"pipeline through {request.through.value}, gate {gate}"
            if need is not None and need > 1:
                said += f", {need} approvers"
            text = check_note(note)
            self._queue(job, who, f"{said}; {text}" if text else said)
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
        with self.parts.jobs.transaction():
            won = self.parts.jobs.finish(
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
        if finished_despite_cancel(plan, job.phase):
            self._set_state(plan, PipelineState.done)  # its last phase did all its work
            self.record(plan.plan_id, EventKind.done, job.phase, note=TOO_LATE, plan=plan)
            return None
        step, following = after_success(plan, job.phase)
        if step is Step.queue_next and following is not None:
            return self._queue(AsyncJob(plan_id=plan.plan_id, phase=following))
        if step is Step.await_approval:
            plan.pipeline_approved_by = []  # a new wait: nobody has approved it yet
            self._set_state(plan, PipelineState.awaiting_approval)
            self.record(plan.plan_id, EventKind.awaiting_approval, following, plan=plan)
        elif step is Step.done:
            self._set_state(plan, PipelineState.done)
            self.record(plan.plan_id, EventKind.done, job.phase, plan=plan)
        return None

    def ended(
        self, plan: Plan | None, job: AsyncJob, status: AsyncJobStatus, error: str | None
    ) -> None:
        """A phase job's end on its pipeline plan's trail, in the caller's transaction.

        Every way a job ends records it: the worker's finish, a cancel of a queued job, the
        stuck sweep, a message no worker picked up. A plan without a pipeline keeps no trail.
        """
        if plan is not None and plan.pipeline_state is not None:
            self.record(plan.plan_id, _ENDED[status], job.phase, job.job_id, note=error, plan=plan)

    # -- the gate: approve or reject, a compare-and-set ---------------------------------------
    def decide(
        self,
        plan: Plan,
        approve: bool,
        actor: object,
        note: object,
        *,
        allow_self: bool = False,
    ) -> AsyncJob | None:
        """Approve (queue the next phase once enough approved) or reject; the job queued.

        A compare-and-set on the plan's version: of two decisions at once one wins, and
        the other reads the plan again: still waiting (a co-approver's partial approval
        moved it) it counts too, else it is a NotAwaitingApprovalError, as is a plan that
        is not waiting at all. Four-eyes: unless allow_self, the principal that ran the
        pipeline may not approve (SelfApprovalError; the refusal is kept in the trail);
        an approver counts once (AlreadyApprovedError); one reject ends the wait.
        """
        who, text = check_actor(actor), check_note(note)
        for _ in range(_RETRIES):
            following, since = waiting_for(plan), plan.updated_at  # it waits since then
            if following is None:
                state = plan.pipeline_state.value if plan.pipeline_state else "none"
                raise NotAwaitingApprovalError(plan.plan_id, state)
            if approve:
                self._check_approver(plan, who, following, allow_self)
            need = plan.pipeline_approvals or 1
            approvers = [*plan.pipeline_approved_by, who or "(unnamed)"]
            opens = not approve or len(approvers) >= need
            job = AsyncJob(plan_id=plan.plan_id, phase=following) if approve and opens else None
            kind = EventKind.approved if approve else EventKind.rejected
            counted = f"{len(approvers)} of {need} approvals" if approve and need > 1 else None
            try:
                with self.parts.jobs.transaction():
                    if approve:
                        plan.pipeline_approved_by = approvers
                    if opens:
                        state = PipelineState.running if approve else PipelineState.rejected
                        self._set_state(plan, state)
                    else:  # a partial approval: the version moves, the wait's start does not
                        self._plans.update(plan)
                    joined = "; ".join(t for t in (counted, text) if t) or None
                    self.record(plan.plan_id, kind, following, actor=who, note=joined, plan=plan)
                    if job is not None:
                        self._queue(job, who)
            except ConcurrentUpdateError:
                fresh = self._plans.get(plan.plan_id)
                if fresh is None:
                    raise PlanNotFoundError(plan.plan_id) from None
                if waiting_for(fresh) is None:
                    raise NotAwaitingApprovalError(
                        plan.plan_id, "decided by someone else"
                    ) from None
                plan = fresh  # still waiting: a co-approver moved it; count this one again
                continue
            if opens:
                self._observe(kind.value, since)
            if job is not None:
                self._publish([job])
            return job
        raise ConcurrentUpdateError(f"plan {plan.plan_id} kept changing while it was decided")

    def _check_approver(
        self, plan: Plan, who: str | None, following: PlanPhase, allow_self: bool
    ) -> None:
        """Four-eyes: not the runner (the refusal is recorded), and each approver once."""
        if who is not None and not allow_self and who == plan.pipeline_started_by:
            self.record(
                plan.plan_id,
                EventKind.approval_refused,
                following,
                actor=who,
                note="four-eyes: the principal that ran the pipeline may not approve its gate",
            )
            raise SelfApprovalError(plan.plan_id, who)
        if who is not None and who in plan.pipeline_approved_by:
            need = plan.pipeline_approvals or 1
            raise AlreadyApprovedError(plan.plan_id, who, len(plan.pipeline_approved_by), need)

    # -- stop: a whole-plan cancel (JobLedger.cancel_plan, in its transaction) --------------
    @staticmethod
    def active(plan: Plan) -> bool:
        """Whether the plan's pipeline is still going (running, or waiting at its gate)."""
        return plan.pipeline_state in _ACTIVE

    def stop(self, plan: Plan, who: str | None, note: str | None = None) -> None:
        """Stop an active pipeline and record who asked, in the caller's transaction.

        The plan's compare-and-set makes a cancel and a decision (or a finish) at once
        serialise: the one that commits second reads the plan again.
        """
        if self.active(plan):
            self._set_state(plan, PipelineState.cancelled)
        self.record(
            plan.plan_id,
            EventKind.cancel_requested,
            plan.phase,
            actor=who,
            note=check_note(note),
            plan=plan,
        )

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
                with self.parts.jobs.transaction():
                    self._set_state(plan, PipelineState.expired)
                    self.record(
                        plan.plan_id,
                        EventKind.expired,
                        phase,
                        actor="timeout",
                        note=note,
                        plan=plan,
                    )
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
        if self.parts.jobs.queue([job], utcnow()) is None:
            raise ConcurrentUpdateError(f"plan {job.plan_id} changed while its pipeline moved")
        self.record(job.plan_id, EventKind.queued, job.phase, job.job_id, actor, note)
        return job

    def _observe(self, decision: str, since: datetime) -> None:
        """Tell the ledger's gate observer (metrics) of a decided wait; never fail for it."""
        observe = self.parts.on_gate_decided
        if observe is None:
            return
        try:
            observe(decision, since)
        except Exception:
            logger.exception("the gate observer failed")

    def _publish(self, jobs: list[AsyncJob]) -> None:
        self.parts.publish_committed(jobs)
