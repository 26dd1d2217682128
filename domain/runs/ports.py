"""The ports of recoverable runs: a handler, a store bound to one run, and its provider."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Protocol, TypeAlias, runtime_checkable
from uuid import UUID

from planq.domain.runs.findings import Finding, Severity
from planq.domain.runs.outcome import RunOutcome
from planq.domain.runs.progress import ProgressKind
from planq.domain.runs.status import RunStatus
from planq.domain.runs.summary import RunSummary
from planq.domain.runs.sweep import SweepResult


@runtime_checkable
class RunStore(Protocol):
    """What a handler may do to its own run; mark_* and seed_* are for the engine alone."""

    @property
    def run_id(self) -> str:
        """The run's ULID."""

    @property
    def started_at(self) -> datetime:
        """When the run first started (a resume keeps it)."""

    @property
    def lease_epoch(self) -> int:
        """The lease this store was opened under; every write carries it in its WHERE."""

    @property
    def lease_lost(self) -> bool:
        """Whether this store has learned that the run is no longer its own (no read).

        Set by the run heartbeat or by a refused write; once True, status() and every
        write raise RunFencedError without touching the ledger.
        """

    def mark_lease_lost(self) -> None:
        """Heartbeat only: the ledger no longer holds the run under this store's lease."""

    def status(self) -> RunStatus:
        """The run's status now; poll it between batches to see a cancel request.

        Raises RunFencedError when this process no longer owns the run (swept, or resumed
        by another worker): stop at once and write nothing.
        """

    def checkpoint(self, cursor: bytes, delta_count: int) -> None:
        """Save the cursor, add delta_count to scanned_count and bump the heartbeat.

        Raises RunFencedError when the run's lease is no longer this store's, and
        RunNotActiveError when the run is no longer Running or CancelRequested.
        Every write below is fenced the same way (record_finding, set_string_param,
        seed_progress_params, and mark_*, which raise RunFencedError rather than return).
        """

    def set_string_param(self, key: str, value: str) -> None:
        """Store per-run config that survives a resume (setting the same value is a no-op)."""

    def get_string_param(self, key: str) -> str | None:
        """A per-run config value, or None."""

    def record_finding(
        self,
        kind: str,
        severity: Severity | str,
        resource_id: UUID | str | None,
        detail: dict[str, Any] | None,
    ) -> Finding:
        """Store a finding and bump the run's finding_count, in one transaction.

        resource_id is the spec's UUID, or a string (planq's jobs and plans have ULIDs).
        """

    def seed_progress_params(self, total: int | None, kind: ProgressKind) -> None:
        """Engine only: the total counted at a fresh start, and whether it is exact."""

    def mark_completed(self) -> bool:
        """Engine only: active -> Completed; whether this call made the move."""

    def mark_paused(self, cursor: bytes | None, error_message: str | None = None) -> bool:
        """Engine only: active -> Paused; whether this call made the move.

        cursor None keeps the last checkpointed cursor (the spec's Option); error_message
        (redacted) says why a run was paused by an error rather than on request.
        """

    def mark_failed(self, message: str) -> bool:
        """Engine only: active -> Failed with a redacted message; whether this call moved it."""


@dataclass(frozen=True, slots=True)
class Fresh:
    """open_or_start made a new Running run."""

    store: RunStore


@dataclass(frozen=True, slots=True)
class Resumed:
    """open_or_start took a Paused run back to Running; carry on from cursor.

    cursor is b"" when the run was paused before its first checkpoint (never None).
    """

    store: RunStore
    cursor: bytes


@dataclass(frozen=True, slots=True)
class AlreadyActive:
    """A Running or CancelRequested run holds the job name; nothing was changed."""

    run_id: str
    status: RunStatus


OpenResult: TypeAlias = Fresh | Resumed | AlreadyActive


@runtime_checkable
class RunStoreProvider(Protocol):
    """All runs of all job names; every backend behaves the same (one contract suite)."""

    def open_or_start(self, job_name: str, owner: str | None = None) -> OpenResult:
        """Start a run, resume the Paused one, or report the active one; race-safe."""

    def boot_recovery_sweep(
        self, owner: str | None = None, stale_after: float | None = None
    ) -> SweepResult:
        """Pause active (Running, CancelRequested) runs; how many (an int), and which.

        No arguments: the spec's sweep, every active run ("server restart mid-run"), for a
        single node, the embedded mode, or an operator after a full-fleet restart. With
        owner and/or stale_after, the fleet-safe form: only runs this (restarted) owner
        held, or silent for stale_after seconds: neither a checkpoint nor a heartbeat
        ("worker restart mid-run"). A swept run's lease epoch is bumped: whoever held it
        can no longer write to it.
        """

    def heartbeat_runs(self, leases: Mapping[str, int]) -> set[str]:
        """ONE statement: stamp heartbeat_at of the active runs held under these leases.

        leases maps run id -> lease epoch; the ids returned are still held (stamped). Any
        other id is no longer this process's run: its store must stop.
        """

    def list_runs(self, job_name: str | None = None, limit: int = 20) -> list[RunSummary]:
        """Runs (of one job name), newest first."""

    def count_runs(self, job_name: str | None = None) -> int:
        """How many runs (of one job name): planq's addition, for "showing N of M"."""

    def get_run_by_id(self, run_id: str | UUID) -> RunSummary | None:
        """One run, or None (unknown or purged). A UUID names the ULID with its 128 bits."""

    def request_cancel(self, job_name: str) -> str | None:
        """Running -> CancelRequested; the run id, or None when nothing was running."""

    def list_findings(
        self, run_id: str | UUID, limit: int = 100, offset: int = 0, after: str | None = None
    ) -> list[Finding]:
        """A run's findings in the order recorded, one page; `after` a finding id (keyset)."""

    def finding_severity_counts(self, run_id: str | UUID) -> dict[str, int]:
        """How many findings of each severity present, worst first (no zero entries)."""

    def purge_terminal_runs(self, retention_days: float) -> int:
        """Delete Completed/Failed runs (and findings) done over max(1, days) days ago."""


@runtime_checkable
class RecoverableJobHandler(Protocol):
    """A long scan. May also define count_total() -> int | None and progress_kind().

    It may also declare `params`, the arg keys it reads: a trigger with any other key is then
    refused with a "did you mean" (a misspelt key would otherwise be ignored silently).
    """

    @property
    def name(self) -> str:
        """Stable job name: it keys the one-active-run rule and the run history."""

    def run_resumable(
        self, store: RunStore, args: Mapping[str, Any], resume_cursor: bytes | None
    ) -> RunOutcome:
        """Scan from resume_cursor (None: from the start), checkpointing as it goes."""
