"""A Celery result backend that reads the job ledger: `AsyncResult(job_id)` is the job's row.

The ledger stays the only store. Nothing is written here: the phase tasks ignore their
results, storing and forgetting are no-ops, and a state is always derived from the row
(queued -> PENDING, running -> STARTED, succeeded -> SUCCESS, failed -> FAILURE,
cancelled -> REVOKED); `AsyncResult.traceback` is the row's stored traceback. An id with
no row (unknown, purged by TTL cleanup, or a maintenance or runs task) is PENDING, as in
Celery. Configured by `worker_config.celery_config` as
`result_backend = "planq.tasks.result_backend:LedgerBackend"`.
"""

from __future__ import annotations

import logging
import time
from datetime import datetime
from typing import Any

from celery import states
from celery.backends.base import BaseBackend
from celery.exceptions import TimeoutError as CeleryTimeoutError

from planq.domain.errors import JobCancelledError, JobFailedError, PlanqError
from planq.domain.ids import is_ulid
from planq.domain.jobs import AsyncJob, AsyncJobStatus
from planq.domain.ports import JobStore
from planq.tasks.runtime import runtime_for

logger = logging.getLogger("planq.result_backend")

#: The Celery state each ledger status shows as.
STATE_FOR_STATUS: dict[AsyncJobStatus, str] = {
    AsyncJobStatus.queued: states.PENDING,
    AsyncJobStatus.running: states.STARTED,
    AsyncJobStatus.succeeded: states.SUCCESS,
    AsyncJobStatus.failed: states.FAILURE,
    AsyncJobStatus.cancelled: states.REVOKED,
}

#: The first poll of a wait comes this soon (then doubles up to the caller's interval), so
#: a short job is seen finished at once without hammering the ledger for a long one.
FIRST_POLL_INTERVAL = 0.05


def ledger_jobs(app: Any) -> JobStore:
    """The job store of app's process: the ONE place this module reaches the runtime."""
    return runtime_for(app).jobs


def read_job(app: Any, job_id: object) -> AsyncJob | None:
    """The job's row, or None for an id that is not a job (Celery's PENDING, not an error)."""
    if not is_ulid(job_id):
        return None
    return ledger_jobs(app).get(str(job_id).upper())


def _iso(value: datetime | None) -> str | None:
    return None if value is None else value.isoformat()


def job_info(job: AsyncJob) -> dict[str, Any]:
    """What `AsyncResult.info` shows: JSON-ready, timestamps as ISO strings."""
    return {
        "job_id": job.job_id,
        "plan_id": job.plan_id,
        "phase": job.phase.value,
        "status": job.status.value,
        "progress": job.progress,
        "checkpoint": job.checkpoint,
        "attempt": job.attempt,
        "retry_of": job.retry_of,
        "worker_id": job.worker_id,
        "error": job.error_message,
        "created_at": _iso(job.created_at),
        "started_at": _iso(job.started_at),
        "finished_at": _iso(job.finished_at),
        "last_heartbeat": _iso(job.last_heartbeat),
        "cancel_requested_at": _iso(job.cancel_requested_at),
    }


def task_meta(task_id: str, job: AsyncJob | None) -> dict[str, Any]:
    """Celery's meta for the row: the info dict, or the typed error for failed/cancelled.

    `traceback` is the row's: a failed job's executor traceback, redacted and bounded at
    the write (`AsyncResult.traceback`), None otherwise.

    The error instance itself is the result (never a dict for Celery to rebuild an
    exception from), so `get()` raises exactly JobFailedError / JobCancelledError.
    """
    meta: dict[str, Any] = {
        "task_id": task_id,
        "status": states.PENDING,
        "result": None,
        "traceback": None,
        "children": [],
        "date_done": None,
    }
    if job is None:
        return meta
    info = job_info(job)
    result: Any = info
    if job.status is AsyncJobStatus.failed:
        result = JobFailedError(job.job_id, job.error_message, info)
    elif job.status is AsyncJobStatus.cancelled:
        result = JobCancelledError(job.job_id, info)
    meta.update(
        task_id=job.job_id,
        status=STATE_FOR_STATUS[job.status],
        result=result,
        traceback=job.error_traceback,
        date_done=info["finished_at"],
        name=f"planq.{job.phase.value}_plan",
        worker=job.worker_id,
    )
    return meta


