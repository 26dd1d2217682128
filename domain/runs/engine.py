"""The run engine: open or resume, dispatch to the handler, and alone write the final state."""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any
from uuid import UUID

from planq.domain.bounds import check_job_name
from planq.domain.errors import BoundsError, RunFencedError, RunNotActiveError
from planq.domain.redaction import BUILTIN, Redactor, describe_exception
from planq.domain.runs.checks import check_args, check_owner, check_total
from planq.domain.runs.findings import Finding, Severity
from planq.domain.runs.heartbeat import RunHeartbeat
from planq.domain.runs.job_outcome import JobOutcome
from planq.domain.runs.outcome import Completed, Failed, Paused, RunOutcome
from planq.domain.runs.ports import (
    AlreadyActive,
    Fresh,
    RecoverableJobHandler,
    Resumed,
    RunStore,
    RunStoreProvider,
)
from planq.domain.runs.progress import ProgressKind
from planq.domain.runs.status import RunStatus
from planq.domain.runs.summary import RunSummary

log = logging.getLogger(__name__)


def run_or_resume(
    handler: RecoverableJobHandler,
    provider: RunStoreProvider,
    args: Mapping[str, Any] | None = None,
    owner: str | None = None,
    heartbeat: RunHeartbeat | None = None,
    redactor: Redactor = BUILTIN,
) -> JobOutcome:
    """Run the handler's job once: fresh, resumed from its cursor, or skipped if already active.

    A handler name, owner or args out of bounds raise BoundsError before the ledger is
    touched. Like the spec, it never raises for a store failure: a failed open is an error outcome
    ("open_or_start failed: …"), a failed stats read counts as zero, and a failed final
    write is logged (the run stays active; a sweep pauses it later, so nothing is lost).
    An exception escaping the handler is the spec's panic: the run ends Paused with the
    redacted error and its last checkpoint, and the next trigger resumes it.

    Fencing: the store holds the run under a lease epoch, and `heartbeat` (the process's
    RunHeartbeat; planq's Celery task always passes one) keeps the run alive in the ledger
    while the handler works, however rarely it checkpoints. When this process loses the
    run (swept, then resumed by another worker), the handler's next status() or write
    raises RunFencedError; the engine then stops and writes nothing: no final state, no
    pause, and the outcome says the run was lost (`lost`, not ok, status None).

    Every error it stores, reports or logs passes through `redactor` (planq's Celery task
    passes the one built from settings; the spec's call gets the built-in patterns).
    """
    check_job_name(handler.name)  # bad input is the caller's BoundsError, before any write
    check_owner(owner)
    arguments = check_args(args)
    try:
        opened = provider.open_or_start(handler.name, owner=owner)
    except Exception as exc:
        message = f"open_or_start failed: {describe_exception(exc, redactor)}"
        log.error("job %s: %s", handler.name, message)
        return JobOutcome(ok=False, message=message, error=message)
    if isinstance(opened, AlreadyActive):
        log.info("job %s skipped: run %s is %s", handler.name, opened.run_id, opened.status)
        return JobOutcome.already_running(opened.run_id, opened.status)
    store = opened.store
    resume_cursor = opened.cursor if isinstance(opened, Resumed) else None
    if heartbeat is not None:
        heartbeat.track(store)
    try:
        if isinstance(opened, Fresh):
            _seed_progress(handler, store, redactor)
        outcome = _dispatch(handler, store, arguments, resume_cursor, redactor)
    finally:
        if heartbeat is not None:
            heartbeat.untrack(store)
    if isinstance(outcome, _Lost):
        return _lost(handler, store, outcome.error)
    if _lease_lost(store):  # the handler swallowed it, or the heartbeat saw it last
        return _lost(handler, store, _fence_error(store))
    stats = _fetch_stats(provider, store.run_id, redactor)  # before the final write (spec)
    try:
        moved, write_error = _finish(store, outcome, redactor)
    except RunFencedError as exc:
        return _lost(handler, store, exc)
    report = _report(provider, store.run_id, outcome, stats, moved, write_error, redactor)
    level = logging.INFO if report.ok else logging.WARNING
    log.log(level, "job %s: %s", handler.name, report.message)
    return report


def _lease_lost(store: RunStore) -> bool:
    return bool(getattr(store, "lease_lost", False))


def _fence_error(store: RunStore) -> RunFencedError:
    """The error the store raises now that it knows it lost the run (no ledger read)."""
    fallback = RunFencedError(store.run_id, int(getattr(store, "lease_epoch", 0)), None, None)
    try:
        store.status()
    except RunFencedError as exc:
        return exc
    except Exception:
        return fallback
    return fallback


