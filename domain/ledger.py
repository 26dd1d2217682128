"""Job transitions that keep the plan in step, each in one ledger transaction."""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from datetime import timedelta
from functools import partial
from typing import TypeVar

from planq.domain.availability import JOB_SWEEP, allowed_gap
from planq.domain.batches import Outcome
from planq.domain.bounds import MAX_DURATION_SECONDS, check_number
from planq.domain.clock import utcnow
from planq.domain.config import DEFAULT_STUCK_CHECK_INTERVAL
from planq.domain.errors import (
    ConcurrentUpdateError,
    DuplicateJobError,
    InvalidPlanTransitionError,
    LedgerUnavailableError,
    NothingToCancelError,
    PlanNotFoundError,
    PlanqError,
)
from planq.domain.jobs import AsyncJob, AsyncJobStatus, redact_error, redact_error_traceback
from planq.domain.outage import PROCESS_OUTAGES, OutageMonitor, ride_out_outage
from planq.domain.pipeline import EventKind, check_actor
from planq.domain.pipeline_ledger import PipelineLedger
from planq.domain.plans import Plan, PlanPhase, PlanStatus
from planq.domain.ports import (
    CancelOutcome,
    Claimed,
    Enqueue,
    Finish,
    GateObserver,
    JobStore,
    LedgerParts,
    PlanStore,
    one_ledger,
)
from planq.domain.redaction import BUILTIN, Redactor
from planq.domain.transitions import PLAN_STATUS_FOR_JOB
from planq.domain.webhooks import NO_WEBHOOKS, WebhookPolicy

logger = logging.getLogger("planq.ledger")
_T = TypeVar("_T")
STUCK_ERROR = "heartbeat expired"
NEVER_PICKED_UP_ERROR = "never picked up after {n} dispatches"
_PLAN_RETRIES = 5


@dataclass
class StuckReport:
    """What one stuck-job sweep did: the spec's list of the jobs it failed, and their retries.

    Iterating it yields those jobs as the sweep left them (failed); len() counts them and an
    empty sweep is falsy, so a caller of the spec's `detect_stuck_jobs()` reads it as the
    list it expects. `expired` (their ids) and `retried` are planq's richer form.
    """

    failed: list[AsyncJob] = field(default_factory=list)
    retried: dict[str, str] = field(default_factory=dict)  #: old job id -> new job id

    @property
    def expired(self) -> list[str]:
        """The ids of the jobs this sweep failed, in the order it failed them."""
        return [job.job_id for job in self.failed]

    def __iter__(self) -> Iterator[AsyncJob]:
        return iter(self.failed)

    def __len__(self) -> int:
        return len(self.failed)


@dataclass(frozen=True)
class PlanCancel:
    """A whole-plan cancel that landed: the plan after it, and what it did to each live job."""

    plan: Plan
    outcomes: dict[str, CancelOutcome]

    @property
    def finished(self) -> bool:
        """Whether nothing is left running (no job was only asked to stop)."""
        return all(o is not CancelOutcome.requested for o in self.outcomes.values())


def _last_end(plan: Plan, jobs: list[AsyncJob]) -> str:
    """Why a cancel finds nothing: the pipeline's state and the plan's last job's end."""
    state = plan.pipeline_state.value if plan.pipeline_state else "none"
    if not jobs:
        return f"pipeline {state}, no job"
    last = max(jobs, key=lambda j: (j.created_at, j.job_id))
    if not last.is_terminal:  # live, but already asked to stop by an earlier cancel
        return f"pipeline {state}; its {last.phase.value} job {last.job_id} is already stopping"
    at = last.finished_at.isoformat() if last.finished_at else "?"
    return (
        f"pipeline {state}; its last job, {last.phase.value} {last.job_id}, "
        f"ended {last.status.value} at {at}"
    )


def _own_copy(exc: LedgerUnavailableError) -> LedgerUnavailableError:
    """One job's own copy of an outage error (each waiting thread raises its own)."""
    copy = LedgerUnavailableError(str(exc))
    copy.__cause__ = exc.__cause__
    return copy


