"""ledger_consistency: a recoverable scan of the job ledger that records what does not add up.

It walks `async_jobs` in job_id order (keyset pages, cursor = the last job_id), and for each
row records a finding when:

- a running job's heartbeat is older than job_timeout   -> inconsistent, "stale_heartbeat"
- a plan disagrees with its latest job (phase, or the   -> inconsistent, "plan_job_mismatch"
  status the job's outcome gives the plan), or is gone
- the payload no longer deserializes, or names another  -> data_loss, "corrupt_payload"
  plan or phase than its row

Findings and the checkpoint are written in ONE transaction (when the run store shares the
handler's Database, as in planq's runtime), so a crash between checkpoints re-scans the rows
after the last checkpoint without recording any finding twice.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping
from contextlib import AbstractContextManager
from dataclasses import dataclass, field, fields
from datetime import datetime, timedelta
from typing import Any, Protocol, TypeVar

from planq.domain.clock import as_utc, utcnow
from planq.domain.jobs import AsyncJobStatus, deserialize_job_payload
from planq.domain.outage import ride_out_outage
from planq.domain.redaction import BUILTIN, Redactor
from planq.domain.runs import (
    Completed,
    Failed,
    Paused,
    ProgressKind,
    RunOutcome,
    RunStatus,
    RunStore,
    Severity,
)
from planq.domain.transitions import PLAN_STATUS_FOR_JOB

logger = logging.getLogger("planq.runs.ledger_consistency")
T = TypeVar("T")

JOB_NAME = "ledger_consistency"
STALE_HEARTBEAT = "stale_heartbeat"
PLAN_JOB_MISMATCH = "plan_job_mismatch"
CORRUPT_PAYLOAD = "corrupt_payload"
_RETRY_DEADLINE = 60.0


class LedgerScan(Protocol):
    """What the scan reads (its SQL is `store/ledger_scan.py`; the Runtime hands one in)."""

    def estimated_jobs(self) -> int:
        """About how many rows async_jobs holds."""

    def page(self, after_job_id: str, limit: int) -> list[dict[str, Any]]:
        """The next keyset page of jobs (with their plans) after after_job_id."""

    def transaction(self) -> AbstractContextManager[None]:
        """One transaction for the findings and the checkpoint."""


@dataclass(frozen=True)
class ScanParams:
    """How the scan paces itself; each can be set per run (args or a string param)."""

    batch_size: int = 500
    checkpoint_rows: int = 1000
    checkpoint_seconds: float = 30.0
    batch_delay: float = 0.0  #: seconds to sleep between batches (throttling, and tests)

    _LIMITS = {  # a class-level table (no annotation), not a field
        "batch_size": (int, 1, 10_000),
        "checkpoint_rows": (int, 1, 1_000_000),
        "checkpoint_seconds": (float, 0.1, 3600.0),
        "batch_delay": (float, 0.0, 60.0),
    }

    @classmethod
    def parse(cls, key: str, raw: object) -> int | float:
        """One value, checked against its bounds; ValueError names the key."""
        kind, low, high = cls._LIMITS[key]
        try:
            value: int | float = kind(str(raw))
        except ValueError:
            raise ValueError(f"{JOB_NAME} param {key} must be a number, got {raw!r}") from None
        if not low <= value <= high:
            raise ValueError(f"{JOB_NAME} param {key} must be in [{low}, {high}], got {raw!r}")
        return value

    @classmethod
    def for_run(cls, store: RunStore, args: Mapping[str, Any]) -> ScanParams:
        """Args win and are stored on the run (a resume keeps them); else stored; else default."""
        for key in cls._LIMITS:
            if key in args and args[key] is not None:
                cls.parse(key, args[key])  # refuse a bad value before it is stored
                store.set_string_param(key, str(args[key]))
        values: dict[str, Any] = {}
        for key in cls._LIMITS:
            stored = store.get_string_param(key)
            if stored is not None:
                values[key] = cls.parse(key, stored)
        return cls(**values)


@dataclass(frozen=True)
class PendingFinding:
    """A finding held until the next checkpoint, so both are written together."""

    kind: str
    severity: Severity
    resource_id: str
    detail: dict[str, Any]


@dataclass
class _Progress:
    """Where the scan is, and what it has not checkpointed yet."""

    cursor: bytes
    rows: int = 0
    findings: list[PendingFinding] = field(default_factory=list)
    since: float = field(default_factory=time.monotonic)


def _retrying(fn: Callable[[], T], what: str) -> T:
    """Retry while the database is away (a restart); anything else propagates at once."""
    return ride_out_outage(fn, what, budget=_RETRY_DEADLINE)


def _iso(value: datetime | None) -> str | None:
    return None if value is None else as_utc(value).isoformat()


class LedgerConsistencyHandler:
    """The recoverable job `ledger_consistency` (see the module docstring)."""

    name = JOB_NAME
    #: The args it reads (a closed set: `runs trigger --arg` refuses any other key).
    params = tuple(f.name for f in fields(ScanParams))

    def __init__(
        self,
        ledger: LedgerScan | Callable[[], LedgerScan],
        job_timeout: float | Callable[[], float],
        clock: Callable[[], datetime] = utcnow,
        redactor: Redactor = BUILTIN,
    ) -> None:
        self._ledger = ledger
        self._job_timeout = job_timeout
        self._clock = clock
        self.redactor = redactor

    @property
    def ledger(self) -> LedgerScan:
        """The ledger's pages (resolved per call: a worker process builds its own after fork)."""
        return self._ledger() if callable(self._ledger) else self._ledger

    @property
    def job_timeout(self) -> float:
        """Heartbeats older than this are stale."""
        return float(self._job_timeout() if callable(self._job_timeout) else self._job_timeout)

    def progress_kind(self) -> ProgressKind:
        """The ledger changes during a scan (new jobs, TTL cleanup): the total is an estimate."""
        return ProgressKind.approximate

    def count_total(self) -> int:
        """About how many rows async_jobs holds (for the progress bar; an estimate)."""
        return self.ledger.estimated_jobs()

    # -- the scan ------------------------------------------------------------------------
    def run_resumable(
        self, store: RunStore, args: Mapping[str, Any], resume_cursor: bytes | None
    ) -> RunOutcome:
        """Scan from resume_cursor to the end, checkpointing findings with the cursor.

        A bad param fails the run (retrying cannot fix it); anything else that raises is
        the engine's to handle: the run pauses at its last checkpoint, resumable.
        """
        try:
            params = ScanParams.for_run(store, args)
        except ValueError as exc:
            return Failed(str(exc))
        progress = _Progress(cursor=resume_cursor or b"")
        checkpointed = progress.cursor
        while True:
            status = store.status()
            if status is RunStatus.CancelRequested:
                self._flush(store, progress)
                return Paused(progress.cursor)
            if not status.is_active:  # swept or ended elsewhere: nothing more is ours to write
                logger.warning("run %s is %s; stopping the scan", store.run_id, status.as_str())
                return Paused(checkpointed)
            rows = _retrying(lambda: self._batch(progress.cursor, params.batch_size), "read batch")
            if not rows:
                self._flush(store, progress)
                return Completed()
            self._check_batch(rows, progress)
            progress.cursor = rows[-1]["job_id"].encode("ascii")
            progress.rows += len(rows)
            due = time.monotonic() - progress.since >= params.checkpoint_seconds
            if progress.rows >= params.checkpoint_rows or due:
                self._flush(store, progress)
                checkpointed = progress.cursor
            if params.batch_delay:
                time.sleep(params.batch_delay)

    def _flush(self, store: RunStore, progress: _Progress) -> None:
        """Write the held findings and the checkpoint in one transaction, then reset."""

        def write() -> None:
            with self.ledger.transaction():
                for f in progress.findings:
                    store.record_finding(f.kind, f.severity, f.resource_id, f.detail)
                store.checkpoint(progress.cursor, progress.rows)

        if progress.rows or progress.findings:
            _retrying(write, f"checkpoint of run {store.run_id}")
        progress.rows = 0
        progress.findings = []
        progress.since = time.monotonic()

    def _batch(self, cursor: bytes, limit: int) -> list[dict[str, Any]]:
        """The next keyset page after cursor (store/ledger_scan.py)."""
        return self.ledger.page(cursor.decode("ascii"), limit)

    def _check_batch(self, rows: list[dict[str, Any]], progress: _Progress) -> None:
        now = self._clock()
        cutoff = now - timedelta(seconds=self.job_timeout)
        for row in rows:
            for finding in (
                _stale_heartbeat(row, now, cutoff, self.job_timeout),
                _plan_job_mismatch(row),
                _corrupt_payload(row, self.redactor),
            ):
                if finding is not None:
                    progress.findings.append(finding)


