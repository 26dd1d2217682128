"""`planq jobs …`: read the ledger, cancel, retry, and run the maintenance sweeps by hand."""

from __future__ import annotations

from typing import Annotated, Any

import typer

from cli import services
from cli.context import Planq, planq
from cli.output import boundary, emit_json, print_fields, print_table, warn
from cli.views import job_dict, print_jobs

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
    as_json: JsonOpt = False,
) -> None:
    """Jobs, oldest first (queued and running ones have waited longest at the top)."""
    from domain.ids import require_ulid

    wanted = services.parse_status(status)
    plan_id = require_ulid("--plan", plan) if plan is not None else None
    with planq() as session:
        store = session.runtime.jobs
        if plan_id is not None:
            jobs = [j for j in store.list_by_plan(plan_id) if wanted in (None, j.status)][:limit]
        elif wanted is not None:
            jobs = store.list_by_status(wanted, limit)
        else:
            jobs = store.list_all(limit)
    if as_json:
        emit_json([job_dict(j) for j in jobs])
    else:
        print_jobs("jobs", jobs)


@jobs_app.command("show")
@boundary
def show(job_id: JobId, as_json: JsonOpt = False) -> None:
    """One job, with its dispatch, heartbeat, cancel and checkpoint facts."""
    with planq() as session:
        data = job_dict(get_job(session, job_id), detail=True)
    if as_json:
        emit_json(data)
    else:
        print_fields(f"job {data['job_id']}", data)


@jobs_app.command("cancel")
@boundary
def cancel(job_id: JobId, as_json: JsonOpt = False) -> None:
    """Cancel: a queued job ends now, a running one is asked to stop; exit 1 if it has ended."""
    with planq() as session:
        outcome, after = services.cancel_job(session, job_id)
    if as_json:
        emit_json({"outcome": outcome, "job": job_dict(after)})
    else:
        print_fields(f"job {after.job_id}: {outcome}", job_dict(after))


@jobs_app.command("retry")
@boundary
def retry(job_id: JobId, as_json: JsonOpt = False) -> None:
    """Queue a new attempt of a failed or cancelled job and publish it; exit 1 otherwise."""
    with planq() as session:
        stored, published = services.retry_job(session, job_id)
        if not published:  # the row is durable: the dispatch relay sends it later
            warn(f"job {stored.job_id} queued but not published; the relay will send it")
    if as_json:
        emit_json(job_dict(stored))
    else:
        print_fields(f"retry of {stored.retry_of}: attempt {stored.attempt}", job_dict(stored))


@jobs_app.command("stuck")
@boundary
def stuck(as_json: JsonOpt = False) -> None:
    """Run stuck detection now: running jobs with an expired heartbeat become failed."""
    with planq() as session:
        report = session.runtime.worker.detect_stuck_jobs()
        store = session.runtime.jobs
        expired = [j for j in (store.get(i) for i in report.expired) if j is not None]
        timeout = session.settings.job_timeout
    if as_json:
        emit_json(
            {
                "job_timeout_seconds": timeout,
                "expired": [job_dict(j) for j in expired],
                "retried": dict(report.retried),
            }
        )
        return
    print_jobs(f"stuck jobs expired (heartbeat older than {timeout:g}s)", expired, "none")
    if report.retried:
        print_table("retries queued", ("expired job", "new job"), report.retried.items())


@jobs_app.command("cleanup")
@boundary
def cleanup(as_json: JsonOpt = False) -> None:
    """Delete ended jobs older than PLANQ_JOB_TTL now (what beat does every cleanup interval)."""
    with planq() as session:
        deleted = session.runtime.worker.cleanup_expired_jobs()
        ttl = session.settings.job_ttl
    if as_json:
        emit_json({"deleted": deleted, "job_ttl_seconds": ttl})
    else:
        typer.echo(f"deleted {deleted} ended job(s) older than {ttl:g}s")