def _lost(handler: RecoverableJobHandler, store: RunStore, error: RunFencedError) -> JobOutcome:
    """The outcome of a trigger whose process lost its run: nothing more was written."""
    message = (
        f"lost the run: {error}; stopped without writing anything more (run_id={store.run_id})"
    )
    log.warning("job %s: %s", handler.name, message)
    return JobOutcome(ok=False, run_id=store.run_id, message=message, error=message, lost=True)


def record_or_log(
    store: RunStore,
    kind: str,
    severity: Severity | str,
    resource_id: UUID | str | None = None,
    detail: dict[str, Any] | None = None,
    redactor: Redactor = BUILTIN,
) -> Finding | None:
    """Record a finding; a failed write is logged, never raised, so the scan goes on.

    Except when the run is no longer active or no longer ours (RunNotActiveError, and its
    RunFencedError): that is raised, so the handler stops instead of scanning for nobody.
    """
    try:
        return store.record_finding(kind, severity, resource_id, detail)
    except RunNotActiveError:
        raise
    except Exception as exc:
        log.warning(
            "run %s: could not record finding %s on %s: %s",
            store.run_id,
            kind,
            resource_id,
            describe_exception(exc, redactor),
        )
        return None


def _progress_kind(handler: RecoverableJobHandler, redactor: Redactor) -> ProgressKind:
    """The handler's progress_kind(), or count when it has none (or it misbehaves)."""
    method = getattr(handler, "progress_kind", None)
    if not callable(method):
        return ProgressKind.count
    try:
        return ProgressKind(method())
    except Exception as exc:
        log.warning(
            "job %s: progress_kind() failed: %s", handler.name, describe_exception(exc, redactor)
        )
        return ProgressKind.count


def _seed_progress(handler: RecoverableJobHandler, store: RunStore, redactor: Redactor) -> None:
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
                describe_exception(exc, redactor),
            )
    try:
        store.seed_progress_params(total, _progress_kind(handler, redactor))
    except Exception as exc:
        log.warning(
            "run %s: could not seed progress: %s", store.run_id, describe_exception(exc, redactor)
        )


@dataclass(frozen=True, slots=True)
class _Panicked:
    """The handler raised (the spec's panic): pause at the last checkpoint, keep the error."""

    error: str


@dataclass(frozen=True, slots=True)
class _Lost:
    """The handler hit the fence: this process no longer owns the run; write nothing."""

    error: RunFencedError


@dataclass(frozen=True, slots=True)
class _Stats:
    """The run as stored when the handler returned; zeros when it could not be read."""

    scanned_count: int = 0
    finding_count: int = 0
    cursor_hex: str | None = None
    severity_counts: dict[str, int] = field(default_factory=dict)


def _dispatch(
    handler: RecoverableJobHandler,
    store: RunStore,
    args: Mapping[str, Any],
    resume_cursor: bytes | None,
    redactor: Redactor,
) -> RunOutcome | _Panicked | _Lost:
    """Call the handler; an exception or a wrong return value is a panic (never Failed).

    RunFencedError (raised by status() or a write of a run this process lost) is not a
    panic: it means stop, and write nothing.
    """
    try:
        outcome = handler.run_resumable(store, args, resume_cursor)
    except RunFencedError as exc:
        return _Lost(exc)
    except Exception as exc:
        message = describe_exception(exc, redactor)
        log.error("job %s run %s raised: %s", handler.name, store.run_id, message)
        log.debug("job %s run %s traceback", handler.name, store.run_id, exc_info=True)
        return _Panicked(message)
    if not isinstance(outcome, Completed | Paused | Failed):
        message = f"TypeError: handler returned {type(outcome).__name__}, not a RunOutcome"
        log.error("job %s run %s: %s", handler.name, store.run_id, message)
        return _Panicked(message)
    return outcome


def _fetch_stats(provider: RunStoreProvider, run_id: str, redactor: Redactor) -> _Stats:
    """Counts and cursor for the report; severities only queried when there are findings."""
    try:
        summary = provider.get_run_by_id(run_id)
    except Exception as exc:
        log.warning(
            "run %s: could not read its stats: %s", run_id, describe_exception(exc, redactor)
        )
        return _Stats()
    if summary is None:
        return _Stats()
    counts: dict[str, int] = {}
    if summary.finding_count > 0:
        try:
            counts = dict(provider.finding_severity_counts(run_id))
        except Exception as exc:
            log.warning(
                "run %s: could not count findings by severity: %s",
                run_id,
                describe_exception(exc, redactor),
            )
    return _Stats(summary.scanned_count, summary.finding_count, summary.cursor_hex, counts)


