"""Beat maintenance: stuck jobs, TTL cleanup, dispatch relay. Each is idempotent."""

from __future__ import annotations

from typing import Any

from celery import Celery

from tasks.runtime import runtime_for

#: Not shared: each app gets its own (Celery shares decorated tasks across apps by default).
#: No task events: sweeps every few seconds would crowd Flower's task list, and they say
#: nothing an operator acts on (`planq schedule` and the metrics report them instead).
_OPTIONS: dict[str, Any] = {"ignore_result": True, "shared": False, "send_events": False}


def register_maintenance_tasks(app: Celery) -> dict[str, Any]:
    """Create the three maintenance tasks on app (routed to planq.maintenance)."""

    def detect_stuck_jobs() -> dict[str, Any]:
        """Fail running jobs whose heartbeat expired (CAS: two beats never double-fail)."""
        report = runtime_for(app).worker.detect_stuck_jobs()
        return {"expired": report.expired, "retried": report.retried}

    def cleanup_expired_jobs() -> int:
        """Delete terminal rows past job_ttl in bounded batches."""
        return runtime_for(app).worker.cleanup_expired_jobs()

    def relay_dispatch() -> list[str]:
        """Re-publish queued rows whose message was never sent or was lost."""
        return runtime_for(app).worker.relay_dispatch()

    return {
        fn.__name__: app.task(name=f"planq.maintenance.{fn.__name__}", **_OPTIONS)(fn)
        for fn in (detect_stuck_jobs, cleanup_expired_jobs, relay_dispatch)
    }
