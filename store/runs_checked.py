"""The run ports' argument checks, run once, before a backend sees the call.

Both backends (store/runs_memory.py, store/runs_sql.py) subclass these, as the job and plan
stores subclass store/checked.py: each public method of RunStore and RunStoreProvider
(domain/runs/ports.py) checks, redacts and bounds its arguments here and then calls the
backend's `_method`, so a backend holds no checks and a refused call touches nothing.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Mapping
from datetime import datetime
from typing import Any
from uuid import UUID

from planq.domain.bounds import ID_LENGTH, check_job_name, check_text, describe
from planq.domain.errors import WrongTypeError
from planq.domain.ids import new_id
from planq.domain.outage import PROCESS_OUTAGES, OutageMonitor
from planq.domain.redaction import BUILTIN, Redactor
from planq.domain.runs.checks import (
    check_cursor,
    check_delta,
    check_leases,
    check_limit,
    check_owner,
    check_param,
    check_progress_kind,
    check_run_id,
    check_total,
    clean_error,
    purge_cutoff,
    stale_cutoff,
)
from planq.domain.runs.findings import (
    Finding,
    Severity,
    check_kind,
    check_resource_id,
    check_severity,
    detail_from_json,
    detail_to_json,
)
from planq.domain.runs.ports import OpenResult
from planq.domain.runs.progress import ProgressKind
from planq.domain.runs.status import RunStatus
from planq.domain.runs.summary import RunSummary
from planq.domain.runs.sweep import SweepResult
from planq.store.runs_bound import BoundRun, Clock


def _error_text(field: str, message: object, redactor: Redactor) -> str:
    """An error to store on a run: a str, redacted and bounded."""
    if not isinstance(message, str):
        raise WrongTypeError(field, "must be a string", describe(message))
    return clean_error(message, redactor)


def _optional_job_name(job_name: object) -> None:
    if job_name is not None:
        check_job_name(job_name)


class CheckedRunStore(BoundRun, ABC):
    """The RunStore port: checks (and redaction) here, the fenced writes in the `_methods`."""

    @abstractmethod
    def status(self) -> RunStatus:
        """The run's status now; RunFencedError when it is no longer this store's."""

    def checkpoint(self, cursor: bytes, delta_count: int) -> None:
        """Save the cursor, add delta_count to scanned_count and bump the heartbeat."""
        check_cursor(cursor)
        check_delta(delta_count)
        self._checkpoint(cursor, delta_count)

    def set_string_param(self, key: str, value: str) -> None:
        """Store per-run config that survives a resume (the value redacted)."""
        check_param(key, value)
        self._set_string_param(key, self.redactor(value))

    def get_string_param(self, key: str) -> str | None:
        """A per-run config value, or None."""
        check_param(key)
        return self._get_string_param(key)

    def record_finding(
        self,
        kind: str,
        severity: Severity | str,
        resource_id: UUID | str | None,
        detail: dict[str, Any] | None,
    ) -> Finding:
        """Store a finding (its detail redacted) and bump the run's finding_count."""
        detail_json = detail_to_json(detail, self.redactor)
        finding = Finding(
            id=new_id(),
            run_id=self._run_id,
            kind=check_kind(kind),
            severity=check_severity(severity),
            resource_id=check_resource_id(resource_id),
            detail=detail_from_json(detail_json),  # a JSON copy, as a read hands back
            created_at=self._clock(),
        )
        self._record_finding(finding, detail_json)
        return finding

    def seed_progress_params(self, total: int | None, kind: ProgressKind) -> None:
        """Engine only: the total counted at a fresh start, and whether it is exact."""
        check_total(total)
        self._seed_progress_params(total, check_progress_kind(kind))

    @abstractmethod
    def mark_completed(self) -> bool:
        """Engine only: active -> Completed; whether this call made the move."""

    def mark_paused(self, cursor: bytes | None, error_message: str | None = None) -> bool:
        """Engine only: active -> Paused at cursor (None: keep the last checkpoint)."""
        checked = None if cursor is None else check_cursor(cursor)
        error = (
            None
            if error_message is None
            else _error_text("error_message", error_message, self.redactor)
        )
        return self._mark_paused(checked, error)

    def mark_failed(self, message: str) -> bool:
        """Engine only: active -> Failed with a redacted, bounded message."""
        return self._mark_failed(_error_text("message", message, self.redactor))

    @abstractmethod
    def _checkpoint(self, cursor: bytes, delta_count: int) -> None: ...

    @abstractmethod
    def _set_string_param(self, key: str, value: str) -> None: ...

    @abstractmethod
    def _get_string_param(self, key: str) -> str | None: ...

    @abstractmethod
    def _record_finding(self, finding: Finding, detail_json: str) -> None: ...

    @abstractmethod
    def _seed_progress_params(self, total: int | None, kind: str) -> None: ...

    @abstractmethod
    def _mark_paused(self, cursor: bytes | None, error_message: str | None) -> bool: ...

    @abstractmethod
    def _mark_failed(self, error_message: str) -> bool: ...


