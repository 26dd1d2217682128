"""Recoverable runs in memory, behaving exactly like the SQL store: for tests and embedded use."""

from __future__ import annotations

import dataclasses
import threading
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from planq.domain.availability import RUN_SWEEP, stale_sweep_gap
from planq.domain.clock import utcnow
from planq.domain.errors import RunNotActiveError, RunNotFoundError
from planq.domain.ids import new_id
from planq.domain.outage import OutageMonitor
from planq.domain.redaction import BUILTIN, Redactor
from planq.domain.runs.checks import (
    SERVER_RESTART_ERROR,
    SWEEP_ERROR,
    check_params_size,
    check_scanned_total,
    params_to_json,
)
from planq.domain.runs.findings import Finding, detail_from_json, present_severity_counts
from planq.domain.runs.ports import AlreadyActive, Fresh, OpenResult, Resumed
from planq.domain.runs.status import RunStatus
from planq.domain.runs.summary import RunSummary, build_summary
from planq.domain.runs.sweep import SweepResult
from planq.store.availability import MemorySightings
from planq.store.runs_bound import Clock
from planq.store.runs_checked import CheckedRunStore, CheckedRunStoreProvider


@dataclass
class _Run:
    """One run's row; only touched under the provider's lock."""

    id: str
    job_name: str
    status: RunStatus
    owner: str | None
    started_at: datetime
    last_progress_at: datetime
    completed_at: datetime | None = None
    cursor: bytes | None = None
    scanned_count: int = 0
    finding_count: int = 0
    #: Findings per severity, bumped with finding_count (as the SQL store's counters).
    severity_counts: dict[str, int] = field(default_factory=dict)
    params: dict[str, str] = field(default_factory=dict)
    progress_total: int | None = None
    progress_kind: str | None = None
    error_message: str | None = None
    lease_epoch: int = 1
    heartbeat_at: datetime | None = None

    def summary(self) -> RunSummary:
        return build_summary(
            run_id=self.id,
            job_name=self.job_name,
            status=self.status.value,
            owner=self.owner,
            started_at=self.started_at,
            last_progress_at=self.last_progress_at,
            completed_at=self.completed_at,
            cursor=self.cursor,
            scanned_count=self.scanned_count,
            finding_count=self.finding_count,
            params=self.params,
            progress_total=self.progress_total,
            progress_kind=self.progress_kind,
            error_message=self.error_message,
            lease_epoch=self.lease_epoch,
            heartbeat_at=self.heartbeat_at,
        )


class _Tables:
    """The runs and findings, and the one lock that makes every operation atomic."""

    def __init__(self) -> None:
        self.lock = threading.RLock()
        self.runs: dict[str, _Run] = {}
        self.findings: dict[str, list[tuple[Finding, str]]] = {}  #: run id -> (finding, JSON)


