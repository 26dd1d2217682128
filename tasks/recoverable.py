"""Recoverable runs on Celery: one task per handler, the boot recovery sweep, shutdown pause.

- `register_recoverable_job(app, handler, interval)` makes the task `planq.runs.<name>`
  (routed to the `planq.runs` queue). A trigger (`.delay()`, beat, an operator) calls
  `run_or_resume`: it starts a run, resumes the Paused one from its cursor, or is skipped
  (`already_running`) while another run of the name is active; a trigger sent while
  another is still queued is coalesced into it (`tasks/trigger_slot.py`, `already_queued`).
  The task has NO wall-clock
  limit and is acked on receipt: the run's row, not the message, carries the state, and a
  redelivered message must not resume a crashed run behind an operator's back.
- Cancellation is cooperative: `request_cancel(app, name)` flips the row to CancelRequested;
  the handler's next `status()` poll sees it and returns Paused(cursor).
- The boot sweep runs on `worker_init` (sent once per worker node, in the parent process,
  by the CLI worker and by `start_worker` alike; `worker_ready` is CLI-only). It pauses only
  runs owned by this node name, or silent for longer than `stale_after`: never a run a live
  worker still owns. Owner = the Celery node name (`name@host`), stable across a restart.
- A warm shutdown (CLI worker) asks this node's Running runs to stop: they end Paused at
  their next batch with the cursor kept, instead of holding the shutdown for hours.
- Fencing: each process has ONE run heartbeat (`Runtime.run_heartbeat`, rebuilt after fork)
  that stamps every run it holds in one statement per interval (stale_after / 6, at most
  10 s), so the stale sweep never pauses a live run that checkpoints rarely. A run this
  process lost (swept while it was frozen, then resumed elsewhere) refuses its writes
  (lease epoch in every WHERE); the trigger stops and writes nothing.
"""

from __future__ import annotations

import logging
import re
import threading
from typing import Any

from celery import Celery, Task
from celery.exceptions import Ignore
from celery.utils.saferepr import saferepr

from planq.domain.outage import ride_out_outage
from planq.domain.redaction import Redactor
from planq.domain.runs import RecoverableJobHandler, RunStatus, SweepResult, run_or_resume
from planq.tasks import metrics, tracing, trigger_slot
from planq.tasks.ledger_consistency import JOB_NAME as LEDGER_CONSISTENCY
from planq.tasks.ledger_consistency import LedgerConsistencyHandler
from planq.tasks.run_service import registered_jobs, task_name
from planq.tasks.runtime import holder_of, run_owner_name, runtime_for
from planq.tasks.traced_runs import traced_runs

logger = logging.getLogger("planq.runs")

BEAT_PREFIX = "planq-runs-"
SWEEP_RETRY_DEADLINE = 10.0
_NAME = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,199}")


class RunFailed(Exception):
    """A run that ended Failed: its redacted message, so Flower shows FAILURE, not SUCCESS.

    Paused, Completed and a skipped trigger return the JobOutcome's dict (SUCCESS); a
    Failed run, or a trigger that could not open its run, raises this (FAILURE); a trigger
    that lost its run to another owner is IGNORED. The task is acked on receipt, so
    raising never redelivers.
    """


class TriggerTask(Task):  # type: ignore[misc]
    """A recoverable job's task: its args reach Flower (task-received) redacted.

    A trigger's args are an operator's input (`{"batch_size": …}`) and travel in the
    message's argsrepr/kwargsrepr, which Flower shows: they pass through the app's one
    redactor (the runtime config's) before the message leaves.
    """

    def apply_async(self, args: Any = None, kwargs: Any = None, **options: Any) -> Any:
        """Publish with redacted argsrepr/kwargsrepr (unless the caller gave its own)."""
        redactor: Redactor = self.app.planq.config.redactor
        options.setdefault("argsrepr", redactor(saferepr(tuple(args or ()))))
        options.setdefault("kwargsrepr", redactor(saferepr(dict(kwargs or {}))))
        return super().apply_async(args, kwargs, **options)


def owner_for(app: Celery, request: Any = None) -> str:
    """The node name of the worker running a task of app in this process.

    The one worker_init recorded comes first: `task.request.hostname` is the node name only
    under the CLI worker (others put the machine's hostname there).
    """
    return holder_of(app).run_owner or run_owner_name(getattr(request, "hostname", None))