def _stale_heartbeat(
    row: Mapping[str, Any], now: datetime, cutoff: datetime, job_timeout: float
) -> PendingFinding | None:
    """A running job whose heartbeat is missing or older than job_timeout."""
    if row["status"] != AsyncJobStatus.running.value:
        return None
    beat = row["last_heartbeat"]
    if beat is not None and as_utc(beat) >= cutoff:
        return None
    age = None if beat is None else round((now - as_utc(beat)).total_seconds(), 3)
    return PendingFinding(
        STALE_HEARTBEAT,
        Severity.inconsistent,
        row["job_id"],
        {
            "plan_id": row["plan_id"],
            "phase": row["phase"],
            "worker_id": row["worker_id"],
            "last_heartbeat": _iso(beat),
            "age_seconds": age,
            "job_timeout": job_timeout,
        },
    )


def _plan_job_mismatch(row: Mapping[str, Any]) -> PendingFinding | None:
    """The plan of a plan's latest job must show that job's phase and outcome."""
    if not row["is_latest"]:
        return None
    expected = PLAN_STATUS_FOR_JOB[AsyncJobStatus(row["status"])].value
    if row["plan_found"] is None:
        reason = "plan_missing"
    elif row["plan_phase"] != row["phase"]:
        reason = "phase_differs"
    elif row["plan_status"] != expected:
        reason = "status_differs"
    else:
        return None
    return PendingFinding(
        PLAN_JOB_MISMATCH,
        Severity.inconsistent,
        row["plan_id"],
        {
            "reason": reason,
            "job_id": row["job_id"],
            "job_phase": row["phase"],
            "job_status": row["status"],
            "plan_phase": row["plan_phase"],
            "plan_status": row["plan_status"],
            "expected_plan_status": expected,
        },
    )


def _corrupt_payload(row: Mapping[str, Any], redactor: Redactor) -> PendingFinding | None:
    """A payload that does not deserialize, or that names another plan or phase."""
    try:
        data = deserialize_job_payload(row["payload_json"])
    except ValueError as exc:
        reason = redactor.bounded(str(exc), 300)
    else:
        mismatched = [
            key
            for key in ("plan_id", "phase")
            if key in data and str(data[key]).upper() != str(row[key]).upper()
        ]
        if not mismatched:
            return None
        reason = f"payload {' and '.join(mismatched)} differ from the row"
    return PendingFinding(
        CORRUPT_PAYLOAD,
        Severity.data_loss,
        row["job_id"],
        {"plan_id": row["plan_id"], "phase": row["phase"], "reason": reason},
    )