class LedgerBackend(BaseBackend):  # type: ignore[misc]
    """Read-only result backend over the job ledger (no second store, nothing written)."""

    #: Rows expire with planq's own TTL cleanup: no `celery.backend_cleanup` beat entry.
    supports_autoexpire = True
    supports_native_join = False
    persistent = True

    def __init__(self, app: Any, url: str | None = None, **kwargs: Any) -> None:
        super().__init__(app, url=url, **kwargs)
        # Holds only an LRU cache of finished metas (which has its own lock): one per app.
        self.thread_safe = True

    def as_uri(self, include_password: bool = False) -> str:
        """What the worker banner and Flower show: no database URL, so no password."""
        return "planq-ledger://"

    # -- reads ----------------------------------------------------------------------
    def _get_task_meta_for(self, task_id: str) -> dict[str, Any]:
        """The row as Celery meta (PENDING for an id with no row)."""
        return task_meta(task_id, read_job(self.app, task_id))

    def task_result_exists(self, task_id: str) -> bool:
        """Whether the ledger has the job, queued or not (Celery's default says PENDING = no)."""
        return read_job(self.app, task_id) is not None

    def exception_safe_to_retry(self, exc: Exception) -> bool:
        """A ledger outage is retryable (used when `result_backend_always_retry` is set)."""
        return isinstance(exc, PlanqError) and exc.retryable

    def wait_for(
        self,
        task_id: str,
        timeout: float | None = None,
        interval: float = 0.5,
        no_ack: bool = True,
        on_interval: Any = None,
    ) -> dict[str, Any]:
        """Poll the row until it is finished: 50 ms first, doubling up to interval.

        A ledger outage while waiting is ridden out until the deadline (then re-raised);
        the deadline is wall-clock, so a slow query does not stretch it.
        """
        self._ensure_not_eager()
        interval = max(float(interval), 0.01)
        deadline = None if timeout is None else time.monotonic() + timeout
        nap = min(FIRST_POLL_INTERVAL, interval)
        outage: PlanqError | None = None
        while True:
            try:
                meta: dict[str, Any] = self.get_task_meta(task_id)
                outage = None
            except PlanqError as exc:
                if not exc.retryable:
                    raise
                logger.warning("waiting for job %s: ledger unavailable (%s)", task_id, exc)
                outage = exc
            else:
                if meta["status"] in states.READY_STATES:
                    return meta
            if on_interval:
                on_interval()
            now = time.monotonic()
            if deadline is not None and now >= deadline:
                if outage is not None:
                    raise outage
                raise CeleryTimeoutError("The operation timed out.")
            time.sleep(nap if deadline is None else min(nap, deadline - now))
            nap = min(nap * 2, interval)

    # -- writes: none ---------------------------------------------------------------
    def store_result(
        self,
        task_id: str,
        result: Any,
        state: str,
        traceback: Any = None,
        request: Any = None,
        **kwargs: Any,
    ) -> Any:
        """No-op: the worker's CAS on the row is the result; nothing else is kept."""
        return result

    def _forget(self, task_id: str) -> None:
        """No-op: a job's row is removed by the ledger's TTL cleanup, not by a reader."""

    def ensure_chords_allowed(self) -> None:
        """Chords need stored results; the ledger keeps jobs, not task return values."""
        raise NotImplementedError("planq's ledger backend stores no results: no chords")

    def _save_group(self, group_id: str, result: Any) -> Any:
        raise NotImplementedError("planq's ledger backend stores no groups")

    def _restore_group(self, group_id: str) -> Any:
        return None

    def _delete_group(self, group_id: str) -> None:
        """No-op: no group is ever stored."""
