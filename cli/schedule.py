"""`planq schedule`: what beat runs, how often, and the last outcome the ledger can tell."""

from __future__ import annotations

from datetime import timedelta
from typing import Annotated, Any

import typer

from planq.cli.context import Planq, planq
from planq.cli.output import boundary, emit_json, local_time, print_table
from planq.cli.runs import RUN_TASK_PREFIX

MAINTENANCE_PREFIX = "planq.maintenance."
#: How many due rows to count at most (the figure is a hint, not an audit).
COUNT_CAP = 1000

#: Maintenance outcomes are not recorded anywhere; this is what the ledger shows instead.
MAINTENANCE_NOTES = {
    "detect_stuck_jobs": "running jobs past job_timeout now",
    "relay_dispatch": "queued jobs due to (re)send now",
    "cleanup_expired_jobs": "its runs are not recorded",
    "prepare_partitions": "its runs are not recorded",
}


def interval_of(schedule: Any) -> tuple[float | None, str]:
    """(seconds or None, text) for a number, a timedelta, or a celery schedule object."""
    if isinstance(schedule, int | float):
        return float(schedule), human_seconds(float(schedule))
    if isinstance(schedule, timedelta):
        return schedule.total_seconds(), human_seconds(schedule.total_seconds())
    run_every = getattr(schedule, "run_every", None)
    if isinstance(run_every, timedelta):
        return run_every.total_seconds(), human_seconds(run_every.total_seconds())
    return None, str(schedule)


def human_seconds(seconds: float) -> str:
    """30 -> 'every 30s', 3600 -> 'every 1h'."""
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= size and seconds % size == 0:
            return f"every {seconds / size:g}{unit}"
    return f"every {seconds:g}s"


def maintenance_outcome(session: Planq, short: str) -> dict[str, Any]:
    """What the ledger says of a maintenance task: when it last ran, if recorded; its backlog.

    The stuck-job sweep records each run's sighting of the ledger (`ledger_availability`,
    for fair expiry): that is its last run. The relay and the TTL cleanup keep no record;
    the backlog beside them is what the next run will find.
    """
    jobs = session.ledger.jobs  # reads only: a listing builds no runtime
    settings = session.settings
    waiting: int | None = None
    last_run = None
    outcome = "not recorded"
    from datetime import UTC, datetime

    now = datetime.now(UTC)
    if short == "detect_stuck_jobs":
        from planq.domain.availability import JOB_SWEEP

        cutoff = now - timedelta(seconds=settings.job_timeout)
        waiting = len(jobs.list_stuck(cutoff, COUNT_CAP))
        last_run = jobs.last_sighting(JOB_SWEEP)
        outcome = "never run" if last_run is None else "ran"
    elif short == "relay_dispatch":
        due = now - timedelta(seconds=settings.dispatch_grace)  # unsent and resent alike
        waiting = len(jobs.list_dispatch_due(due, due, COUNT_CAP))
    note = MAINTENANCE_NOTES.get(short, "not recorded")
    text = outcome if last_run is None else f"ran at {local_time(last_run)}"
    if waiting is not None:
        text += f" ({waiting} {note})"
    return {
        "last_outcome": outcome,
        "last_run_at": None if last_run is None else last_run.isoformat(),
        "waiting": waiting,
        "note": note,
        "run": None,
        "text": text,
    }


def run_outcome(session: Planq, job_name: str) -> dict[str, Any]:
    """The latest run of a recoverable job, as stored."""
    latest = session.runs.list_runs(job_name, limit=1)
    row: dict[str, Any] = {"waiting": None, "note": "latest run in the ledger"}
    if not latest:
        never = {"last_outcome": "never run", "last_run_at": None, "run": None}
        return {**row, **never, "text": "never run"}
    run = latest[0]
    at = run.completed_at or run.last_progress_at
    when = local_time(at)
    return {
        **row,
        "last_outcome": run.status.as_str(),
        "last_run_at": at.isoformat() if at else None,
        "run": run.as_dict(),
        "text": f"{run.status.as_str()} at {when} (run {run.id})",
    }


def describe(session: Planq, entry_name: str, entry: dict[str, Any]) -> dict[str, Any]:
    """One schedule entry with its interval and last outcome."""
    task = str(entry.get("task", ""))
    seconds, every = interval_of(entry.get("schedule"))
    row: dict[str, Any] = {"name": entry_name, "task": task, "every_seconds": seconds}
    row["schedule"] = every
    if task.startswith(MAINTENANCE_PREFIX):
        row["kind"] = "maintenance"
        row.update(maintenance_outcome(session, task.removeprefix(MAINTENANCE_PREFIX)))
    elif task.startswith(RUN_TASK_PREFIX):
        row["kind"] = "recoverable"
        row.update(run_outcome(session, task.removeprefix(RUN_TASK_PREFIX)))
    else:
        row.update(kind="other", last_outcome="not recorded", waiting=None, note="not recorded")
        row.update(last_run_at=None, run=None)
        row["text"] = "not recorded"
    return row


def schedule(
    as_json: Annotated[bool, typer.Option("--json", help="Print one JSON document.")] = False,
) -> None:
    """The periodic jobs beat runs (maintenance and recoverable) and their last outcome."""
    with planq() as session:
        beat = dict(session.app.conf.beat_schedule or {})
        rows = [describe(session, name, entry) for name, entry in sorted(beat.items())]
    if as_json:
        emit_json([{k: v for k, v in row.items() if k != "text"} for row in rows])
        return
    print_table(
        "beat schedule",
        ("entry", "kind", "task", "schedule", "last outcome"),
        ([r["name"], r["kind"], r["task"], r["schedule"], r["text"]] for r in rows),
        empty="nothing scheduled",
    )


schedule_command = boundary(schedule)
