"""Per-worker counters, so an operator can see what one worker has done."""

from __future__ import annotations

import threading
from datetime import datetime
from typing import Any

from planq.domain.clock import utcnow


class WorkerHealthReport:
    """Thread-safe counters of finished jobs for one worker."""

    def __init__(self, worker_id: str) -> None:
        if not isinstance(worker_id, str) or not worker_id.strip():
            raise ValueError("worker_id must be a non-empty string")
        self.worker_id = worker_id
        self.started_at: datetime = utcnow()
        self.last_activity: datetime | None = None
        self.jobs_processed = 0
        self.jobs_failed = 0
        self.jobs_cancelled = 0
        self._lock = threading.Lock()

    def _bump(self, name: str) -> None:
        with self._lock:
            setattr(self, name, getattr(self, name) + 1)
            self.last_activity = utcnow()

    def record_completed(self) -> None:
        """A job succeeded."""
        self._bump("jobs_processed")

    def record_failed(self) -> None:
        """A job failed."""
        self._bump("jobs_failed")

    def record_cancelled(self) -> None:
        """A job was cancelled while this worker ran it."""
        self._bump("jobs_cancelled")

    def as_dict(self) -> dict[str, Any]:
        """A JSON-ready snapshot."""
        with self._lock:
            return {
                "worker_id": self.worker_id,
                "jobs_processed": self.jobs_processed,
                "jobs_failed": self.jobs_failed,
                "jobs_cancelled": self.jobs_cancelled,
                "started_at": self.started_at.isoformat(),
                "last_activity": self.last_activity.isoformat() if self.last_activity else None,
            }
