"""Recoverable runs: long scans that checkpoint, pause, cancel and resume after a crash.

Its public names load on first use (domain/exports.py): the ledger's table models read one
submodule (findings' severities) without loading the run engine.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from planq.domain.exports import lazy_exports

if TYPE_CHECKING:  # what type checkers see: the names, as if imported here (see __all__)
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

EXPORTS: dict[str, tuple[str, ...]] = {
    "planq.domain.redaction": ("describe_exception",),
    "planq.domain.runs.engine": (
        "record_or_log",
        "run_or_resume",
    ),
    "planq.domain.runs.findings": (
        "Finding",
        "Severity",
    ),
    "planq.domain.runs.heartbeat": ("RunHeartbeat",),
    "planq.domain.runs.job_outcome": (
        "ALREADY_RUNNING",
        "JobOutcome",
    ),
    "planq.domain.runs.outcome": (
        "Completed",
        "Failed",
        "Paused",
        "RunOutcome",
    ),
    "planq.domain.runs.ports": (
        "AlreadyActive",
        "Fresh",
        "OpenResult",
        "RecoverableJobHandler",
        "Resumed",
        "RunStore",
        "RunStoreProvider",
    ),
    "planq.domain.runs.progress": (
        "ProgressKind",
        "RunProgress",
        "derive_progress",
    ),
    "planq.domain.runs.status": (
        "ACTIVE_RUN_STATUSES",
        "NON_TERMINAL_RUN_STATUSES",
        "TERMINAL_RUN_STATUSES",
        "RunStatus",
    ),
    "planq.domain.runs.summary": ("RunSummary",),
    "planq.domain.runs.sweep": ("SweepResult",),
}
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
]  # the EXPORTS' names (tests/unit/test_lazy_exports.py)
__getattr__ = lazy_exports(__name__, EXPORTS)
