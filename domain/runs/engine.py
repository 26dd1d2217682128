"""The run engine: open or resume, dispatch to the handler, and alone write the final state."""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Mapping
from typing import Any

from domain.redaction import redact_secrets
from domain.runs.checks import check_total
from domain.runs.findings import Finding, Severity
from domain.runs.job_outcome import JobOutcome
from domain.runs.outcome import Completed, Failed, Paused, RunOutcome
from domain.runs.ports import (
    AlreadyActive,
    Fresh,
    RecoverableJobHandler,
    Resumed,
    RunStore,
    RunStoreProvider,
)
from domain.runs.progress import ProgressKind
from domain.runs.status import RunStatus
from domain.runs.summary import RunSummary

log = logging.getLogger(__name__)


def describe_exception(exc: BaseException) -> str:
    """'ExcType: message', redacted: what a failed run stores when its handler raised."""
    return redact_secrets(f"{type(exc).__name__}: {exc}")


def run_or_resume(
    handler: RecoverableJobHandler,
    provider: RunStoreProvider,
    args: Mapping[str, Any] | None = None,
    owner: str | None = None,
) -> JobOutcome:
    """Run the handler's job once: fresh, resumed from its cursor, or skipped if already active.

    A store failure while writing the final state propagates: the run stays active and the
    boot recovery sweep (or the staleness bound) pauses it later, so nothing is lost.
    """
    opened = provider.open_or_start(handler.name, owner=owner)
    if isinstance(opened, AlreadyActive):
        log.info("job %s skipped: run %s is %s", handler.name, opened.run_id, opened.status)
        return JobOutcome.already_running(opened.run_id, opened.status)
    store = opened.store
    resume_cursor = opened.cursor if isinstance(opened, Resumed) else None
    if isinstance(opened, Fresh):
        _seed_progress(handler, store)
    outcome = _dispatch(handler, store, dict(args or {}), resume_cursor)
    moved = _finish(store, outcome)
    return _report(provider, store.run_id, outcome, moved)


def record_or_log(
    store: RunStore,
    kind: str,
    severity: Severity | str,
    resource_id: str | None = None,
    detail: dict[str, Any] | None = None,
) -> Finding | None:
    """Record a finding; a failed write is logged, never raised, so the scan goes on."""
    try:
        return store.record_finding(kind, severity, resource_id, detail)
    except Exception as exc:
        log.warning(
            "run %s: could not record finding %s on %s: %s",
            store.run_id,
            kind,
            resource_id,
            describe_exception(exc),
        )
        return None


def _progress_kind(handler: RecoverableJobHandler) -> ProgressKind:
    """The handler's progress_kind(), or count when it has none (or it misbehaves)."""
    method = getattr(handler, "progress_kind", None)
    if not callable(method):
        return ProgressKind.count
    try:
        return ProgressKind(method())
    except Exception as exc:
        log.warning("job %s: progress_kind() failed: %s", handler.name, describe_exception(exc))
        return ProgressKind.count


def _seed_progress(handler: RecoverableJobHandler, store: RunStore) -> None:
    """Count the total once, at a fresh start; a failure leaves progress unknown, no more."""
    total: int | None = None
    method = getattr(handler, "count_total", None)
    if callable(method):
        try:
            total = check_total(method())
        except Exception as exc:
            log.warning(
                "job %s run %s: count_total() failed, progress unknown: %s",
                handler.name,
                store.run_id,
                describe_exception(exc),
            )
    try:
        store.seed_progress_params(total, _progress_kind(handler))
    except Exception as exc:
        log.warning("run %s: could not seed progress: %s", store.run_id, describe_exception(exc))


def _dispatch(
    handler: RecoverableJobHandler,
    store: RunStore,
    args: Mapping[str, Any],
    resume_cursor: bytes | None,
) -> RunOutcome:
    """Call the handler; an exception or a wrong return value becomes Failed."""
    try:
        outcome = handler.run_resumable(store, args, resume_cursor)
    except Exception as exc:
        message = describe_exception(exc)
        log.error("job %s run %s raised: %s", handler.name, store.run_id, message)
        log.debug("job %s run %s traceback", handler.name, store.run_id, exc_info=True)
        return Failed(message)
    if not isinstance(outcome, Completed | Paused | Failed):
        return Failed(f"handler returned {type(outcome).__name__}, not a RunOutcome")
    return outcome


def _finish(store: RunStore, outcome: RunOutcome) -> bool:
    """Write the final state from the outcome; whether the run was still active to take it."""
    if isinstance(outcome, Completed):
        return store.mark_completed()
    if isinstance(outcome, Paused):
        return store.mark_paused(outcome.cursor)
    return store.mark_failed(redact_secrets(outcome.message))


def _outcome_name(outcome: RunOutcome) -> str:
    return type(outcome).__name__


def _message(summary: RunSummary, outcome: RunOutcome, moved: bool) -> str:
    """One line for logs and task results; it always ends with the run id."""
    if not moved:
        return (
            f"run was already {summary.status.as_str()} when the engine tried to record "
            f"{_outcome_name(outcome)}; run {summary.id}"
        )
    if summary.status is RunStatus.Completed:
        return (
            f"completed: scanned {summary.scanned_count}, "
            f"{summary.finding_count} findings; run {summary.id}"
        )
    if summary.status is RunStatus.Paused:
        return f"paused at cursor {summary.cursor}; run {summary.id}"
    return f"failed: {summary.error_message}; run {summary.id}"


def _report(
    provider: RunStoreProvider, run_id: str, outcome: RunOutcome, moved: bool
) -> JobOutcome:
    """Read the run back as stored, so the report says what the ledger says."""
    summary = provider.get_run_by_id(run_id)
    if summary is None:
        return JobOutcome(ok=False, run_id=run_id, message=f"run vanished; run {run_id}")
    counts = provider.finding_severity_counts(run_id)
    report = JobOutcome.from_summary(summary, counts, _message(summary, outcome, moved))
    if not moved:
        log.warning("%s", report.message)
        return dataclasses.replace(report, ok=False)
    log.info("job %s: %s", summary.job_name, report.message)
    return report
