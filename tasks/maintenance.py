"""Beat maintenance: stuck jobs, TTL cleanup, partitions ahead, dispatch relay, webhooks."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

from celery import Celery

from planq.domain.errors import LedgerUnavailableError
from planq.tasks.runtime import runtime_for, service_for

T = TypeVar("T")

#: Not shared: each app gets its own (Celery shares decorated tasks across apps by default).
#: No task events: sweeps every few seconds would crowd Flower's task list, and they say
#: nothing an operator acts on (`planq schedule` and the metrics report them instead).
_OPTIONS: dict[str, Any] = {"ignore_result": True, "shared": False, "send_events": False}


def register_maintenance_tasks(app: Celery) -> dict[str, Any]:
    """Create the maintenance tasks on app (routed to planq.maintenance)."""

    def quietly(what: str, sweep: Callable[[], T], skipped: T) -> T:
        """Run a sweep; an outage is the process monitor's to log (once), not a traceback.

        A skipped sweep is safe: the next one redoes its work, and a stuck sweep that did
        not run leaves a gap in the ledger's sightings (expiry then holds off).
        """
        outages = service_for(app).jobs.outages
        try:
            done = sweep()
        except LedgerUnavailableError as exc:
            outages.failed(what, exc)
            return skipped
        outages.succeeded()
        return done

    def detect_stuck_jobs() -> dict[str, Any]:
        """Fail running jobs whose heartbeat expired (CAS: two beats never double-fail)."""
        report = quietly("stuck-job sweep", lambda: service_for(app).jobs.detect_stuck(), None)
        if report is None:
            return {"expired": [], "retried": {}, "skipped": "ledger unavailable"}
        return {"expired": report.expired, "retried": report.retried}

    def cleanup_expired_jobs() -> int:
        """Delete terminal rows past job_ttl in bounded batches."""
        return quietly("TTL cleanup", lambda: service_for(app).jobs.cleanup(), 0)

    def prepare_partitions() -> list[str]:
        """Create the ledger's partitions ahead (PostgreSQL): no insert waits for one."""
        return quietly("partition preparation", lambda: runtime_for(app).prepare_partitions(), [])

    def relay_dispatch() -> list[str]:
        """Re-publish queued rows whose message was never sent or was lost."""
        return quietly("dispatch relay", lambda: service_for(app).jobs.relay(), [])

    def deliver_webhooks() -> dict[str, list[str]]:
        """POST the outbox's due notifications (signed, retried with backoff, bounded)."""
        report = quietly("webhook delivery", lambda: runtime_for(app).webhooks.deliver_due(), None)
        if report is None:
            return {"delivered": [], "retried": [], "gave_up": []}
        return {"delivered": report.delivered, "retried": report.retried, "gave_up": report.gave_up}

    tasks = (
        detect_stuck_jobs,
        cleanup_expired_jobs,
        prepare_partitions,
        relay_dispatch,
        deliver_webhooks,
    )
    return {
        fn.__name__: app.task(name=f"planq.maintenance.{fn.__name__}", **_OPTIONS)(fn)
        for fn in tasks
    }
