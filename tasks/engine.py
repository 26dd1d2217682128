"""AsyncWorker: the engine every worker process uses to run a job exactly once."""

from __future__ import annotations

import dataclasses
import logging
import os
import secrets
import socket
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from enum import StrEnum
from typing import Any, NamedTuple

from opentelemetry.context import Context
from opentelemetry.trace import Span

from planq.domain.bounds import MAX_WORKER_ID_LENGTH
from planq.domain.cancellation import CancellationToken
from planq.domain.clock import utcnow
from planq.domain.config import DEFAULT_STUCK_CHECK_INTERVAL, AsyncWorkerConfig
from planq.domain.errors import (
    InvalidJobTransitionError,
    JobNotFoundError,
    LedgerRejectedError,
    LedgerUnavailableError,
)
from planq.domain.health import WorkerHealthReport
from planq.domain.jobs import AsyncJob, AsyncJobStatus, check_worker_id
from planq.domain.ledger import JobLedger, StuckReport
from planq.domain.outage import PROCESS_OUTAGES, OutageMonitor
from planq.domain.pipeline import EventKind
from planq.domain.plans import Plan, PlanPhase
from planq.domain.ports import JobStore, PlanStore
from planq.domain.redaction import BUILTIN, Redactor, describe_exception
from planq.domain.tracebacks import describe_traceback
from planq.domain.webhooks import NO_WEBHOOKS, WebhookPolicy
from planq.tasks import metrics, tracing
from planq.tasks.executors import Executor, ExecutorRegistry, JobContext, resolve
from planq.tasks.group_commit import GroupCommitter
from planq.tasks.job_service import BroadcastCancel, JobService, Publish
from planq.tasks.store_poller import StorePoller
from planq.tasks.tracker import LOST_CLAIM, WORKER_SHUTDOWN, JobTracker

logger = logging.getLogger("planq.worker")


class PickupResult(StrEnum):
    """What pickup_and_execute did with a job."""

    skipped = "skipped"  #: another delivery owns it, or it already ended
    succeeded = "succeeded"
    failed = "failed"
    cancelled = "cancelled"
    interrupted = "interrupted"  #: warm shutdown stopped it; its checkpoint is kept
    finished_elsewhere = "finished_elsewhere"  #: something else wrote its terminal state


@dataclass(frozen=True)
class Verdict:
    """What running the executor decided: the status to write, the error (and traceback) kept."""

    status: AsyncJobStatus
    error: str | None
    result: PickupResult
    #: the executor's traceback, redacted and bounded (an executor's exception only)
    traceback: str | None = None


class JobReport(NamedTuple):
    """What a run did (the Celery task body reports it): the outcome and the failure written."""

    result: PickupResult
    #: the row's error (None unless failed), as the ledger keeps it
    error: str | None = None
    #: the row's traceback (None unless the executor raised), as the ledger keeps it
    traceback: str | None = None


def default_node_name() -> str:
    """The node name of a process that runs no Celery worker (planq@<host>)."""
    return f"planq@{socket.gethostname()}"


def standalone_worker_id() -> str:
    """The spec's `worker-…` id of an AsyncWorker built without one (no Celery node).

    `worker-<host>-<pid>-<8 hex>`: unique per engine, not only per process, since claims,
    heartbeats and finishes are fenced by it and two standalone engines may share a process.
    Runtime-built (Celery) workers are given `<node>/<pid>` instead (`worker_id_for`).
    """
    suffix = f"-{os.getpid()}-{secrets.token_hex(4)}"
    return f"worker-{socket.gethostname()[: MAX_WORKER_ID_LENGTH - len(suffix) - 7]}{suffix}"


def worker_id_for(pid: int, node: str | None = None) -> str:
    """The worker id a process claims jobs under: the Celery node name, '/', its pid.

    The node name is what Flower and run owners show; the pid keeps each prefork child's
    claim its own, since fencing compares worker ids per process. An over-long node name
    is cut so the id fits the ledger's column, pid kept.
    """
    suffix = f"/{pid}"
    return f"{(node or default_node_name())[: MAX_WORKER_ID_LENGTH - len(suffix)]}{suffix}"