class InMemoryRunStore(CheckedRunStore):
    """One run's store in memory, under one lease (the same fencing as the SQL store)."""

    def __init__(
        self,
        tables: _Tables,
        run_id: str,
        started_at: datetime,
        clock: Clock,
        epoch: int,
        redactor: Redactor = BUILTIN,
    ) -> None:
        self._tables = tables
        super().__init__(run_id, started_at, clock, epoch, redactor)

    def _row(self) -> _Run:
        """The row if it is still this store's lease (RunNotFound, RunFenced otherwise)."""
        self._check_held()
        row = self._tables.runs.get(self._run_id)
        if row is None:
            raise RunNotFoundError(self._run_id)
        if row.lease_epoch != self._epoch:
            raise self._fenced(row.lease_epoch, row.status.as_str())
        return row

    def _active_row(self) -> _Run:
        row = self._row()
        if not row.status.is_active:
            raise RunNotActiveError(self._run_id, row.status.as_str())
        return row

    def status(self) -> RunStatus:
        """The run's status now; RunFencedError when it is no longer this store's."""
        with self._tables.lock:
            return self._row().status

    def _checkpoint(self, cursor: bytes, delta_count: int) -> None:
        """Save the cursor, add to scanned_count, bump the heartbeat (active runs only)."""
        with self._tables.lock:
            row = self._active_row()
            check_scanned_total(row.scanned_count, delta_count)
            row.cursor = cursor
            row.scanned_count += delta_count
            row.last_progress_at = self._clock()

    def _set_string_param(self, key: str, value: str) -> None:
        """Store a per-run config value (checked and redacted)."""
        with self._tables.lock:
            row = self._active_row()
            check_params_size(params_to_json({**row.params, key: value}))
            row.params[key] = value

    def _get_string_param(self, key: str) -> str | None:
        """A per-run config value, or None."""
        with self._tables.lock:
            row = self._tables.runs.get(self._run_id)
            return None if row is None else row.params.get(key)

    def _record_finding(self, finding: Finding, detail_json: str) -> None:
        """Store a finding and bump finding_count atomically."""
        with self._tables.lock:
            row = self._active_row()
            row.finding_count += 1
            severity = finding.severity.value
            row.severity_counts[severity] = row.severity_counts.get(severity, 0) + 1
            self._tables.findings.setdefault(self._run_id, []).append((finding, detail_json))

    def _seed_progress_params(self, total: int | None, kind: str) -> None:
        """Record the start-time total and its kind."""
        with self._tables.lock:
            if self._tables.runs.get(self._run_id) is None:
                return
            row = self._row()
            row.progress_total = total
            row.progress_kind = kind

    def _finish(self, status: RunStatus, **values: Any) -> bool:
        """CAS active -> status under this lease; RunFencedError when the lease is gone."""
        with self._tables.lock:
            if self._tables.runs.get(self._run_id) is None:
                return False
            row = self._row()
            if not row.status.is_active:
                return False
            row.status = status
            for name, value in values.items():
                setattr(row, name, value)
            return True

    def mark_completed(self) -> bool:
        """Active -> Completed."""
        now = self._clock()
        return self._finish(RunStatus.Completed, completed_at=now, last_progress_at=now)

    def _mark_paused(self, cursor: bytes | None, error_message: str | None) -> bool:
        """Active -> Paused at cursor (None: keep the last checkpoint), with an optional error."""
        values: dict[str, Any] = {"last_progress_at": self._clock()}
        if cursor is not None:
            values["cursor"] = cursor
        if error_message is not None:
            values["error_message"] = error_message
        return self._finish(RunStatus.Paused, **values)

    def _mark_failed(self, error_message: str) -> bool:
        """Active -> Failed with a redacted message."""
        now = self._clock()
        return self._finish(
            RunStatus.Failed,
            completed_at=now,
            last_progress_at=now,
            error_message=error_message,
        )


