"""Recoverable runs: long scans that checkpoint, pause, cancel and resume after a crash."""

from __future__ import annotations

from planq.domain.redaction import describe_exception
from planq.domain.runs.engine import record_or_log, run_or_resume
from planq.domain.runs.findings import Finding, Severity
from planq.domain.runs.heartbeat import RunHeartbeat
from planq.domain.runs.job_outcome import ALREADY_RUNNING, JobOutcome
from planq.domain.runs.outcome import Completed, Failed, Paused, RunOutcome
from planq.domain.runs.ports import (
    AlreadyActive,
    Fresh,
    OpenResult,
    RecoverableJobHandler,
    Resumed,
    RunStore,
    RunStoreProvider,
)
from planq.domain.runs.progress import ProgressKind, RunProgress, derive_progress
from planq.domain.runs.status import (
    ACTIVE_RUN_STATUSES,
    NON_TERMINAL_RUN_STATUSES,
    TERMINAL_RUN_STATUSES,
    RunStatus,
)
from planq.domain.runs.summary import RunSummary
from planq.domain.runs.sweep import SweepResult

__all__ = [
    "ACTIVE_RUN_STATUSES",
    "ALREADY_RUNNING",
    "NON_TERMINAL_RUN_STATUSES",
    "TERMINAL_RUN_STATUSES",
    "AlreadyActive",
    "Completed",
    "Failed",
    "Finding",
    "Fresh",
    "JobOutcome",
    "OpenResult",
    "Paused",
    "ProgressKind",
    "RecoverableJobHandler",
    "Resumed",
    "RunHeartbeat",
    "RunOutcome",
    "RunProgress",
    "RunStatus",
    "RunStore",
    "RunStoreProvider",
    "RunSummary",
    "Severity",
    "SweepResult",
    "derive_progress",
    "describe_exception",
    "record_or_log",
    "run_or_resume",
]