class AsyncWorker:
    """Claims, runs and finishes jobs, and keeps the counters (the spec's AsyncWorker).

    A job runner: claim, execute, finish, the tracker's heartbeat, the retry policy. It
    does not know Celery, and it is built only where jobs run. The operator's actions are
    `JobService`'s (tasks/job_service.py); the spec's forms here (`cancel_job`,
    `detect_stuck_jobs`, `cleanup_expired_jobs`) call that one door. Without `jobs` it
    builds its own over these stores (the spec's standalone form), claiming as the
    spec's `worker-…` unless given a `worker_id` (the Celery runtime passes `<node>/<pid>`).

    Its claims and finishes go through `commits`, the process's group commit
    (tasks/group_commit.py): `group_commit_ms` (default: the config's) is the window, 0 off;
    the Celery runtime passes 0 where a process holds one job at a time (prefork, solo).
    """

    def __init__(
        self,
        config: AsyncWorkerConfig,
        job_store: JobStore,
        executor: Executor | str | ExecutorRegistry = "walk_steps",
        plan_store: PlanStore | None = None,
        *,
        publish: Publish | None = None,
        broadcast_cancel: BroadcastCancel | None = None,
        worker_id: str | None = None,
        redactor: Redactor = BUILTIN,
        sweep_interval: float = DEFAULT_STUCK_CHECK_INTERVAL,
        outages: OutageMonitor | None = None,
        webhooks: WebhookPolicy = NO_WEBHOOKS,
        jobs: JobService | None = None,
        group_commit_ms: float | None = None,
    ) -> None:
        if not isinstance(config, AsyncWorkerConfig):
            raise TypeError(f"config must be an AsyncWorkerConfig, got {type(config).__name__}")
        if not isinstance(job_store, JobStore):
            raise TypeError(f"job_store must be a JobStore, got {type(job_store).__name__}")
        self.config = config
        self.job_store = job_store
        self.plan_store = plan_store
        #: How every error this worker stores or reports becomes text (planq: from settings).
        self.redactor = redactor
        #: this process's outage monitor: every ledger write here reports into it
        self.outages = PROCESS_OUTAGES if outages is None else outages
        if jobs is None:  # the spec's standalone form: its own ledger door and job actions
            ledger = JobLedger(
                job_store,
                plan_store,
                redactor,
                outages=self.outages,
                enqueue=publish,
                on_gate_decided=metrics.gate_decided,
                webhooks=webhooks,
            )
            jobs = JobService(
                ledger,
                config,
                broadcast_cancel=broadcast_cancel,
                running_here=lambda job_id: self.tracker.cancel_local(job_id),
                outages=self.outages,
                sweep_interval=sweep_interval,
            )
        #: The job actions (cancel, retry, sweeps): the runner's retry policy uses them too.
        self.jobs = jobs
        #: the one door for this worker's job writes (they ride out an outage inside it)
        self.ledger = jobs.ledger
        self.executors = (
            executor if isinstance(executor, ExecutorRegistry) else _single(resolve(executor))
        )
        self.worker_id = worker_id or standalone_worker_id()
        self.health = WorkerHealthReport(self.worker_id)
        self.tracker = JobTracker(
            lambda ids: self.ledger.heartbeat(ids, self.worker_id),
            config.heartbeat_interval,
            self.outages,
            self.redactor,
        )
        self._poller = StorePoller(
            job_store, self.run_job, config.max_workers, config.poll_interval
        )
        self._active = 0
        self._active_lock = threading.Lock()
        window = config.group_commit_ms if group_commit_ms is None else group_commit_ms
        #: The group commit of this runner's claims and finishes (a batch per window).
        self.commits = GroupCommitter(
            self.ledger, window, active=self.active_jobs, slots=config.max_workers
        )

    def active_jobs(self) -> int:
        """How many jobs are inside run_job here now (claiming, running or finishing)."""
        return self._active

    def rename(self, worker_id: str) -> bool:
        """Claim jobs under worker_id from now on (the node name became known); False if busy.

        Refused while jobs run here: their claims, heartbeats and finishes are fenced by
        the id they were claimed under.
        """
        check_worker_id(worker_id)
        if self.tracker.in_flight():
            return False
        self.worker_id = worker_id
        self.health.worker_id = worker_id
        return True

    # -- one job ---------------------------------------------------------------------
    def pickup_and_execute(self, job: AsyncJob) -> PickupResult:
        """Claim by CAS, run the phase executor, write the one terminal state."""
        if not isinstance(job, AsyncJob):
            raise TypeError(f"expected an AsyncJob, got {type(job).__name__}")
        return self.run_job(job.job_id)

    def run_job(self, job_id: str) -> PickupResult:
        """Claim by id (no read first), run, finish; what happened."""
        return self.run_job_reporting(job_id).result

    def run_job_reporting(
        self,
        job_id: str,
        parent: Context | None = None,
        phase: str | None = None,
        queue: str | None = None,
    ) -> JobReport:
        """The Celery task body: run_job, plus the error and traceback it wrote.

        Two ledger round trips on PostgreSQL: the claim moves the job and its plan and
        returns both; the finish ends the job and moves the plan (error and traceback in
        the same statement). Each rides out an outage inside the ledger door. The error and
        traceback come back as the row keeps them, so the task reports them without a read.
        The whole run is the job's span (`tasks/tracing.py`), its statements child spans;
        parent is the message's trace context (the phase task's), None outside Celery.
        """
        with self._active_lock:
            self._active += 1
        try:
            with tracing.job_span(job_id, self.worker_id, parent, phase, queue) as span:
                report, status = self._run_traced(job_id, span)
                tracing.job_ended(span, report.result.value, status, report.error)
                return report
        finally:
            with self._active_lock:
                self._active -= 1

    def _run_traced(self, job_id: str, span: Span) -> tuple[JobReport, str | None]:
        """run_job_reporting's body: the report, and the status written (None: nothing)."""
        with _statement("claim", job_id):
            claimed = self.commits.claim(job_id, self.worker_id)
        if claimed is None:
            logger.info(
                "job %s: not claimable (unknown, owned by another delivery, or ended)", job_id
            )
            return JobReport(PickupResult.skipped), None
        job, plan = claimed
        tracing.describe_job(span, job.plan_id, job.phase.value, job.attempt, job.retry_of)
        started = job.started_at or utcnow()
        metrics.job_claimed(job.phase.value, (started - job.created_at).total_seconds())
        pipeline = plan is not None and plan.pipeline_state is not None
        try:
            if pipeline:
                self._record_started(job)
            token = self.tracker.track(job.job_id)
            try:
                verdict = self._run_executor(job, token, plan)
            finally:
                self.tracker.untrack(job.job_id)
            with _statement("finish", job_id):
                verdict, wrote = self._finish(job, verdict, pipeline)
        finally:
            metrics.job_left(job.phase.value)
        if not wrote:
            logger.info("job %s: no longer ours (ended or taken over); nothing written", job_id)
            return JobReport(PickupResult.finished_elsewhere), None
        self._count(verdict.result)
        observe_end(job, verdict.status, self.job_store)
        if verdict.status is AsyncJobStatus.failed:
            self.jobs.retry_ended(job)
        report = JobReport(
            verdict.result,
            self.ledger.redact_error(verdict.error),
            self.ledger.redact_traceback(verdict.traceback),
        )
        return report, verdict.status.value

    def _record_started(self, job: AsyncJob) -> None:
        """A pipeline plan's `started` event (one statement, pipeline plans only)."""
        try:
            self.ledger.pipeline.record(job.plan_id, EventKind.started, job.phase, job.job_id)
        except Exception:  # the trail is not worth failing the job for
            logger.exception("job %s: could not record its started event", job.job_id)

    def _finish(
        self, job: AsyncJob, verdict: Verdict, pipeline: bool = False
    ) -> tuple[Verdict, bool]:
        """Write the verdict; a finish the ledger rejects ends the job failed, saying so.

        The rejection (a constraint the row breaks) names the constraint only, never the
        SQL or its parameters; without this second write the row would stay running until
        the stuck sweep calls it "heartbeat expired", and the real cause would be lost.
        """

        def write(outcome: Verdict) -> bool:
            return self.commits.finish(
                job,
                outcome.status,
                outcome.error,
                self.worker_id,
                traceback=outcome.traceback,
                pipeline=pipeline,
            )

        try:
            return verdict, write(verdict)
        except LedgerRejectedError as exc:
            logger.error("job %s: %s; ending it failed with that reason", job.job_id, exc)
            rejected = Verdict(AsyncJobStatus.failed, str(exc), PickupResult.failed)
            return rejected, write(rejected)

    def _run_executor(self, job: AsyncJob, token: CancellationToken, plan: Plan | None) -> Verdict:
        ctx = JobContext(
            job=job,
            token=token,
            plan=plan,
            logger=logging.LoggerAdapter(logger, {"job_id": job.job_id}),
            save=lambda progress, checkpoint: self._save(job.job_id, progress, checkpoint),
        )
        try:
            self.executors.for_phase(job.phase)(ctx)
        except Exception as exc:
            if token.is_cancelled:
                return self._stopped(token)
            error = describe_exception(exc, self.redactor)
            stack = describe_traceback(exc, self.redactor)
            # Once, with the stack: already redacted text (a handler without planq's filter,
            # or a tool that reads exc_info, never sees the raw exception), and bounded.
            logger.error("job %s failed: %s\n%s", job.job_id, error, stack.rstrip("\n"))
            return Verdict(AsyncJobStatus.failed, error, PickupResult.failed, stack)
        if token.is_cancelled:
            return self._stopped(token)
        return Verdict(AsyncJobStatus.succeeded, None, PickupResult.succeeded)

    @staticmethod
    def _stopped(token: CancellationToken) -> Verdict:
        if token.reason == WORKER_SHUTDOWN:
            return Verdict(
                AsyncJobStatus.failed, "interrupted: worker shutdown", PickupResult.interrupted
            )
        return Verdict(AsyncJobStatus.cancelled, None, PickupResult.cancelled)

    def _save(self, job_id: str, progress: float | None, checkpoint: str | None) -> None:
        """One fenced write; a refused one means the job is no longer ours: stop it now."""
        with _statement("progress", job_id):
            wrote = self.ledger.save_progress(job_id, progress, checkpoint, self.worker_id)
        if not wrote and self.tracker.cancel_local(job_id, LOST_CLAIM):
            logger.info("job %s: no longer running under %s; stopping", job_id, self.worker_id)

    def _count(self, result: PickupResult) -> None:
        if result is PickupResult.succeeded:
            self.health.record_completed()
        elif result is PickupResult.cancelled:
            self.health.record_cancelled()
        else:
            self.health.record_failed()

    # -- the spec's operator forms: one door each, JobService's ------------------------
    def cancel_job(self, job_id: str, actor: str | None = None, note: str | None = None) -> bool:
        """Cancel a job (`JobService.cancel`); False if it is unknown or had ended."""
        try:
            self.jobs.cancel(job_id, actor, note)
        except (JobNotFoundError, InvalidJobTransitionError):
            return False
        return True

    def detect_stuck_jobs(self) -> StuckReport:
        """Fail running jobs whose heartbeat expired, retrying by policy (`JobService`)."""
        return self.jobs.detect_stuck()

    def cleanup_expired_jobs(self) -> int:
        """Delete terminal rows older than job_ttl, in bounded batches (`JobService`)."""
        return self.jobs.cleanup()

    def health_report(self) -> dict[str, Any]:
        """Counters, identity and configuration, for operators."""
        report = self.health.as_dict()
        report["config"] = self.config.as_dict()
        report["in_flight"] = self.tracker.in_flight()
        report["running"] = self.is_running
        report["group_commit"] = {
            "window_ms": self.commits.window * 1000.0,
            **dataclasses.asdict(self.commits.stats),
        }
        return report

    # -- the spec's own loop: poll this worker's store, run on max_workers threads -------
    @property
    def is_running(self) -> bool:
        """Whether the poll loop is started."""
        return self._poller.is_running

    def start(self) -> None:
        """Run the queued jobs of this worker's own store on max_workers threads.

        No broker is involved (on a Celery fleet the broker delivers instead; see
        tasks/embedded.py for an in-process Celery worker). A second start does nothing.
        """
        self._poller.start()

    def stop(self, timeout: float = 30.0) -> None:
        """Trip every in-flight token (warm shutdown), wait for those jobs, stop the pool."""
        if not self._poller.is_running:
            return
        self.tracker.cancel_all(WORKER_SHUTDOWN)
        self._poller.stop(timeout)

    def close(self) -> None:
        """Send the pending claims and finishes, stop the heartbeat thread."""
        self.commits.close()
        self.tracker.close()


def observe_end(job: AsyncJob, status: AsyncJobStatus, jobs: JobStore) -> None:
    """Metrics for a job this process ended: a runner's, or a terminate-revoke's."""
    now = utcnow()
    started = job.started_at or now
    metrics.job_finished(job.phase.value, status.value, (now - started).total_seconds())
    if status is AsyncJobStatus.cancelled:
        row = jobs.get(job.job_id)
        if row is not None and row.cancel_requested_at is not None:
            metrics.cancel_latency((now - row.cancel_requested_at).total_seconds())


@contextmanager
def _statement(statement: str, job_id: str) -> Iterator[None]:
    """One ledger statement of a job: its span, and a counted failure if it fails."""
    with tracing.ledger_span(statement, job_id):
        try:
            yield
        except LedgerUnavailableError:
            metrics.ledger_error(statement, "unavailable")
            raise
        except LedgerRejectedError:
            metrics.ledger_error(statement, "rejected")
            raise
        except Exception:
            metrics.ledger_error(statement, "other")
            raise


def _single(executor: Executor) -> ExecutorRegistry:
    """A registry that runs the same executor for every phase."""
    registry = ExecutorRegistry()
    for phase in PlanPhase:
        registry.register(phase, executor)
    return registry