class CheckedRunStoreProvider(ABC):
    """The RunStoreProvider port: checks here, the statements in the `_methods`."""

    def __init__(
        self,
        clock: Clock,
        outages: OutageMonitor | None = None,
        redactor: Redactor = BUILTIN,
    ) -> None:
        self._clock = clock
        #: this process's outage monitor: its recent outages hold the stale sweep off too
        self.outages = PROCESS_OUTAGES if outages is None else outages
        #: Every run error, finding detail and param written through this provider's stores.
        self.redactor = redactor

    def open_or_start(self, job_name: str, owner: str | None = None) -> OpenResult:
        """Start a run, resume the Paused one, or report the active one; race-safe."""
        check_job_name(job_name)
        check_owner(owner)
        return self._open_or_start(job_name, owner)

    def boot_recovery_sweep(
        self, owner: str | None = None, stale_after: float | None = None
    ) -> SweepResult:
        """Pause active runs: every one, or (fleet-safe) this owner's and the stale ones."""
        check_owner(owner)
        cutoff = None if stale_after is None else stale_cutoff(self._clock(), stale_after)
        return self._boot_recovery_sweep(owner, stale_after, cutoff)

    def heartbeat_runs(self, leases: Mapping[str, int]) -> set[str]:
        """Stamp heartbeat_at of the active runs held under these leases; those ids."""
        return self._heartbeat_runs(check_leases(leases))

    def list_runs(self, job_name: str | None = None, limit: int = 20) -> list[RunSummary]:
        """Runs (of one job name), newest first."""
        check_limit(limit)
        _optional_job_name(job_name)
        return self._list_runs(job_name, limit)

    def count_runs(self, job_name: str | None = None) -> int:
        """How many runs (of one job name)."""
        _optional_job_name(job_name)
        return self._count_runs(job_name)

    def get_run_by_id(self, run_id: str | UUID) -> RunSummary | None:
        """One run, or None (unknown or purged)."""
        return self._get_run_by_id(check_run_id(run_id))

    def request_cancel(self, job_name: str) -> str | None:
        """Running -> CancelRequested; the run id, or None when nothing was running."""
        return self._request_cancel(check_job_name(job_name))

    def list_findings(
        self, run_id: str | UUID, limit: int = 100, offset: int = 0, after: str | None = None
    ) -> list[Finding]:
        """A run's findings in the order recorded, one page; `after` a finding id (keyset)."""
        checked = check_run_id(run_id)
        check_limit(limit, offset)
        cursor = None if after is None else check_text("after", after, ID_LENGTH)
        return self._list_findings(checked, limit, offset, cursor)

    def finding_severity_counts(self, run_id: str | UUID) -> dict[str, int]:
        """How many findings of each severity present, worst first (no zero entries)."""
        return self._finding_severity_counts(check_run_id(run_id))

    def purge_terminal_runs(self, retention_days: float) -> int:
        """Delete Completed/Failed runs (and findings) done over max(1, days) days ago."""
        return self._purge_terminal_runs(purge_cutoff(self._clock(), retention_days))

    @abstractmethod
    def _open_or_start(self, job_name: str, owner: str | None) -> OpenResult: ...

    @abstractmethod
    def _boot_recovery_sweep(
        self, owner: str | None, stale_after: float | None, cutoff: datetime | None
    ) -> SweepResult: ...

    @abstractmethod
    def _heartbeat_runs(self, leases: dict[str, int]) -> set[str]: ...

    @abstractmethod
    def _list_runs(self, job_name: str | None, limit: int) -> list[RunSummary]: ...

    @abstractmethod
    def _count_runs(self, job_name: str | None) -> int: ...

    @abstractmethod
    def _get_run_by_id(self, run_id: str) -> RunSummary | None: ...

    @abstractmethod
    def _request_cancel(self, job_name: str) -> str | None: ...

    @abstractmethod
    def _list_findings(
        self, run_id: str, limit: int, offset: int, after: str | None
    ) -> list[Finding]: ...

    @abstractmethod
    def _finding_severity_counts(self, run_id: str) -> dict[str, int]: ...

    @abstractmethod
    def _purge_terminal_runs(self, cutoff: datetime) -> int: ...
