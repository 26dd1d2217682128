"""How jobs, plans and runs look: JSON dicts (stable keys) and table rows, one place each."""

from __future__ import annotations

from typing import Any

import typer

from planq.cli.output import percent, print_fields, print_table

JOB_COLUMNS = ("job id", "plan", "phase", "status", "attempt", "progress", "worker", "created")
PLAN_COLUMNS = ("plan id", "name", "state", "steps", "created", "updated")
RUN_COLUMNS = ("run id", "job", "status", "scanned", "findings", "progress", "started", "last")
FINDING_COLUMNS = ("finding id", "severity", "kind", "resource", "detail", "created")


def job_dict(job: Any, detail: bool = False, traceback: bool = False) -> dict[str, Any]:
    """as_cli_dict, plus (for `show` and publishing commands) dispatch and cancel facts.

    traceback (one job's view: `jobs show`, the API's job): the failed job's stored
    traceback, redacted and bounded at the write, as `error_traceback` (None when it has
    none). Listings leave it out: up to 16 KiB a row.
    """
    out: dict[str, Any] = job.as_cli_dict()
    out["dispatched"] = job.dispatched_at is not None
    if detail:
        out.update(
            dispatched_at=_iso(job.dispatched_at),
            dispatch_count=job.dispatch_count,
            cancel_requested_at=_iso(job.cancel_requested_at),
            last_heartbeat=_iso(job.last_heartbeat),
            checkpoint=job.checkpoint,
        )
    if traceback:
        out["error_traceback"] = job.error_traceback
    return out


def print_job(title: str, data: dict[str, Any]) -> None:
    """One job's fields, then its traceback (if any) as plain text below, as Python prints it."""
    fields = {key: value for key, value in data.items() if key != "error_traceback"}
    print_fields(title, fields)
    stack = data.get("error_traceback")
    if stack:
        typer.echo(f"\nerror traceback (redacted):\n{stack.rstrip()}")


def _iso(value: Any) -> str | None:
    return None if value is None else value.isoformat()


def job_row(job: Any) -> list[object]:
    """One jobs-table row."""
    return [
        job.job_id,
        job.plan_id,
        job.phase.value,
        _status_cell(job),
        job.attempt,
        percent(job.progress),
        job.worker_id,
        job.created_at,
    ]


def _status_cell(job: Any) -> str:
    problem = getattr(job, "problem", None)  # an UnreadableJob: say why in its row
    return f"{job.status.value} (unreadable: {problem})" if problem else str(job.status.value)


def print_jobs(
    title: str, jobs: list[Any], empty: str = "no jobs", footer: str | None = None
) -> None:
    """A jobs table (times in the reader's zone)."""
    print_table(title, JOB_COLUMNS, (job_row(j) for j in jobs), empty=empty, footer=footer)


def plan_row(plan: Any) -> list[object]:
    """One plans-table row."""
    data = plan.as_cli_dict()
    return [
        data["plan_id"],
        data["name"],
        data["state"],
        data["steps"],
        data["created_at"],
        data["updated_at"],
    ]


EVENT_COLUMNS = ("at", "event", "phase", "by", "job", "note")


def print_events(events: list[Any]) -> None:
    """A plan's audit trail, oldest first (times in the reader's zone)."""
    rows = (
        [
            e.at,
            e.kind.value,
            e.phase.value if e.phase else "-",
            e.actor or "-",
            e.job_id or "-",
            e.note or "",
        ]
        for e in events
    )
    print_table("events", EVENT_COLUMNS, rows, empty="no events")


def print_plans(title: str, plans: list[Any], footer: str | None = None) -> None:
    """A plans table."""
    rows = (plan_row(p) for p in plans)
    print_table(title, PLAN_COLUMNS, rows, empty="no plans", footer=footer)


def run_row(run: Any) -> list[object]:
    """One runs-table row."""
    return [
        run.id,
        run.job_name,
        run.status.as_str(),
        run.scanned_count,
        run.finding_count,
        percent(run.progress.fraction if run.progress else None),
        run.started_at,
        run.last_progress_at,
    ]


def print_runs(title: str, runs: list[Any], footer: str | None = None) -> None:
    """A runs table."""
    print_table(title, RUN_COLUMNS, (run_row(r) for r in runs), empty="no runs", footer=footer)


def finding_row(finding: Any, width: int = 60) -> list[object]:
    """One findings-table row (detail shortened)."""
    import json

    detail = json.dumps(finding.detail, sort_keys=True)
    if len(detail) > width:
        detail = detail[: width - 1] + "…"
    return [
        finding.id,
        finding.severity.value,
        finding.kind,
        finding.resource_id,
        detail,
        finding.created_at,
    ]