class JobLedger:
    """The one place that moves jobs, and their plans with them.

    The job path's writes (claim, progress, finish) ride out a ledger outage here, inside
    the door (`domain/outage.py`: retried at most a second apart for 120 s, reported to the
    process's one monitor), so no caller can forget to: a job that has done its work does
    not fail for a database restart. Anything that is not an outage fails at once.
    """

    def __init__(
        self,
        jobs: JobStore,
        plans: PlanStore | None = None,
        redactor: Redactor = BUILTIN,
        *,
        outages: OutageMonitor | None = None,
        enqueue: Enqueue | None = None,
        on_gate_decided: GateObserver | None = None,
        webhooks: WebhookPolicy = NO_WEBHOOKS,
    ) -> None:
        #: The stores and hooks this ledger and its pipeline half share (domain/ports.py).
        self.parts = LedgerParts(jobs, plans, redactor, enqueue, on_gate_decided, webhooks)
        #: This process's outage monitor: the job path's writes report into it.
        self.outages = PROCESS_OUTAGES if outages is None else outages
        #: The pipeline's writes (run, advance, approve, reject, stop), in this ledger.
        self.pipeline = PipelineLedger(self.parts)

    @property
    def jobs(self) -> JobStore:
        """The job store this ledger writes in."""
        return self.parts.jobs

    @property
    def plans(self) -> PlanStore | None:
        """The plan store (None: jobs without plans, the spec's bare form)."""
        return self.parts.plans

    @property
    def redactor(self) -> Redactor:
        """Every error this ledger writes passes through it (planq's: built from settings)."""
        return self.parts.redactor

    @property
    def enqueue(self) -> Enqueue | None:
        """Publishes a job a pipeline queued, after its transaction commits."""
        return self.parts.enqueue

    @enqueue.setter
    def enqueue(self, enqueue: Enqueue | None) -> None:
        self.parts.enqueue = enqueue

    @property
    def on_gate_decided(self) -> GateObserver | None:
        """Told of every wait at an approval gate that ended (the process's metrics)."""
        return self.parts.on_gate_decided

    @property
    def webhooks(self) -> WebhookPolicy:
        """Who hears of a pipeline's events (domain/webhooks.py)."""
        return self.parts.webhooks

    @webhooks.setter
    def webhooks(self, policy: WebhookPolicy) -> None:
        self.parts.webhooks = policy

    def redact_error(self, error: str | None) -> str | None:
        """An error as this ledger stores it: redacted, printable, bounded."""
        return redact_error(error, self.redactor)

    def redact_traceback(self, text: str | None) -> str | None:
        """A traceback as this ledger stores it: redacted as a whole, then bounded."""
        return redact_error_traceback(text, self.redactor)

    # -- plan bookkeeping -------------------------------------------------------------
    def _follow(self, plan_id: str, phase: PlanPhase, status: AsyncJobStatus) -> Plan | None:
        """Move the plan to match a job outcome (optimistic, retried on a concurrent save).

        Returns the plan as it now stands (None without a plan store or plan).
        """
        if self.plans is None:
            return None
        for _ in range(_PLAN_RETRIES):
            plan = self.plans.get(plan_id)
            if plan is None:
                return None
            try:
                if not plan.follow_job(phase, PLAN_STATUS_FOR_JOB[status]):
                    return plan
            except InvalidPlanTransitionError as exc:
                # The plan moved on (e.g. an operator re-queued the phase): the job's own
                # terminal write must still land, so the plan is left as it is.
                logger.warning("plan %s not moved for its %s job: %s", plan_id, phase, exc)
                return plan
            try:
                self.plans.update(plan)
                return plan
            except ConcurrentUpdateError:
                continue
        raise ConcurrentUpdateError(f"plan {plan_id} kept changing while following its job")

    # -- transitions --------------------------------------------------------------------
    def queue(self, jobs: list[AsyncJob]) -> list[Plan] | None:
        """Queue new jobs and move their plans into `<phase>/QUEUED`; the plans, or None.

        One ledger (job and plan stores share it): ONE compare-and-set statement, None if
        any plan is missing or not ready (nothing written). Two stores (the spec's
        composition): each plan moves through the plan store (a refused move raises its
        typed error), then each job is added, inside the plan store's transaction.
        """
        if self.plans is None or one_ledger(self.jobs, self.plans):
            return self.jobs.queue(jobs, utcnow())
        return self._queue_in_two_stores(jobs)

    def _queue_in_two_stores(self, jobs: list[AsyncJob]) -> list[Plan]:
        """Two stores: plans first, then jobs, in the plan store's transaction.

        Only a failure of the plan store's own commit, after the jobs committed, could leave
        a job without its plan move (one ledger has one statement instead).
        """
        assert self.plans is not None
        moved: list[Plan] = []
        with self.plans.transaction():
            for job in jobs:
                plan = self.plans.get(job.plan_id)
                if plan is None:
                    raise PlanNotFoundError(job.plan_id)
                plan.queue_phase(job.phase)  # InvalidPlanTransitionError, nothing written
                self.plans.update(plan)  # optimistic: a concurrent queue of it loses here
                moved.append(plan)
            with self.jobs.transaction():
                for job in jobs:
                    self.jobs.add(job)
        return moved

    def save_progress(
        self, job_id: str, progress: float | None, checkpoint: str | None, worker_id: str
    ) -> bool:
        """One fenced progress/checkpoint write; False: the job is no longer worker_id's."""
        return ride_out_outage(
            lambda: self.jobs.save_progress(job_id, progress, checkpoint, worker_id),
            f"progress {job_id}",
            monitor=self.outages,
        )

    def claim(self, job_id: str, worker_id: str) -> Claimed | None:
        """Take a queued job for worker_id, and its plan; None if it is not to be run here.

        One statement on PostgreSQL. None: another delivery owns it, it ended, it was
        cancelled before it started, or it is unknown.
        """
        return ride_out_outage(
            lambda: self.jobs.claim(
                job_id, worker_id, utcnow(), follow_plan=self.plans is not None
            ),
            f"claim {job_id}",
            monitor=self.outages,
        )

    def finish(
        self,
        job: AsyncJob,
        status: AsyncJobStatus,
        error: str | None = None,
        worker_id: str | None = None,
        *,
        traceback: str | None = None,
        pipeline: bool = False,
    ) -> bool:
        """End a running job (held by worker_id, if given); False if it is not ours any more.

        Nothing is written twice: a job that already ended, or that a sweep took from this
        worker, is left as it is. A failed job's error and traceback are redacted and
        bounded here and written by the same one statement that ends it. `pipeline` (the
        claim saw one on the plan): the finish and the pipeline's next step (the next
        phase's job, the gate, its events) commit in one transaction, then the new job is
        published.
        """
        stored_error, stored_traceback = self.redact_error(error), self.redact_traceback(traceback)
        if pipeline and self.plans is not None and one_ledger(self.jobs, self.plans):
            return ride_out_outage(
                lambda: self.pipeline.finish(
                    job, status, stored_error, worker_id, stored_traceback
                ),
                f"finish {job.job_id}",
                monitor=self.outages,
            )
        return ride_out_outage(
            lambda: self.jobs.finish(
                job.job_id,
                status,
                utcnow(),
                stored_error,
                worker_id=worker_id,
                follow_plan=self.plans is not None,
                traceback=stored_traceback,
            ),
            f"finish {job.job_id}",
            monitor=self.outages,
        )

    # -- group commit: many jobs' claims or finishes in one write -------------------------
    def claim_many(self, job_ids: Sequence[str], worker_id: str) -> list[Outcome[Claimed | None]]:
        """Claim many jobs for worker_id at once; per id, in order, what `claim` answers alone.

        One statement on PostgreSQL, ridden out through an outage as the single claim is
        (when the budget is spent, each job gets its own LedgerUnavailableError). If the
        batch fails any other way (a row the ledger rejects, a bug), each job is claimed
        again alone, so one bad row fails only its own job.
        """
        ids = list(job_ids)
        if not ids:
            return []
        follow = self.plans is not None
        return self._batch(
            lambda: [
                Outcome(c)
                for c in self.jobs.claim_many(ids, worker_id, utcnow(), follow_plan=follow)
            ],
            [partial(self.claim, job_id, worker_id) for job_id in ids],
            f"claim of {len(ids)} jobs",
        )

    def finish_many(self, finishes: Sequence[Finish]) -> list[Outcome[bool]]:
        """End many running jobs at once; per item, in order, what `finish` answers alone.

        Each row is fenced on its own worker_id, its error and traceback redacted and
        bounded as the single finish does. Not for a pipeline's plan (its finish queues the
        next phase: `finish(pipeline=True)`, one job at a time). Failures as `claim_many`:
        an outage is ridden out for the batch; anything else retries each job alone.
        """
        items = [
            f._replace(
                error=self.redact_error(f.error), traceback=self.redact_traceback(f.traceback)
            )
            for f in finishes
        ]
        if not items:
            return []
        follow = self.plans is not None

        def batch() -> list[Outcome[bool]]:
            won = self.jobs.finish_many(items, utcnow(), follow_plan=follow)
            return [Outcome(f.job_id in won) for f in items]

        def alone(f: Finish) -> bool:
            return ride_out_outage(
                lambda: self.jobs.finish(
                    f.job_id,
                    f.status,
                    utcnow(),
                    f.error,
                    worker_id=f.worker_id,
                    follow_plan=follow,
                    traceback=f.traceback,
                ),
                f"finish {f.job_id}",
                monitor=self.outages,
            )

        return self._batch(
            batch, [partial(alone, f) for f in items], f"finish of {len(items)} jobs"
        )

    def _batch(
        self,
        batch: Callable[[], list[Outcome[_T]]],
        singles: list[Callable[[], _T]],
        what: str,
    ) -> list[Outcome[_T]]:
        """Run batch (outages ridden out); on any other failure, each single on its own."""
        try:
            return ride_out_outage(batch, what, monitor=self.outages)
        except LedgerUnavailableError as exc:  # the budget is spent: every job learns it
            return [Outcome.failed(_own_copy(exc)) for _ in singles]
        except Exception as exc:  # one row's fault must not fail the others: one by one
            logger.warning("%s failed (%s); writing each job alone", what, exc)
        outcomes: list[Outcome[_T]] = []
        for single in singles:
            try:
                outcomes.append(Outcome(single()))
            except Exception as exc:
                outcomes.append(Outcome.failed(exc))
        return outcomes

    def cancel(
        self, job_id: str, actor: str | None = None, note: str | None = None
    ) -> CancelOutcome:
        """Record a cancel durably; a queued job ends at once, a running one is asked to stop.

        On a pipeline's plan the request is an event too (who asked: `actor`), in the same
        transaction.
        """
        with self.jobs.transaction():  # the job store checks job_id, at its port
            outcome = self.jobs.cancel(job_id, utcnow())
            if outcome is CancelOutcome.cancelled:
                job = self.jobs.get(job_id)
                assert job is not None
                self._ended(job, AsyncJobStatus.cancelled, None, actor, note)
            elif outcome is CancelOutcome.requested and actor and self.plans is not None:
                job = self.jobs.get(job_id)  # only a request someone named is read back
                assert job is not None
                self._audit_cancel(self.plans.get(job.plan_id), job, actor, note)
            return outcome

    def _ended(
        self,
        job: AsyncJob,
        status: AsyncJobStatus,
        error: str | None,
        actor: str | None = None,
        note: str | None = None,
    ) -> None:
        """A job ended outside its worker's finish: its plan follows, its trail records it.

        A pipeline plan's trail gets who asked (a cancel) and the end, in the caller's
        transaction.
        """
        plan = self._follow(job.plan_id, job.phase, status)
        if status is AsyncJobStatus.cancelled:
            self._audit_cancel(plan, job, actor, note)
        self.pipeline.ended(plan, job, status, error)

    def _audit_cancel(
        self, plan: Plan | None, job: AsyncJob, actor: str | None, note: str | None = None
    ) -> None:
        if actor is not None and plan is not None and plan.pipeline_state is not None:
            self.pipeline.record(
                plan.plan_id,
                EventKind.cancel_requested,
                job.phase,
                job.job_id,
                actor,
                note,
                plan=plan,
            )

    def cancel_plan(
        self, plan_id: str, actor: str | None = None, note: str | None = None
    ) -> PlanCancel:
        """Stop a plan's pipeline and cancel its live jobs, all in one transaction.

        Whatever it races (an approval queueing the next phase, a worker claiming or
        finishing it, another cancel), the plan's compare-and-set orders them: a cancel that
        commits second reads the plan and its jobs again. So the answer is what happened: a
        queued job cancelled, a running one asked to stop (its token, by the caller), or
        NothingToCancelError (too late: the pipeline ended, nothing is live, with the last
        job's end); a second cancel while the first is still stopping a job is refused too,
        so each landed cancel is recorded once, with its actor.
        """
        if self.plans is None:
            raise PlanNotFoundError(plan_id)
        who = check_actor(actor)
        for _ in range(_PLAN_RETRIES):
            try:
                with self.jobs.transaction():
                    plan = self.plans.get(plan_id)
                    if plan is None:
                        raise PlanNotFoundError(plan_id)
                    jobs = self.jobs.list_by_plan(plan.plan_id)
                    live = [j for j in jobs if not j.is_terminal]
                    pending = [j for j in live if j.cancel_requested_at is None]
                    if not pending and not self.pipeline.active(plan):
                        raise NothingToCancelError(plan.plan_id, _last_end(plan, jobs))
                    self.pipeline.stop(plan, who, note)
                    now = utcnow()
                    outcomes = {j.job_id: self.jobs.cancel(j.job_id, now) for j in pending}
                    for job in pending:
                        if outcomes[job.job_id] is CancelOutcome.cancelled:
                            self._ended(job, AsyncJobStatus.cancelled, None)
                    stopped = self.plans.get(plan.plan_id)
                    assert stopped is not None
                return PlanCancel(stopped, outcomes)
            except ConcurrentUpdateError:
                continue  # an approval or a finish moved it meanwhile: read it all again
        raise ConcurrentUpdateError(f"plan {plan_id} kept changing while it was cancelled")

    def cancel_queued(self, job_id: str, actor: str | None = None) -> bool:
        """End the job if it is still queued (its plan with it); whether this call ended it.

        What a node that does not run the job does with a revoke nobody recorded: one
        statement, and one node's compare-and-set wins.
        """
        with self.jobs.transaction():
            if not self.jobs.cancel_queued(job_id, utcnow()):
                return False
            job = self.jobs.get(job_id)
            assert job is not None
            self._ended(job, AsyncJobStatus.cancelled, None, actor)
            return True

    def expire_stuck(
        self,
        job_timeout: float,
        limit: int = 100,
        sweep_interval: float = DEFAULT_STUCK_CHECK_INTERVAL,
        recovered_ago: float | None = None,
    ) -> list[AsyncJob]:
        """Fail running jobs whose holder had job_timeout to renew and did not; those won.

        A heartbeat older than job_timeout counts only once the ledger has been available
        for job_timeout (domain/availability.py): this sweep's sighting is recorded first,
        and while a gap, a server restart or this process's own outage (`recovered_ago`
        seconds ago) is younger than job_timeout, nothing expires. sweep_interval is the
        sweep's schedule (it says how long a gap between sightings may be).
        """
        timeout = check_number("job_timeout", job_timeout, 0.0, MAX_DURATION_SECONDS)
        seen = self.jobs.sight_ledger(JOB_SWEEP, allowed_gap(sweep_interval), recovered_ago)
        if not seen.available_for(timeout):
            logger.debug(
                "ledger available since %s: stuck detection holds off %.1fs more",
                seen.available_since,
                seen.waits(timeout),
            )
            return []
        now = utcnow()
        cutoff = now - timedelta(seconds=timeout)
        expired: list[AsyncJob] = []
        for job in self.jobs.list_stuck(cutoff, limit):
            try:
                with self.jobs.transaction():
                    if self.jobs.expire(job.job_id, cutoff, now, STUCK_ERROR):
                        self._ended(job, AsyncJobStatus.failed, STUCK_ERROR)
                        expired.append(job)
            except PlanqError:  # one bad row must not stall the sweep for the others
                logger.exception("could not expire stuck job %s", job.job_id)
        return expired

    def fail_undeliverable(self, job: AsyncJob, dispatches: int) -> bool:
        """Fail a queued row that no worker picked up after `dispatches` publishes."""
        with self.jobs.transaction():
            error = NEVER_PICKED_UP_ERROR.format(n=dispatches)
            if not self.jobs.fail_queued(job.job_id, utcnow(), error):
                return False
            self._ended(job, AsyncJobStatus.failed, error)
            return True

    def retry(self, job: AsyncJob) -> AsyncJob | None:
        """Queue a NEW row for a failed or cancelled job (attempt + 1), carrying its checkpoint.

        Returns None if a retry of this job already exists (two sweepers, one retry), or
        if the plan has moved on from this job's failure (it was re-queued or completed).
        A job whose plan is gone is refused (PlanNotFoundError).
        """
        if job.status not in (AsyncJobStatus.failed, AsyncJobStatus.cancelled):
            raise ValueError(
                f"only a failed or cancelled job can be retried, {job.job_id} is {job.status.value}"
            )
        if self.plans is not None:
            plan = self.plans.get(job.plan_id)
            if plan is None:  # nothing to run it for: a retry would "succeed" doing nothing
                raise PlanNotFoundError(job.plan_id)
            if plan.phase is not job.phase or plan.status not in (
                PlanStatus.failed,
                PlanStatus.cancelled,
            ):
                return None
        new = AsyncJob(
            plan_id=job.plan_id,
            phase=job.phase,
            schema_version=job.schema_version,
            payload_json=job.payload_json,
            attempt=job.attempt + 1,
            retry_of=job.job_id,
            checkpoint_json=job.checkpoint_json,
        )
        try:
            with self.jobs.transaction():
                self.jobs.add(new)  # retry_of is unique: a second sweeper's insert loses here
                plan = self._follow(job.plan_id, job.phase, AsyncJobStatus.queued)
                if plan is not None and plan.pipeline_state is not None:
                    self.pipeline.record(plan.plan_id, EventKind.retried, job.phase, new.job_id)
        except DuplicateJobError:
            return None
        return new

    def cleanup(self, job_ttl: float, batch_size: int = 500) -> int:
        """Delete terminal rows older than job_ttl; how many."""
        ttl = check_number("job_ttl", job_ttl, 0.0, MAX_DURATION_SECONDS)
        cutoff = utcnow() - timedelta(seconds=ttl)
        deleted = self.jobs.delete_terminal_before(cutoff, batch_size)
        if self.plans is not None:  # the plans' audit trail ages out with the jobs
            self.plans.delete_events_before(cutoff, batch_size)
            self.plans.delete_deliveries_before(cutoff, batch_size)  # given up: as old
        return deleted

    def dispatch_due(
        self, unsent_grace: float, resend_grace: float, limit: int = 100
    ) -> list[AsyncJob]:
        """Queued rows never sent (older than unsent_grace), or sent over resend_grace ago."""
        unsent = check_number("unsent_grace", unsent_grace, 0.0, MAX_DURATION_SECONDS)
        resend = check_number("resend_grace", resend_grace, 0.0, MAX_DURATION_SECONDS)
        now = utcnow()
        return self.jobs.list_dispatch_due(
            now - timedelta(seconds=unsent), now - timedelta(seconds=resend), limit
        )

    def mark_dispatched(self, job_ids: list[str]) -> int:
        """Stamp the rows: their messages have been published (one statement)."""
        return self.jobs.mark_dispatched(job_ids, utcnow()) if job_ids else 0

    def heartbeat(self, job_ids: list[str], worker_id: str | None = None) -> set[str]:
        """One statement for all of a process's running jobs; the ids whose work must stop."""
        if not job_ids:
            return set()
        return self.jobs.heartbeat(job_ids, utcnow(), worker_id)
