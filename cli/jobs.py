"""`planq jobs …`: read the ledger, cancel, retry, and run the maintenance sweeps by hand."""

from __future__ import annotations

from typing import Annotated, Any

import typer

from planq.cli import limits, services
from planq.cli.context import Planq, planq
from planq.cli.output import boundary, emit_json, print_fields, print_table, warn
from planq.cli.views import job_dict, print_job, print_jobs

jobs_app = typer.Typer(help="Jobs in the ledger.", no_args_is_help=True)

JsonOpt = Annotated[bool, typer.Option("--json", help="Print one JSON document (for scripts).")]
JobId = Annotated[str, typer.Argument(help="The job's ULID.", show_default=False)]


def get_job(session: Planq, job_id: str) -> Any:
    """The job row; BadInput (NotFound) for a malformed or unknown id."""
    return services.find_job(session, job_id)


@jobs_app.command("list")
@boundary
def list_jobs(
    status: Annotated[
        str | None, typer.Option("--status", help="queued|running|succeeded|failed|cancelled")
    ] = None,
    plan: Annotated[str | None, typer.Option("--plan", help="Only this plan's jobs.")] = None,
    limit: Annotated[int, typer.Option("--limit", min=1, help="At most this many.")] = 50,
    offset: Annotated[int, typer.Option("--offset", min=0, help="Skip this many newest.")] = 0,
    after: Annotated[
        str | None,
        typer.Option("--after", help="Only jobs listed after this job id (the next page)."),
    ] = None,
    as_json: JsonOpt = False,
) -> None:
    """Jobs, newest first, with how many match in all ("more than 10,000" past that)."""
    from planq.domain.ids import require_ulid

    limits.check_window(limit, offset)  # every input checked before the ledger is opened
    services.parse_status(status)
    if plan is not None:
        require_ulid("--plan", plan)
    if after is not None:
        require_ulid("--after", after)
    with planq() as session:
        page = services.job_page(session, status, plan, limit, offset, after)
    if as_json:
        emit_json(page.header("jobs", [job_dict(j) for j in page.rows]))
    else:
        print_jobs("jobs", page.rows, footer=page.showing())


@jobs_app.command("show")
@boundary
def show(job_id: JobId, as_json: JsonOpt = False) -> None:
    """One job, with its dispatch, heartbeat, cancel and checkpoint facts, and its traceback."""
    with planq() as session:
        data = job_dict(get_job(session, job_id), detail=True, traceback=True)
    if as_json:
        emit_json(data)
    else:
        print_job(f"job {data['job_id']}", data)


@jobs_app.command("cancel")
@boundary
def cancel(
    job_id: JobId,
    by: Annotated[
        str | None,
        typer.Option("--by", help="A note for a pipeline plan's trail; the actor is you."),
    ] = None,
    as_json: JsonOpt = False,
) -> None:
    """Cancel: a queued job ends now, a running one is asked to stop; exit 1 if it has ended."""
    from planq.domain.principals import cli_actor

    with planq() as session:
        after = session.service.jobs.cancel(job_id, cli_actor(), f"by: {by}" if by else None)
    outcome = "cancelled" if after.status.value == "cancelled" else "cancel requested"
    if as_json:
        emit_json({"outcome": outcome, "job": job_dict(after)})
    else:
        print_fields(f"job {after.job_id}: {outcome}", job_dict(after))


@jobs_app.command("retry")
@boundary
def retry(job_id: JobId, as_json: JsonOpt = False) -> None:
    """Queue a new attempt of a failed or cancelled job and publish it; exit 1 otherwise."""
    with planq() as session:
        stored, published = session.service.jobs.retry(job_id, ready=session.require_broker)
        plan = session.ledger.plans.get(stored.plan_id)
        if not published:  # the row is durable: the dispatch relay sends it later
            warn(f"job {stored.job_id} queued but not published; the relay will send it")
    if as_json:  # the shape `plans strategize --json` prints: {plan, job}
        emit_json({"plan": plan.as_cli_dict() if plan else None, "job": job_dict(stored)})
    else:
        print_fields(f"retry of {stored.retry_of}: attempt {stored.attempt}", job_dict(stored))


@jobs_app.command("stuck")
@boundary
def stuck(as_json: JsonOpt = False) -> None:
    """Run stuck detection now: running jobs with an expired heartbeat become failed."""
    with planq() as session:
        report = session.service.jobs.detect_stuck()
        expired, retried = list(report), dict(report.retried)  # rows as the sweep failed them
        timeout = session.settings.job_timeout
    if as_json:
        emit_json(
            {
                "job_timeout_seconds": timeout,
                "expired": [job_dict(j) for j in expired],
                "retried": retried,
            }
        )
        return
    print_jobs(f"stuck jobs expired (heartbeat older than {timeout:g}s)", expired, "none")
    if retried:
        print_table("retries queued", ("expired job", "new job"), retried.items())


@jobs_app.command("cleanup")
@boundary
def cleanup(as_json: JsonOpt = False) -> None:
    """Delete ended jobs older than PLANQ_JOB_TTL now (what beat does every cleanup interval)."""
    with planq() as session:
        deleted = session.service.jobs.cleanup()
        ttl = session.settings.job_ttl
    if as_json:
        emit_json({"deleted": deleted, "job_ttl_seconds": ttl})
    else:
        typer.echo(f"deleted {deleted} ended job(s) older than {ttl:g}s")