def _finish(
    store: RunStore, outcome: RunOutcome | _Panicked, redactor: Redactor
) -> tuple[bool, str | None]:
    """Write the final state; (whether the run was still active to take it, write error).

    RunFencedError (the run is no longer ours) propagates: the caller reports it lost.
    """
    op = {
        Completed: "mark_completed",
        Paused: "mark_paused",
        _Panicked: "mark_paused",
        Failed: "mark_failed",
    }[type(outcome)]
    try:
        if isinstance(outcome, Completed):
            return store.mark_completed(), None
        if isinstance(outcome, Paused):
            try:
                return store.mark_paused(outcome.cursor), None
            except BoundsError as exc:  # a handler bug: keep the last checkpoint instead
                refused = f"Paused with a cursor the store refuses ({exc}); last checkpoint kept"
                log.warning("run %s: %s", store.run_id, refused)
                return store.mark_paused(None, error_message=refused), None
        if isinstance(outcome, _Panicked):
            return store.mark_paused(None, error_message=outcome.error), None
        return store.mark_failed(redactor(outcome.message)), None
    except RunFencedError:
        raise
    except Exception as exc:
        error = f"{op} failed: {describe_exception(exc, redactor)}"
        log.warning(
            "run %s: %s; the run stays active until a recovery sweep pauses it",
            store.run_id,
            error,
        )
        return False, error


def _outcome_name(outcome: RunOutcome | _Panicked) -> str:
    return "Paused" if isinstance(outcome, _Panicked) else type(outcome).__name__


def _report(
    provider: RunStoreProvider,
    run_id: str,
    outcome: RunOutcome | _Panicked,
    stats: _Stats,
    moved: bool,
    write_error: str | None,
    redactor: Redactor,
) -> JobOutcome:
    """The report of what the handler returned, as the spec builds it, from stats read first."""
    tail = f"(run_id={run_id})"
    counts: dict[str, Any] = {
        "run_id": run_id,
        "finding_count": stats.finding_count,
        "scanned_count": stats.scanned_count,
        "severity_counts": dict(stats.severity_counts),
    }
    if not moved and write_error is None:  # swept, purged or ended elsewhere meanwhile
        current = _read_back(provider, run_id, redactor)
        state = current.status.as_str() if current is not None else "gone"
        message = (
            f"run was already {state} when the engine tried to record "
            f"{_outcome_name(outcome)} {tail}"
        )
        return JobOutcome(
            ok=False,
            status=current.status if current is not None else None,
            cursor_hex=current.cursor_hex if current is not None else stats.cursor_hex,
            message=message,
            **counts,
        )
    report = _intended(outcome, stats, counts, tail, redactor)
    if write_error is not None:  # the spec's log-only final write: report, status unknown
        return dataclasses.replace(report, status=None, message=f"{report.message}; {write_error}")
    return report


def _intended(
    outcome: RunOutcome | _Panicked,
    stats: _Stats,
    counts: dict[str, Any],
    tail: str,
    redactor: Redactor,
) -> JobOutcome:
    """The report of the final state the engine wrote for this outcome."""
    if isinstance(outcome, Completed):
        return JobOutcome(
            ok=True,
            completed=True,
            status=RunStatus.Completed,
            cursor_hex=stats.cursor_hex,
            message=(
                f"completed: scanned {stats.scanned_count}, {stats.finding_count} findings {tail}"
            ),
            **counts,
        )
    if isinstance(outcome, Paused):
        cursor_hex = outcome.cursor.hex()
        return JobOutcome(
            ok=True,
            paused=True,
            status=RunStatus.Paused,
            cursor_hex=cursor_hex,
            message=f"paused at cursor {cursor_hex!r} {tail}",
            **counts,
        )
    if isinstance(outcome, _Panicked):
        cursor_hex = stats.cursor_hex or ""  # a resume starts from b"" without a checkpoint
        return JobOutcome(
            ok=False,
            paused=True,
            status=RunStatus.Paused,
            cursor_hex=cursor_hex,
            error=outcome.error,
            message=(
                f"{outcome.error} {tail}: paused at cursor {cursor_hex!r}, "
                "the next trigger resumes it"
            ),
            **counts,
        )
    error = redactor(outcome.message)
    return JobOutcome(
        ok=False,
        status=RunStatus.Failed,
        cursor_hex=stats.cursor_hex,
        error=error,
        message=f"{error} {tail}",
        **counts,
    )


def _read_back(provider: RunStoreProvider, run_id: str, redactor: Redactor) -> RunSummary | None:
    """The run as stored now, or None when it is gone or cannot be read."""
    try:
        return provider.get_run_by_id(run_id)
    except Exception as exc:
        log.warning("run %s: could not read it back: %s", run_id, describe_exception(exc, redactor))
        return None