class InMemoryRunStoreProvider(CheckedRunStoreProvider):
    """Every run in memory; thread-safe, one lock for all operations."""

    def __init__(
        self,
        clock: Clock = utcnow,
        outages: OutageMonitor | None = None,
        redactor: Redactor = BUILTIN,
    ) -> None:
        super().__init__(clock, outages, redactor)
        self._tables = _Tables()
        self._sightings = MemorySightings()

    def _bind(self, row: _Run) -> InMemoryRunStore:
        return InMemoryRunStore(
            self._tables, row.id, row.started_at, self._clock, row.lease_epoch, self.redactor
        )

    def _open_or_start(self, job_name: str, owner: str | None) -> OpenResult:
        """Start, resume the Paused run, or report the active one."""
        now = self._clock()
        with self._tables.lock:
            current = next(
                (
                    r
                    for r in self._tables.runs.values()
                    if r.job_name == job_name and r.status.is_non_terminal
                ),
                None,
            )
            if current is None:
                row = _Run(new_id(), job_name, RunStatus.Running, owner, now, now)
                row.heartbeat_at = now
                self._tables.runs[row.id] = row
                return Fresh(self._bind(row))
            if current.status is not RunStatus.Paused:
                return AlreadyActive(current.id, current.status)
            current.status = RunStatus.Running
            current.owner = owner
            current.last_progress_at = now
            current.heartbeat_at = now
            current.error_message = None
            current.lease_epoch += 1  # the new lease: the previous holder is fenced out
            return Resumed(self._bind(current), current.cursor or b"")

    def _boot_recovery_sweep(
        self, owner: str | None, stale_after: float | None, cutoff: datetime | None
    ) -> SweepResult:
        """Pause every active run, or (fleet-safe) this owner's and the stale ones.

        Stale counts only once the ledger has been available for stale_after (the sweep's
        sighting; domain/availability.py), as on SQL.
        """
        everything = owner is None and cutoff is None
        if stale_after and not self._available_for(stale_after):
            if owner is None:
                return SweepResult()
            cutoff = None  # the owner's own runs are still this boot's to pause
        flipped: list[str] = []
        with self._tables.lock:
            for row in self._tables.runs.values():
                if not row.status.is_active:
                    continue
                stale = (
                    cutoff is not None
                    and row.last_progress_at < cutoff
                    and (row.heartbeat_at is None or row.heartbeat_at < cutoff)
                )
                if everything or stale or (owner is not None and row.owner == owner):
                    row.status = RunStatus.Paused
                    row.lease_epoch += 1  # revoked: whoever held it can write no more
                    row.error_message = SERVER_RESTART_ERROR if everything else SWEEP_ERROR
                    flipped.append(row.id)
        return SweepResult(flipped)

    def _available_for(self, stale_after: float) -> bool:
        """Record the stale sweep's sighting; whether holders had stale_after to renew."""
        seen = self._sightings.sight(
            RUN_SWEEP, stale_sweep_gap(stale_after), self.outages.recovered_ago()
        )
        return seen.available_for(stale_after)

    def _heartbeat_runs(self, leases: dict[str, int]) -> set[str]:
        """Stamp heartbeat_at of the active runs still held under these leases; their ids."""
        now = self._clock()
        held: set[str] = set()
        with self._tables.lock:
            for run_id, epoch in leases.items():
                row = self._tables.runs.get(run_id)
                if row is not None and row.status.is_active and row.lease_epoch == epoch:
                    row.heartbeat_at = now
                    held.add(run_id)
        return held

    def _list_runs(self, job_name: str | None, limit: int) -> list[RunSummary]:
        """Runs, newest first."""
        with self._tables.lock:
            rows = [
                r for r in self._tables.runs.values() if job_name is None or r.job_name == job_name
            ]
            rows.sort(key=lambda r: (r.started_at, r.id), reverse=True)
            return [r.summary() for r in rows[:limit]]

    def _count_runs(self, job_name: str | None) -> int:
        """Runs (of one job name), with list_runs' filter."""
        with self._tables.lock:
            runs = self._tables.runs.values()
            return sum(1 for r in runs if job_name is None or r.job_name == job_name)

    def _get_run_by_id(self, run_id: str) -> RunSummary | None:
        """One run, or None."""
        with self._tables.lock:
            row = self._tables.runs.get(run_id)
            return row.summary() if row is not None else None

    def _request_cancel(self, job_name: str) -> str | None:
        """Running -> CancelRequested."""
        with self._tables.lock:
            for row in self._tables.runs.values():
                if row.job_name == job_name and row.status is RunStatus.Running:
                    row.status = RunStatus.CancelRequested
                    return row.id
        return None

    def _list_findings(
        self, run_id: str, limit: int, offset: int, after: str | None
    ) -> list[Finding]:
        """One page of a run's findings, in the order recorded; after a finding id if given."""
        with self._tables.lock:
            found = sorted(
                self._tables.findings.get(run_id, []), key=lambda f: (f[0].created_at, f[0].id)
            )
            if after is not None:  # as SQL: the cursor finding's (created_at, id), any run
                marks = [
                    (f.created_at, f.id)
                    for rows in self._tables.findings.values()
                    for f, _ in rows
                    if f.id == after
                ]
                found = [r for r in found if marks and (r[0].created_at, r[0].id) > marks[0]]
        page = found[offset:][:limit]
        return [dataclasses.replace(f, detail=detail_from_json(js)) for f, js in page]

    def _finding_severity_counts(self, run_id: str) -> dict[str, int]:
        """Findings per severity present, worst first (the run's counters)."""
        with self._tables.lock:
            row = self._tables.runs.get(run_id)
            counts = {} if row is None else dict(row.severity_counts)
        return present_severity_counts(counts)

    def _purge_terminal_runs(self, cutoff: datetime) -> int:
        """Delete old Completed/Failed runs with their findings."""
        with self._tables.lock:
            doomed = [
                r.id
                for r in self._tables.runs.values()
                if not r.status.is_non_terminal
                and r.completed_at is not None
                and r.completed_at < cutoff
            ]
            for run_id in doomed:
                del self._tables.runs[run_id]
                self._tables.findings.pop(run_id, None)
        return len(doomed)
