"""`planq runs …`: trigger, inspect, cancel and purge recoverable runs (long scans)."""

from __future__ import annotations

from typing import Annotated, Any

import typer

from planq.cli import limits, services
from planq.cli.context import Planq, planq
from planq.cli.output import BadInput, Refused, boundary, emit_json, print_fields, print_table
from planq.cli.views import FINDING_COLUMNS, finding_row, print_runs

runs_app = typer.Typer(help="Recoverable runs (long, resumable scans).", no_args_is_help=True)

RUN_TASK_PREFIX = "planq.runs."

JsonOpt = Annotated[bool, typer.Option("--json", help="Print one JSON document (for scripts).")]
RunId = Annotated[str, typer.Argument(help="The run's ULID.", show_default=False)]
JobName = Annotated[str, typer.Argument(help="The recoverable job's name.", show_default=False)]


def get_run(session: Planq, run_id: str) -> Any:
    """The run's summary; BadInput for a malformed id, NotFound for an unknown one."""
    return services.find_run(session, run_id)


def parse_args(pairs: list[str]) -> dict[str, str]:
    """['batch_size=100'] -> {'batch_size': '100'}; BadInput for a pair without '='."""
    out: dict[str, str] = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key.strip():
            raise BadInput(f"--arg {pair[:80]!r}: expected KEY=VALUE")
        out[key.strip()] = value
    return out


@runs_app.command("trigger")
@boundary
def trigger(
    name: JobName,
    arg: Annotated[
        list[str] | None,
        typer.Option("--arg", help="KEY=VALUE handed to the run (repeatable).", show_default=False),
    ] = None,
    wait: Annotated[
        float,
        typer.Option("--wait", help="Seconds to wait for a worker to open the run (0 to 60)."),
    ] = 0.0,
    as_json: JsonOpt = False,
) -> None:
    """Start a run of NAME, resume its Paused run, or skip (exit 1) while one is active or queued.

    The decision is made here and again, race-safely, by the worker that takes the message.
    """
    args = parse_args(arg or [])
    from planq.domain.bounds import check_job_name  # lazy: `--help` loads no domain

    check_job_name(name)
    limits.number_option("--wait", wait, 0.0, 60.0)
    with planq() as session:
        result = session.service.runs.trigger(name, args, wait=wait, ready=session.require_broker)
    run = result.run.as_dict() if result.run is not None else None
    if result.decision == "already_running":
        raise Refused(f"skipped: run {result.run.id} of {name!r} is {run and run['status']}")
    if result.decision == "already_queued":
        raise Refused(
            f"skipped: a trigger of {name!r} is queued already (task id {result.task_id}), "
            "not yet taken by a worker: this one is coalesced into it"
        )
    doc = {
        "job_name": name,
        "task": RUN_TASK_PREFIX + name,
        "task_id": result.task_id,
        "decision": result.decision,
        "args": args,
        "run": run,
    }
    if as_json:
        emit_json(doc)
        return
    seen = f"run {run['id']} is {run['status']}" if run else "the worker has not opened it yet"
    typer.echo(f"sent {doc['task']} (task id {doc['task_id']}, {result.decision}); {seen}")


@runs_app.command("list")
@boundary
def list_runs(
    name: Annotated[str | None, typer.Argument(help="Only this job's runs.")] = None,
    limit: Annotated[int, typer.Option("--limit", min=1, help="At most this many.")] = 20,
    as_json: JsonOpt = False,
) -> None:
    """Runs, newest first, with how many there are in all."""
    limits.check_window(limit, 0)
    if name is not None:
        from planq.domain.bounds import check_job_name  # lazy: `--help` loads no domain

        check_job_name(name)
    with planq() as session:
        page = services.run_page(session, name, limit)
    if as_json:
        emit_json(page.header("runs", [r.as_dict() for r in page.rows]))
    else:
        print_runs(f"runs of {name}" if name else "runs", page.rows, footer=page.showing())


