"""Recoverable runs' operator actions: trigger, cancel, purge, find (one door each).

The CLI, the HTTP API and the dashboard call these; each raises domain errors. A trigger
decides now (skip while a run is active, resume a Paused one, or start), then sends one
message; the worker makes the same decision again race-safely (one non-terminal run per
job name).
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass

from celery import Celery
from kombu.utils.uuid import uuid

from planq.domain.bounds import MAX_RETENTION_DAYS
from planq.domain.errors import (
    BoundsError,
    NoRunningRunError,
    UnknownRecoverableJobError,
    UnknownRunArgError,
)
from planq.domain.runs import RecoverableJobHandler, RunStatus, RunStoreProvider, RunSummary
from planq.domain.runs.checks import check_param
from planq.domain.spelling import closest
from planq.tasks import trigger_slot
from planq.tasks.job_service import Ready, ready_now
from planq.tasks.ledger_consistency import JOB_NAME, ScanParams

#: A recoverable job's Celery task is `planq.runs.<job name>`.
TASK_PREFIX = "planq.runs."


def task_name(job_name: str) -> str:
    """The Celery task name of a recoverable job."""
    return f"{TASK_PREFIX}{job_name}"


def registered_jobs(app: Celery) -> dict[str, RecoverableJobHandler]:
    """The recoverable jobs registered on app, by name (none on an app planq did not build)."""
    holder = getattr(app, "planq", None)
    return dict(holder.handlers) if holder is not None else {}


@dataclass(frozen=True)
class TriggerResult:
    """What a trigger decided synchronously, and the run the worker took (when seen in time)."""

    job_name: str
    decision: str  #: "fresh", "resumed", "already_running" or "already_queued"
    task_id: str | None  #: the queued trigger's when "already_queued"
    run: RunSummary | None  #: the active/resumed/new run; None if no worker opened it yet


class RunService:
    """Trigger, cancel and purge recoverable runs on this process's ledger."""

    def __init__(self, app: Celery, store: RunStoreProvider) -> None:
        self.app = app
        self.store = store

    def handler(self, name: str) -> RecoverableJobHandler:
        """The registered handler named; UnknownRecoverableJobError listing the known ones."""
        handlers = registered_jobs(self.app)
        if name not in handlers:
            raise UnknownRecoverableJobError(name, list(handlers))
        return handlers[name]

    def check_args(self, handler: RecoverableJobHandler, args: dict[str, str]) -> dict[str, str]:
        """Refuse bad trigger args before anything is sent.

        Every key and value is checked against the run params' bounds. A handler that
        declares `params` (the keys it reads: planq's own scan does) has a closed set: an
        unknown key is refused naming the one it most likely misspells, since the run
        would silently ignore it.
        """
        for key, value in args.items():
            check_param(key, value)
        known = getattr(handler, "params", None)
        if known is not None:
            for key in args:
                if key not in known:
                    meant = closest(key, known)
                    hint = f"did you mean {meant}? " if meant else ""
                    takes = ", ".join(sorted(known)) or "none"
                    raise UnknownRunArgError(
                        f"arg {key[:80]!r} is not one {handler.name} takes; {hint}"
                        f"(it takes: {takes})"
                    )
        if handler.name == JOB_NAME:
            for key, value in args.items():
                ScanParams.parse(key, value)
        return args

    def trigger(
        self,
        name: str,
        args: dict[str, str],
        wait: float = 5.0,
        poll: float = 0.05,
        ready: Ready = ready_now,
    ) -> TriggerResult:
        """Decide now, then send (`ready` first: the caller's broker check).

        A trigger already queued and not yet taken by a worker coalesces this one (nothing
        is sent: "already_queued"). This call waits up to `wait` seconds to report the run
        the worker opened.
        """
        self.check_args(self.handler(name), args)
        newest = self.store.list_runs(name, limit=1)
        latest = newest[0] if newest else None
        if latest is not None and latest.status.is_active:
            return TriggerResult(name, "already_running", None, latest)
        ready()
        resumed = latest is not None and latest.status is RunStatus.Paused
        kwargs = {"args": args} if args else {}
        task_id = uuid()
        queued = trigger_slot.hold(self.app, name, task_id)
        if queued is not None:
            return TriggerResult(name, "already_queued", queued, latest)
        try:
            sent = self.app.tasks[task_name(name)].apply_async(kwargs=kwargs, task_id=task_id)
        except Exception:
            trigger_slot.release(self.app, name, task_id)
            raise
        run = self._opened(name, latest, resumed, time.monotonic() + wait, poll)
        taken = run if run is not None else (latest if resumed else None)  # a resume's id
        decision = "resumed" if resumed else "fresh"
        return TriggerResult(name, decision, getattr(sent, "id", None), taken)

    def _opened(
        self, name: str, latest: RunSummary | None, resumed: bool, deadline: float, poll: float
    ) -> RunSummary | None:
        """The run the worker opened (or resumed) for this trigger, by the deadline."""
        while True:
            runs = self.store.list_runs(name, limit=1)
            run = runs[0] if runs else None
            if run is not None and latest is not None and run.id == latest.id:
                moved = run.last_progress_at != latest.last_progress_at
                opened = resumed and (run.status is not RunStatus.Paused or moved)
            else:
                opened = run is not None
            if opened:
                return run
            if time.monotonic() >= deadline:
                return None
            time.sleep(poll)

    def cancel(self, name: str, *, registered_only: bool = True) -> str:
        """Ask the Running run of name to pause at its next batch; its id.

        registered_only=False (the CLI) accepts any job name with runs: the workers may
        know handlers this process does not. NoRunningRunError when none is Running.
        """
        if registered_only:
            self.handler(name)
        run_id = self.store.request_cancel(name)
        if run_id is None:
            latest = self.store.list_runs(name, limit=1)
            raise NoRunningRunError(name, latest[0].status.as_str() if latest else None)
        return str(run_id)

    def purge(self, retention_days: float) -> tuple[int, float]:
        """(purged, days applied): ended runs older than max(1, days); active runs never."""
        days = float(retention_days)
        if not math.isfinite(days) or days > MAX_RETENTION_DAYS:
            raise BoundsError(
                "retention days", f"finite and at most {MAX_RETENTION_DAYS:g}", str(days)
            )
        days = max(1.0, days)
        return int(self.store.purge_terminal_runs(days)), days
