"""JobOutcome: what one trigger of a recoverable job did, small and JSON-ready for a task."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from planq.domain.runs.status import RunStatus

ALREADY_RUNNING = "already_running"


@dataclass(frozen=True, slots=True)
class JobOutcome:
    """The report of run_or_resume: the spec's Ok { count, extra } / Err { message }.

    ok is the spec's is_ok(); `count` and `extra` are its Ok fields, `message` its Err
    message (and a log line for every outcome). The flat fields are planq's own view of
    the same report: status is the run's status as this trigger left it (None when the
    run is unknown, e.g. open_or_start failed or the final write did not go through).
    """

    ok: bool
    completed: bool = False
    paused: bool = False
    skipped: str | None = None  #: None, or "already_running" when another run holds the name
    run_id: str | None = None
    status: RunStatus | None = None
    cursor_hex: str | None = None
    finding_count: int = 0
    scanned_count: int = 0
    #: Findings per severity present (no zero entries); empty, and not queried, without any.
    severity_counts: dict[str, int] = field(default_factory=dict)
    message: str = ""
    #: The redacted error of a Failed run, or of a handler exception that paused the run.
    error: str | None = None
    #: This process lost the run (swept, resumed elsewhere) and stopped writing to it;
    #: the run's status is its new owner's, so `status` is None.
    lost: bool = False

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

    @property
    def count(self) -> int:
        """The spec's Ok count: the run's findings (0 when skipped or not ok)."""
        return self.finding_count if self.ok and self.skipped is None else 0

    @property
    def extra(self) -> dict[str, Any]:
        """The spec's JobOutcome extra mapping, key for key ({} for an error outcome).

        A run paused by a handler exception (ok False) keeps the paused mapping and adds
        "error": it is resumable, unlike the spec's Err.
        """
        if self.skipped is not None:
            status = self.status.as_str() if self.status else None
            return {"skipped": self.skipped, "run_id": self.run_id, "status": status}
        counts = {
            "run_id": self.run_id,
            "finding_count": self.finding_count,
            "scanned_count": self.scanned_count,
            "severity_counts": dict(self.severity_counts),
        }
        if self.completed:
            return {"completed": True, **counts}
        if self.paused:
            paused: dict[str, Any] = {"paused": True, **counts, "cursor_hex": self.cursor_hex}
            if self.error is not None:
                paused["error"] = self.error
            return paused
        return {}

    def as_dict(self) -> dict[str, Any]:
        """JSON-ready (a Celery task result or a CLI line): the flat view plus extra."""
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
            "error": self.error,
            "lost": self.lost,
            "count": self.count,
            "extra": self.extra,
        }