@runs_app.command("show")
@boundary
def show(run_id: RunId, as_json: JsonOpt = False) -> None:
    """One run: status, progress, cursor, error and findings by severity."""
    with planq() as session:
        run = get_run(session, run_id)
        counts = session.runs.finding_severity_counts(run.id)
    doc = {**run.as_dict(), "severity_counts": counts}
    if as_json:
        emit_json(doc)
        return
    fields = {k: v for k, v in doc.items() if k not in ("stats", "progress", "severity_counts")}
    fields.update(run.stats)
    if run.progress is not None:
        fields["progress"] = f"{run.progress.fraction * 100:.0f}% ({run.progress.kind.value})"
    fields["findings by severity"] = ", ".join(f"{k} {v}" for k, v in counts.items())
    print_fields(f"run {run.id}", fields)


@runs_app.command("cancel")
@boundary
def cancel(name: JobName, as_json: JsonOpt = False) -> None:
    """Ask the job's Running run to pause at its next safe point (a trigger resumes it).

    Exit 1 if none is Running. A cancelled run ends Paused, its cursor kept, as the spec's
    cancel does: nothing is thrown away.
    """
    from planq.domain.bounds import check_job_name  # lazy: `--help` loads no domain

    check_job_name(name)
    with planq() as session:  # any job name with runs: the worker may know handlers we don't
        run_id = session.service.runs.cancel(name, registered_only=False)
    doc = {"job_name": name, "run_id": run_id, "status": "CancelRequested", "ends_as": "Paused"}
    if as_json:
        emit_json(doc)
    else:
        typer.echo(f"run {run_id} of {name}: cancel requested; it pauses at its next batch")


@runs_app.command("findings")
@boundary
def findings(
    run_id: RunId,
    limit: Annotated[int, typer.Option("--limit", min=1, help="Page size.")] = 100,
    offset: Annotated[int, typer.Option("--offset", min=0, help="Skip this many.")] = 0,
    after: Annotated[
        str | None,
        typer.Option("--after", help="Only findings recorded after this finding id (next page)."),
    ] = None,
    as_json: JsonOpt = False,
) -> None:
    """A run's findings in the order recorded (a scan's own order, oldest first), one page."""
    from planq.domain.bounds import MAX_OFFSET
    from planq.domain.ids import require_ulid

    if limit > limits.MAX_PAGE_WINDOW or offset > MAX_OFFSET:
        raise BadInput(f"--limit must be at most {limits.MAX_PAGE_WINDOW}, --offset {MAX_OFFSET}")
    if after is not None:
        require_ulid("--after", after)
    with planq() as session:
        run, page, counts = services.finding_page(session, run_id, limit, offset, after)
    if as_json:
        doc = page.header("findings", [f.as_dict() for f in page.rows])
        emit_json({"run_id": run.id, "severity_counts": counts, **doc})
        return
    shown = f"{offset + 1}-{offset + len(page.rows)}" if page.rows else f"none after {offset}"
    if after is not None:
        shown = f"{len(page.rows)} after {after}"
    title = f"findings of run {run.id} ({shown} of {page.total_text()})"
    print_table(title, FINDING_COLUMNS, (finding_row(f) for f in page.rows), empty="none")
    if page.next_after:
        typer.echo(f"next page: --after {page.next_after}")


@runs_app.command("purge")
@boundary
def purge(
    older_than_days: Annotated[
        float,
        typer.Option(
            "--older-than-days", help="Completed/Failed runs ended this long ago (1 to 36500)."
        ),
    ],
    as_json: JsonOpt = False,
) -> None:
    """Delete ended runs (and their findings) older than N days; active runs are never touched."""
    from planq.domain.bounds import MAX_RETENTION_DAYS

    limits.number_option("--older-than-days", older_than_days, 1.0, MAX_RETENTION_DAYS)
    with planq() as session:
        purged, _ = session.service.runs.purge(older_than_days)
    if as_json:
        emit_json({"purged": purged, "older_than_days": older_than_days})
    else:
        typer.echo(f"purged {purged} ended run(s) older than {older_than_days:g} day(s)")