def check_handler(handler: object) -> str:
    """The handler's job name; TypeError/ValueError saying what is wrong with it."""
    name = getattr(handler, "name", None)
    if not isinstance(name, str):
        raise TypeError(
            f"recoverable job handler {handler!r} needs a str attribute `name`, "
            f"got {type(name).__name__}"
        )
    if not _NAME.fullmatch(name):
        raise ValueError(
            f"recoverable job name {name!r} must be 1-200 characters of letters, digits, "
            "'_', '.' or '-' (it becomes the task name planq.runs.<name>)"
        )
    if not callable(getattr(handler, "run_resumable", None)):
        raise TypeError(f"recoverable job handler {name!r} needs a callable run_resumable()")
    for optional in ("count_total", "progress_kind"):
        if hasattr(handler, optional) and not callable(getattr(handler, optional)):
            raise TypeError(f"recoverable job handler {name!r}: {optional} must be callable")
    return name


def check_interval(interval: object) -> float | None:
    """A beat interval in seconds; None or 0 means no beat entry."""
    if interval is None:
        return None
    if isinstance(interval, bool) or not isinstance(interval, int | float):
        raise TypeError(f"interval must be a number of seconds or None, got {interval!r}")
    if interval < 0:
        raise ValueError(f"interval must be >= 0 seconds (0: no beat entry), got {interval!r}")
    return float(interval) or None


def _refuse_time_limits(app: Celery) -> None:
    """A global limit would apply to these tasks too (Celery falls back to it)."""
    for setting in ("task_time_limit", "task_soft_time_limit"):
        if app.conf.get(setting):
            raise ValueError(
                f"{setting} is set: recoverable runs must have no wall-clock limit "
                "(set limits per task instead)"
            )


def register_recoverable_job(
    app: Celery, handler: RecoverableJobHandler, interval: float | None = None
) -> Any:
    """Create the task planq.runs.<name> for handler (and a beat entry with an interval)."""
    name = check_handler(handler)
    every = check_interval(interval)
    _refuse_time_limits(app)
    jobs = holder_of(app).handlers
    if name in jobs:
        raise ValueError(f"recoverable job {name!r} is already registered on this app")

    def trigger(self: Any, args: dict[str, Any] | None = None) -> dict[str, Any]:
        """Start, resume or skip (already running) this recoverable job; its JobOutcome."""
        trigger_slot.release(app, name, self.request.id)  # taken: the next trigger may queue
        if args is not None and not isinstance(args, dict):
            raise TypeError(f"args must be a dict or None, got {type(args).__name__}")
        owner = owner_for(app, self.request)
        runtime = runtime_for(app)
        with tracing.run_span(name, owner) as span:
            outcome = run_or_resume(
                handler,
                traced_runs(runtime.runs),
                args,
                owner=owner,
                heartbeat=runtime.run_heartbeat,
                redactor=runtime.redactor,
            )
            tracing.run_ended(span, outcome.run_id, outcome.status, outcome.scanned_count)
        if outcome.skipped is None and outcome.status is not None:
            metrics.run_stopped(handler.name, outcome.status.as_str())
            if outcome.status in {RunStatus.Completed, RunStatus.Failed}:
                metrics.findings_recorded(handler.name, outcome.severity_counts)
        if outcome.lost:  # the run's new owner reports it; this delivery is moot
            raise Ignore()
        if outcome.status is RunStatus.Failed or not (outcome.ok or outcome.paused):
            raise RunFailed(outcome.message)
        return outcome.as_dict()

    task = app.task(
        name=task_name(name),
        base=TriggerTask,
        bind=True,
        shared=False,  # Celery shares decorated tasks across apps by default
        ignore_result=True,
        acks_late=False,  # the run row is the state; a redelivery must not auto-resume
        reject_on_worker_lost=False,
        time_limit=None,  # no wall-clock limit: cancellation is cooperative only
        soft_time_limit=None,
        throws=(RunFailed,),  # an expected outcome: one log line, no traceback
    )(trigger)

    jobs[name] = handler
    if every is not None:
        app.conf.beat_schedule = {
            **(app.conf.beat_schedule or {}),
            f"{BEAT_PREFIX}{name}": {"task": task_name(name), "schedule": every},
        }
    return task


def request_cancel(app: Celery, job_name: str) -> str | None:
    """Ask the Running run of job_name to stop (it ends Paused); its id, or None."""
    return runtime_for(app).runs.request_cancel(job_name)


