"""The operator's job actions: the one cancel, the one retry, the sweeps and the relay.

Every surface calls these — the CLI, the HTTP API, the Python client, beat's maintenance
tasks, the runner's retry policy and the spec's `AsyncWorker.cancel_job` — and each raises
domain errors, which the surfaces translate (exit codes, HTTP statuses, False). The
Runtime builds it without a runner: cancelling a job from the CLI builds no tracker,
poller or executor registry. Where a runner works in this process, `running_here` lets a
cancel trip its token instead of broadcasting.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence
from typing import NamedTuple

from planq.domain.config import DEFAULT_STUCK_CHECK_INTERVAL, AsyncWorkerConfig
from planq.domain.errors import (
    AlreadyRetriedError,
    CancelTooLateError,
    InvalidJobTransitionError,
    JobNotFoundError,
    PlanGoneError,
    PlanNotFoundError,
)
from planq.domain.ids import require_ulid
from planq.domain.jobs import AsyncJob, AsyncJobStatus
from planq.domain.ledger import JobLedger, PlanCancel, StuckReport
from planq.domain.outage import PROCESS_OUTAGES, OutageMonitor
from planq.domain.plans import PlanStatus, plan_label
from planq.domain.ports import CancelOutcome
from planq.tasks import metrics, tracing

logger = logging.getLogger("planq.jobs")

#: Publishes jobs' messages after their rows committed (the runtime's publish).
Publish = Callable[[Sequence[AsyncJob]], None]
#: Tells every worker that the cancel of this job is recorded, with its outcome: the node
#: that runs the job stops it and counts it; the others write and count nothing.
BroadcastCancel = Callable[[str, CancelOutcome], None]
#: Trips the token of a job this process runs; False when it runs elsewhere (or nowhere).
CancelLocal = Callable[[str], bool]
#: Makes a publish's dispatch stamps durable now, so a row read next shows it was sent.
Settle = Callable[[], object]
#: Called once the input is checked and before anything is written (a caller's broker
#: check: a CLI command refuses before the ledger changes when the broker is down).
Ready = Callable[[], None]


def ready_now() -> None:
    """No check: write at once."""


class Retried(NamedTuple):
    """A retry that was queued: the new row as stored, and whether its message went out."""

    job: AsyncJob
    #: False: the row is durable and unsent; the dispatch relay sends it after its grace
    published: bool


def _nothing_runs_here(job_id: str) -> bool:
    return False


class JobService:
    """Cancel, retry, cancel a plan, the sweeps and the relay: each written once, here."""

    def __init__(
        self,
        ledger: JobLedger,
        config: AsyncWorkerConfig,
        *,
        broadcast_cancel: BroadcastCancel | None = None,
        running_here: CancelLocal = _nothing_runs_here,
        settle: Settle | None = None,
        outages: OutageMonitor | None = None,
        sweep_interval: float = DEFAULT_STUCK_CHECK_INTERVAL,
    ) -> None:
        self.ledger = ledger
        self.config = config
        self.broadcast_cancel = broadcast_cancel
        self.running_here = running_here
        self.settle = settle
        #: this process's outage monitor (the sweeps' fair expiry counts its outages)
        self.outages = PROCESS_OUTAGES if outages is None else outages
        #: beat's stuck-sweep schedule: how long a gap between sweeps may be (fair expiry)
        self.sweep_interval = sweep_interval

    # -- reads an action starts from --------------------------------------------------
    def find(self, job_id: object) -> AsyncJob:
        """The job's row; InvalidIdError for a malformed id, JobNotFoundError if unknown."""
        wanted = require_ulid("job_id", job_id)
        job = self.ledger.jobs.get(wanted)
        if job is None:
            raise JobNotFoundError(wanted)
        return job

    def _as_stored(self, job_id: str) -> AsyncJob:
        """The row after a publish, its dispatch stamp durable (as the relay will see it)."""
        if self.settle is not None:
            self.settle()
        job = self.ledger.jobs.get(job_id)
        if job is None:  # removed by the TTL cleanup in between
            raise JobNotFoundError(job_id)
        return job

    # -- cancel ------------------------------------------------------------------------
    def cancel(self, job_id: object, actor: str | None = None, note: str | None = None) -> AsyncJob:
        """Record the cancel durably, trip the token or broadcast; the row after it.

        A queued job ends `cancelled` at once; a running one keeps `running` with
        `cancel_requested_at` set until its executor reaches a safe point. Counted once:
        here when this process runs the job or nothing does, else by the node that runs
        it, which the broadcast reaches with the outcome (here again if it fails).
        JobNotFoundError / InvalidJobTransitionError (it had ended): nothing written.
        """
        if not isinstance(job_id, str) or not job_id.strip():
            raise ValueError("job_id must be a non-empty string")
        wanted = require_ulid("job_id", job_id.strip()).upper()  # checked once, here
        outcome = self.ledger.cancel(wanted, actor, note)  # who asked, for a pipeline's trail
        if not outcome.accepted:
            metrics.cancel_requested(outcome.value)
            now = self.ledger.jobs.get(wanted)
            if now is None:
                raise JobNotFoundError(wanted)
            raise InvalidJobTransitionError(wanted, now.status.value, "cancelled")
        self._deliver_cancel(wanted, outcome)
        after = self.ledger.jobs.get(wanted)
        if after is None:  # removed by the TTL cleanup in between
            raise JobNotFoundError(wanted)
        return after

    def _deliver_cancel(self, job_id: str, outcome: CancelOutcome) -> None:
        """After a cancel committed: trip the token here, else broadcast; count it once."""
        tracing.job_event(job_id, tracing.EVENT_CANCEL_REQUESTED, {tracing.CANCEL_VIA: "local"})
        ran_here = self.running_here(job_id)
        if ran_here or outcome is CancelOutcome.cancelled or self.broadcast_cancel is None:
            metrics.cancel_requested(outcome.value)
            return
        try:
            self.broadcast_cancel(job_id, outcome)
        except Exception as exc:  # the durable request still reaches it via the heartbeat
            metrics.cancel_requested(outcome.value)
            logger.warning(
                "cancel broadcast for %s failed (%s); the heartbeat will deliver it", job_id, exc
            )

    def cancel_plan(
        self, plan_id: str, actor: str | None = None, note: str | None = None, wait: float = 0.0
    ) -> PlanCancel:
        """Cancel a whole plan: its pipeline stops and its live jobs are cancelled, at once.

        One ledger transaction (`JobLedger.cancel_plan`: a queued job ends there, a running
        one is asked to stop), then each running one's token is tripped or broadcast, as
        `cancel` does. With `wait`, the answer waits up to that many seconds for the
        running ones to stop, so that it says what happened: cancelled, CancelTooLateError
        when a phase ended otherwise first (the request stays in the trail), or still
        requested after the wait. NothingToCancelError when it came too late altogether.
        """
        landed = self.ledger.cancel_plan(plan_id, actor, note)
        for job_id, outcome in landed.outcomes.items():
            self._deliver_cancel(job_id, outcome)
        return self._settle_plan_cancel(landed, wait) if wait > 0 else landed

    def _settle_plan_cancel(self, landed: PlanCancel, wait: float) -> PlanCancel:
        """The cancel's answer once its running jobs ended (or the wait is over)."""
        asked = [j for j, o in landed.outcomes.items() if o is CancelOutcome.requested]
        if not asked:
            return landed
        deadline = time.monotonic() + wait
        ends: dict[str, AsyncJob | None] = {}
        while True:
            for job_id in asked:
                job = self.ledger.jobs.get(job_id)
                if job is None or job.is_terminal:
                    ends[job_id] = job
            if len(ends) == len(asked):
                break
            if time.monotonic() >= deadline:
                return landed  # still stopping: "cancel requested", follow its job
            time.sleep(0.05)
        for job in ends.values():
            if job is not None and job.status is not AsyncJobStatus.cancelled:
                raise CancelTooLateError(landed.plan.plan_id, job)
        outcomes = {**landed.outcomes, **dict.fromkeys(asked, CancelOutcome.cancelled)}
        plans = self.ledger.plans
        after = plans.get(landed.plan.plan_id) if plans is not None else None
        return PlanCancel(after or landed.plan, outcomes)

    # -- retry -------------------------------------------------------------------------
    def retry(self, job_id: object, *, ready: Ready = ready_now) -> Retried:
        """Queue the next attempt of a failed or cancelled job, then publish it.

        A NEW row (attempt + 1, `retry_of` = job_id, the checkpoint carried), then its
        message. InvalidIdError, JobNotFoundError, InvalidJobTransitionError (it did not
        fail or cancel), PlanGoneError (its plan is gone), AlreadyRetriedError (an
        InvalidPlanTransitionError: it was retried already or its plan moved on): nothing
        written in each case.
        """
        job = self.find(job_id)
        if job.status not in (AsyncJobStatus.failed, AsyncJobStatus.cancelled):
            raise InvalidJobTransitionError(job.job_id, job.status.value, "retried")
        plans = self.ledger.plans
        if plans is not None and plans.get(job.plan_id) is None:  # checked again in the retry
            raise PlanGoneError(job.job_id, job.plan_id)
        ready()
        try:
            new, published = self._retry_and_publish(job)
        except PlanNotFoundError:
            raise PlanGoneError(job.job_id, job.plan_id) from None
        if new is None:
            plan = plans.get(job.plan_id) if plans is not None else None
            if plan is None:
                raise PlanGoneError(job.job_id, job.plan_id)
            wanted = plan_label(job.phase, PlanStatus.queued)
            raise AlreadyRetriedError(job.job_id, plan.plan_id, plan.label, wanted)
        return Retried(self._as_stored(new.job_id), published)

    def retry_ended(self, job: AsyncJob) -> AsyncJob | None:
        """The retry policy: a new attempt of a job that just failed, if attempts remain."""
        if job.attempt >= self.config.max_attempts:
            return None
        stored = self.ledger.jobs.get(job.job_id)
        if stored is None:
            return None
        return self._retry_and_publish(stored)[0]

    def _retry_and_publish(self, job: AsyncJob) -> tuple[AsyncJob | None, bool]:
        """The one retry-then-publish: (new row or None, published).

        The new row is durable before its message; a failed publish is left to the
        dispatch relay. None when a retry exists already or the plan moved on.
        """
        new = self.ledger.retry(job)
        if new is not None:  # on the ended job's span, when it queues its own retry
            tracing.current_event(tracing.EVENT_RETRY, {tracing.NEW_JOB_ID: new.job_id})
        if new is None:
            return None, False
        return new, self.ledger.parts.publish_committed([new])

    # -- sweeps ------------------------------------------------------------------------
    def detect_stuck(self) -> StuckReport:
        """Fail running jobs whose heartbeat expired; retry them if the policy says so.

        Fair to the holders: nothing expires until the ledger has been available for a
        job_timeout (`JobLedger.expire_stuck`); this process's own outages count too.
        Plans nobody approved within their approval timeout end in the same sweep.
        """
        report = StuckReport()
        expired = self.ledger.expire_stuck(
            self.config.job_timeout,
            sweep_interval=self.sweep_interval,
            recovered_ago=self.outages.recovered_ago(),
        )
        metrics.stuck_detected(len(expired))
        for job in expired:
            stored = self.ledger.jobs.get(job.job_id)
            # the row as the sweep left it (failed); the listed copy if it is already gone
            report.failed.append(stored if stored is not None else job)
            if stored is not None:
                new = self.retry_ended(stored)
                if new is not None:
                    report.retried[job.job_id] = new.job_id
        self._expire_gates()
        return report

    def _expire_gates(self) -> None:
        if self.ledger.plans is None:
            return
        try:
            expired = self.ledger.pipeline.expire_waiting()
        except Exception:  # one sweep's failure must not stop the job sweep's report
            logger.exception("could not expire plans waiting past their approval timeout")
            return
        if expired:
            logger.info("%d plan(s) expired at their approval gate: %s", len(expired), expired)

    def cleanup(self) -> int:
        """Delete terminal rows older than job_ttl, in bounded batches; how many."""
        return self.ledger.cleanup(self.config.job_ttl)

    def relay(self, unsent_grace: float | None = None) -> list[str]:
        """Publish queued rows whose message was never sent or may be lost; fail hopeless ones.

        Through the ledger's own publish (`enqueue`); a failure propagates: the rows stay
        due for the next pass.
        """
        publish = self.ledger.enqueue
        if publish is None:
            return []
        grace = self.config.dispatch_grace if unsent_grace is None else unsent_grace
        due: list[AsyncJob] = []
        for job in self.ledger.dispatch_due(grace, self.config.dispatch_grace):
            if job.dispatch_count >= self.config.max_dispatches:
                self.ledger.fail_undeliverable(job, job.dispatch_count)
                continue
            due.append(job)
        if due:
            publish(due)
        metrics.relayed(len(due))
        return [job.job_id for job in due]


__all__ = [
    "BroadcastCancel",
    "CancelLocal",
    "JobService",
    "Publish",
    "Ready",
    "Retried",
    "ready_now",
]
