"""RunSummary: the read model of one run, built at the store boundary from a row."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from planq.domain.runs.progress import ProgressKind, RunProgress, derive_progress
from planq.domain.runs.status import RunStatus


@dataclass(frozen=True, slots=True)
class RunSummary:
    """What an operator (and the engine's report) sees of a run."""

    id: str
    job_name: str
    status: RunStatus
    started_at: datetime
    last_progress_at: datetime
    completed_at: datetime | None
    stats: dict[str, int]
    params: dict[str, str] = field(default_factory=dict)
    cursor_hex: str | None = None  #: hex of the last checkpointed cursor (None: never one)
    error_message: str | None = None
    progress: RunProgress | None = None
    owner: str | None = None
    lease_epoch: int = 0  #: bumped at every open/resume and sweep (fencing)
    heartbeat_at: datetime | None = None  #: the owner process's last run heartbeat

    @property
    def scanned_count(self) -> int:
        """Rows scanned so far, over every resume."""
        return self.stats.get("scanned_count", 0)

    @property
    def finding_count(self) -> int:
        """Findings recorded so far."""
        return self.stats.get("finding_count", 0)

    def as_dict(self) -> dict[str, Any]:
        """A stable, JSON-ready view for the CLI."""
        return {
            "id": self.id,
            "job_name": self.job_name,
            "status": self.status.as_str(),
            "owner": self.owner,
            "started_at": self.started_at.isoformat(),
            "last_progress_at": self.last_progress_at.isoformat(),
            "completed_at": self.completed_at.isoformat() if self.completed_at else None,
            "stats": dict(self.stats),
            "params": dict(self.params),
            "cursor_hex": self.cursor_hex,
            "error_message": self.error_message,
            "progress": self.progress.as_dict() if self.progress else None,
            "lease_epoch": self.lease_epoch,
            "heartbeat_at": self.heartbeat_at.isoformat() if self.heartbeat_at else None,
        }


def build_summary(
    *,
    run_id: str,
    job_name: str,
    status: str,
    owner: str | None,
    started_at: datetime,
    last_progress_at: datetime,
    completed_at: datetime | None,
    cursor: bytes | None,
    scanned_count: int,
    finding_count: int,
    params: dict[str, str],
    progress_total: int | None,
    progress_kind: str | None,
    error_message: str | None,
    lease_epoch: int = 0,
    heartbeat_at: datetime | None = None,
) -> RunSummary:
    """One constructor for every backend, so memory and SQL summaries agree field by field."""
    parsed = RunStatus.parse(status)
    if parsed is None:
        raise ValueError(f"run {run_id} has an unknown status {status!r}")
    kind = ProgressKind(progress_kind) if progress_kind else None
    stats = {"scanned_count": scanned_count, "finding_count": finding_count}
    if progress_total is not None:
        stats["progress_total"] = progress_total
    return RunSummary(
        id=run_id,
        job_name=job_name,
        status=parsed,
        started_at=started_at,
        last_progress_at=last_progress_at,
        completed_at=completed_at,
        stats=stats,
        params=dict(params),
        cursor_hex=cursor.hex() if cursor is not None else None,
        error_message=error_message,
        progress=derive_progress(scanned_count, progress_total, kind),
        owner=owner,
        lease_epoch=lease_epoch,
        heartbeat_at=heartbeat_at,
    )