def boot_recovery_sweep(
    app: Celery, owner: str | None = None, stale_after: float | None = None
) -> SweepResult:
    """Pause interrupted runs; how many (an int), their ids in `.run_ids`.

    With no owner and no stale_after, every active run (the spec's sweep: one node, the
    embedded mode, or an operator after a full-fleet restart). A worker passes its node
    name and stale_after, so it never pauses a run another live worker holds.
    """
    runs = runtime_for(app).runs
    swept = ride_out_outage(
        lambda: runs.boot_recovery_sweep(owner, stale_after),
        "boot recovery sweep",
        budget=SWEEP_RETRY_DEADLINE,
    )
    if swept:
        logger.warning(
            "boot recovery sweep (%s): paused %d interrupted run(s): %s; "
            "trigger planq.runs.<name> to resume from the saved cursor",
            owner or ("stale runs" if stale_after is not None else "every active run"),
            swept,
            ", ".join(swept.run_ids),
        )
    return swept


def pause_own_runs(app: Celery, owner: str) -> list[str]:
    """Ask this node's Running runs to stop at their next batch (warm shutdown)."""
    runs = runtime_for(app).runs
    asked: list[str] = []
    for name in registered_jobs(app):
        newest = runs.list_runs(name, limit=1)  # the active run is always the newest
        if newest and newest[0].status is RunStatus.Running and newest[0].owner == owner:
            run_id = runs.request_cancel(name)
            if run_id is not None:
                asked.append(run_id)
    if asked:
        logger.info("shutdown (%s): asked runs %s to pause", owner, ", ".join(asked))
    return asked


def sweep_at_boot(app: Celery, owner: str, stale_after: float) -> None:
    """worker_init: pause this node's interrupted runs and the stale ones; never raises."""
    try:
        boot_recovery_sweep(app, owner, stale_after)
    except Exception:  # Celery would only log it quietly: say it loudly
        logger.exception(
            "boot recovery sweep for %s FAILED: its interrupted runs stay active until "
            "a later sweep (a restart, or another node after %.0fs of silence)",
            owner,
            stale_after,
        )


def pause_at_shutdown(app: Celery, owner: str) -> None:
    """A warm shutdown: ask this node's Running runs to pause, on a thread (not the handler)."""
    if not registered_jobs(app):
        return

    def pause() -> None:
        try:
            pause_own_runs(app, owner)
        except Exception:
            logger.exception(
                "shutdown (%s): could not ask runs to pause; the next boot sweeps them", owner
            )

    threading.Thread(target=pause, name="planq-runs-pause", daemon=True).start()


STALE_SWEEP_TASK = "planq.maintenance.sweep_stale_runs"


def register_stale_run_sweep(app: Celery, stale_after: float) -> Any:
    """A beat task that pauses runs whose worker went silent and never came back.

    The boot sweep only runs when some worker starts; without this, a run orphaned by a
    node that is gone for good would block every trigger of its job until then.
    """

    def sweep_stale_runs() -> list[str]:
        """Pause active runs silent for longer than stale_after (never a live one); their ids."""
        return list(boot_recovery_sweep(app, owner=None, stale_after=stale_after).run_ids)

    # No task events, as the other maintenance sweeps: Flower lists work, not sweeps.
    task = app.task(name=STALE_SWEEP_TASK, ignore_result=True, shared=False, send_events=False)
    sweep = task(sweep_stale_runs)

    app.conf.beat_schedule = {
        **(app.conf.beat_schedule or {}),
        "planq-sweep-stale-runs": {"task": STALE_SWEEP_TASK, "schedule": stale_after / 2},
    }
    return sweep


def install_recoverable_runs(
    app: Celery, *, ledger_consistency_interval: float | None = None
) -> dict[str, Any]:
    """Everything recoverable runs need on app: the stale sweep and planq's own handler.

    The bound is the app's PLANQ_RUN_STALE_AFTER (its RuntimeConfig); the worker start and
    stop of runs (the boot sweep, the pause) are in tasks/signals.py.
    """
    config = holder_of(app).config
    stale_after = config.run_stale_after
    if isinstance(stale_after, bool) or not isinstance(stale_after, int | float):
        raise TypeError(f"stale_after must be a number of seconds, got {stale_after!r}")
    if stale_after <= 0:
        raise ValueError(f"stale_after must be > 0 seconds, got {stale_after!r}")
    register_stale_run_sweep(app, stale_after)
    handler = LedgerConsistencyHandler(
        ledger=lambda: runtime_for(app).ledger_scan,
        job_timeout=lambda: runtime_for(app).config.worker.job_timeout,
        redactor=config.redactor,
    )
    return {LEDGER_CONSISTENCY: register_recoverable_job(app, handler, ledger_consistency_interval)}
