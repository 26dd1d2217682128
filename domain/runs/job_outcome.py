"""JobOutcome: what one trigger of a recoverable job did, small and JSON-ready for a task."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from domain.runs.findings import zero_severity_counts
from domain.runs.status import RunStatus
from domain.runs.summary import RunSummary

ALREADY_RUNNING = "already_running"


@dataclass(frozen=True, slots=True)
class JobOutcome:
    """The report of run_or_resume; ok is False only when the run did not end well."""

    ok: bool
    completed: bool = False
    paused: bool = False
    skipped: str | None = None  #: None, or "already_running" when another run holds the name
    run_id: str | None = None
    status: RunStatus | None = None
    cursor_hex: str | None = None
    finding_count: int = 0
    scanned_count: int = 0
    severity_counts: dict[str, int] = field(default_factory=zero_severity_counts)
    message: str = ""

    @classmethod
    def already_running(cls, run_id: str, status: RunStatus) -> JobOutcome:
        """Another run holds the job name; nothing was touched."""
        return cls(
            ok=True,
            skipped=ALREADY_RUNNING,
            run_id=run_id,
            status=status,
            message=f"skipped: run {run_id} is {status.as_str()}",
        )

    @classmethod
    def from_summary(
        cls, summary: RunSummary, severity_counts: dict[str, int], message: str
    ) -> JobOutcome:
        """The report of a run that this trigger ran, from its row as finally stored."""
        return cls(
            ok=summary.status in {RunStatus.Completed, RunStatus.Paused},
            completed=summary.status is RunStatus.Completed,
            paused=summary.status is RunStatus.Paused,
            run_id=summary.id,
            status=summary.status,
            cursor_hex=summary.cursor,
            finding_count=summary.finding_count,
            scanned_count=summary.scanned_count,
            severity_counts={**zero_severity_counts(), **severity_counts},
            message=message,
        )

    def as_dict(self) -> dict[str, Any]:
        """JSON-ready (a Celery task result or a CLI line)."""
        return {
            "ok": self.ok,
            "completed": self.completed,
            "paused": self.paused,
            "skipped": self.skipped,
            "run_id": self.run_id,
            "status": self.status.as_str() if self.status else None,
            "cursor_hex": self.cursor_hex,
            "finding_count": self.finding_count,
            "scanned_count": self.scanned_count,
            "severity_counts": dict(self.severity_counts),
            "message": self.message,
        }
