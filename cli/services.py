"""`planq worker|beat|flower`: exec `celery -A worker_config …` with planq's defaults.

Below them, the operator actions the CLI and the admin API (`planq api`) share.

The process is replaced (os.execv), so signals reach Celery directly and
`planq worker` behaves exactly like `celery -A worker_config worker` with these options.
Options this wrapper does not know are passed through to Celery unchanged.
"""

from __future__ import annotations

import os
import shlex
import shutil
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any

import typer

from cli.context import Planq
from cli.output import BadInput, Refused, boundary

APP_MODULE = "worker_config"
PASS_THROUGH = {"allow_extra_args": True, "ignore_unknown_options": True}

DryRun = Annotated[
    bool, typer.Option("--dry-run", help="Print the celery command instead of running it.")
]
LogLevel = Annotated[str, typer.Option("--loglevel", "-l", help="Celery log level.")]


def celery_argv(command: str, *options: str) -> list[str]:
    """['<celery>', '-A', 'worker_config', command, *options]; celery from this environment."""
    beside = Path(sys.executable).with_name("celery")
    if beside.exists():
        head = [str(beside)]
    elif found := shutil.which("celery"):
        head = [found]
    else:
        head = [sys.executable, "-m", "celery"]
    return [*head, "-A", APP_MODULE, command, *options]


def run(argv: list[str], dry_run: bool) -> None:
    """Print argv (dry run) or replace this process with it."""
    if dry_run:
        typer.echo(shlex.join(argv))
        return
    sys.stdout.flush()
    sys.stderr.flush()
    os.execv(argv[0], argv)


def default_concurrency() -> int:
    """PLANQ_MAX_WORKERS (validated like every planq setting)."""
    from cli.context import load_settings

    return int(load_settings().max_workers)


def worker(
    ctx: typer.Context,
    pool: Annotated[str, typer.Option("--pool", "-P", help="prefork, threads, solo, gevent…")] = (
        "prefork"
    ),
    concurrency: Annotated[
        int | None,
        typer.Option("--concurrency", "-c", min=1, help="Default: PLANQ_MAX_WORKERS."),
    ] = None,
    queues: Annotated[
        str | None,
        typer.Option("--queues", "-Q", help="Comma-separated queues. Default: every planq queue."),
    ] = None,
    hostname: Annotated[
        str | None, typer.Option("--hostname", "-n", help="Node name, e.g. planq1@%h.")
    ] = None,
    loglevel: LogLevel = "INFO",
    dry_run: DryRun = False,
) -> None:
    """Run a Celery worker for planq's phase and maintenance tasks."""
    options = [f"--pool={pool}", f"--concurrency={concurrency or default_concurrency()}"]
    if queues:
        options.append(f"--queues={queues}")
    if hostname:
        options.append(f"--hostname={hostname}")
    options.append(f"--loglevel={loglevel}")
    run(celery_argv("worker", *options, *ctx.args), dry_run)


def beat(ctx: typer.Context, loglevel: LogLevel = "INFO", dry_run: DryRun = False) -> None:
    """Run Celery beat: maintenance sweeps and scheduled recoverable runs."""
    run(celery_argv("beat", f"--loglevel={loglevel}", *ctx.args), dry_run)


def flower(
    ctx: typer.Context,
    port: Annotated[int, typer.Option("--port", min=1, max=65535, help="HTTP port.")] = 5555,
    dry_run: DryRun = False,
) -> None:
    """Run Flower (needs the Redis broker: task events and remote control)."""
    run(celery_argv("flower", f"--port={port}", *ctx.args), dry_run)


def register(app: typer.Typer) -> None:
    """Add worker, beat and flower to the planq app."""
    for fn in (worker, beat, flower):
        app.command(fn.__name__, context_settings=PASS_THROUGH)(boundary(fn))


# -- operations the CLI and the admin API (cli/api) share -------------------------------------
# Each is the one implementation of an operator action; callers render the result. Errors are
# cli.output's CliError family (BadInput, Refused, Unavailable) plus NotFound, so the CLI maps
# them to exit codes and the API to HTTP statuses without a second rule.

#: The most rows a listing pages over (offset + limit): the stores list oldest-first only.
MAX_PAGE_WINDOW = 10_000


class NotFound(BadInput):
    """An id or name that names nothing (exit 2 in the CLI, 404 over HTTP)."""


@dataclass(frozen=True)
class TriggerResult:
    """What a trigger decided synchronously, and the run the worker took (when seen in time)."""

    job_name: str
    decision: str  #: "fresh", "resumed" or "already_running"
    task_id: str | None
    run: Any  #: RunSummary of the active/resumed/new run; None if the worker has not opened it


def parse_status(text: str | None) -> Any:
    """The AsyncJobStatus named, or BadInput listing the valid ones."""
    from domain.jobs import AsyncJobStatus

    if text is None:
        return None
    try:
        return AsyncJobStatus(text.strip().lower())
    except ValueError:
        valid = ", ".join(s.value for s in AsyncJobStatus)
        raise BadInput(f"--status {text!r} is not a job status (one of: {valid})") from None


def find_job(session: Planq, job_id: str) -> Any:
    """The job row; InvalidIdError for a malformed id, NotFound for an unknown one."""
    from domain.ids import require_ulid

    job = session.runtime.jobs.get(require_ulid("job_id", job_id))
    if job is None:
        raise NotFound(f"no job with id {job_id!r}")
    return job


def check_window(limit: int, offset: int) -> None:
    """BadInput unless 1 <= limit and 0 <= offset and the window stays bounded."""
    if limit < 1 or offset < 0 or offset + limit > MAX_PAGE_WINDOW:
        raise BadInput(
            f"limit must be >= 1, offset >= 0 and offset + limit <= {MAX_PAGE_WINDOW} "
            f"(got limit={limit}, offset={offset})"
        )


def list_jobs(
    session: Planq, status: str | None, plan_id: str | None, limit: int, offset: int = 0
) -> list[Any]:
    """Jobs oldest first, filtered by status and/or plan, one page."""
    from domain.ids import require_ulid

    check_window(limit, offset)
    wanted = parse_status(status)
    plan = require_ulid("plan_id", plan_id) if plan_id is not None else None
    store = session.runtime.jobs
    if plan is not None:
        rows = [j for j in store.list_by_plan(plan) if wanted in (None, j.status)]
    elif wanted is not None:
        rows = store.list_by_status(wanted, offset + limit)
    else:
        rows = store.list_all(offset + limit)
    return list(rows[offset : offset + limit])


def recent_plans(session: Planq, limit: int, offset: int = 0) -> list[Any]:
    """Plans newest first, one page (the plan store lists oldest first: read, then reverse)."""
    check_window(limit, offset)
    plans = session.runtime.plans.list_all(None)
    plans.reverse()
    return list(plans[offset : offset + limit])


def find_plan(session: Planq, plan_id: str) -> Any:
    """The plan; InvalidIdError for a malformed id, NotFound for an unknown one."""
    from domain.errors import PlanNotFoundError

    try:
        return session.runtime.lifecycle.get_plan(plan_id)
    except PlanNotFoundError:
        raise NotFound(f"no plan with id {plan_id!r}") from None


def create_plan(session: Planq, steps: list[dict[str, Any]], name: str = "") -> Any:
    """Store a new plan (state New); nothing is queued."""
    if not steps:
        raise BadInput("a plan needs at least one step")
    return session.runtime.lifecycle.create_plan(steps, name=name)


def queue_phase(session: Planq, plan_id: str, phase: str) -> tuple[Any, Any]:
    """(plan, job row as stored): the plan checked, the broker checked, then one statement."""
    from domain.plans import PlanPhase

    find_plan(session, plan_id)  # a bad or unknown id first, before the broker
    try:
        wanted = PlanPhase(phase)
    except ValueError:
        raise BadInput(f"unknown phase {phase!r}") from None
    session.require_broker()
    queued = session.runtime.lifecycle.queue_phase(plan_id, wanted)
    session.runtime.stamps.flush()  # show the row as the relay will see it
    job = session.runtime.jobs.get(queued.job.job_id) if queued.job else None
    return queued.plan, job


def cancel_job(session: Planq, job_id: str) -> tuple[str, Any]:
    """('cancelled' | 'cancel requested', row); Refused when the job has already ended."""
    job = find_job(session, job_id)
    if not session.runtime.worker.cancel_job(job.job_id):
        now = session.runtime.jobs.get(job.job_id)
        state = now.status.value if now else "gone"
        raise Refused(f"job {job.job_id} is {state}; only a queued or running job can cancel")
    after = session.runtime.jobs.get(job.job_id)
    outcome = "cancelled" if after.status.value == "cancelled" else "cancel requested"
    return outcome, after


def retry_job(session: Planq, job_id: str) -> tuple[Any, bool]:
    """(new row, published): a new attempt of a failed/cancelled job; Refused otherwise."""
    job = find_job(session, job_id)
    if not job.is_terminal or job.status.value == "succeeded":
        raise Refused(f"job {job.job_id} is {job.status.value}; only failed or cancelled retry")
    session.require_broker()
    try:
        new, published = session.runtime.worker.retry_job(job)
    except ValueError as exc:
        raise Refused(str(exc)) from None
    if new is None:
        raise Refused(f"job {job.job_id} was already retried, or its plan has moved on")
    session.runtime.stamps.flush()
    return session.runtime.jobs.get(new.job_id), published


def detect_stuck(session: Planq) -> tuple[list[Any], dict[str, str]]:
    """Run stuck detection now: (expired rows, {expired job id: retry job id})."""
    report = session.runtime.worker.detect_stuck_jobs()
    store = session.runtime.jobs
    expired = [j for j in (store.get(i) for i in report.expired) if j is not None]
    return expired, dict(report.retried)


def cleanup_jobs(session: Planq) -> int:
    """Delete ended jobs older than PLANQ_JOB_TTL now; how many."""
    return int(session.runtime.worker.cleanup_expired_jobs())


def recoverable_handler(session: Planq, name: str) -> Any:
    """The registered handler named; NotFound listing the known ones."""
    from tasks.recoverable import registered_jobs

    handlers = registered_jobs(session.app)
    if name not in handlers:
        listed = ", ".join(sorted(handlers)) or "none are registered"
        raise NotFound(f"unknown recoverable job {name!r} (known: {listed})")
    return handlers[name]


def find_run(session: Planq, run_id: str, job_name: str | None = None) -> Any:
    """The run's summary (of job_name, if given); InvalidIdError / NotFound."""
    from domain.ids import require_ulid

    run = session.runs.get_run_by_id(require_ulid("run_id", run_id))
    if run is None or (job_name is not None and run.job_name != job_name):
        where = f" of {job_name!r}" if job_name is not None else ""
        raise NotFound(f"no run{where} with id {run_id!r} (it may have been purged)")
    return run


def check_run_args(name: str, args: dict[str, str]) -> dict[str, str]:
    """Refuse bad trigger args before anything is sent (planq's own scan knows its bounds)."""
    from dataclasses import fields

    from domain.runs.checks import check_param
    from tasks.ledger_consistency import JOB_NAME, ScanParams

    for key, value in args.items():
        check_param(key, value)
    if name == JOB_NAME:
        known = {f.name for f in fields(ScanParams)}
        for key, value in args.items():
            if key in known:
                ScanParams.parse(key, value)
    return args


def trigger_run(
    session: Planq, name: str, args: dict[str, str], wait: float = 5.0, poll: float = 0.05
) -> TriggerResult:
    """Decide now (skip while a run is active, resume a Paused one, or start), then send.

    The worker makes the same decision again race-safely (one non-terminal run per name);
    this call waits up to `wait` seconds to report the run the worker opened.
    """
    from domain.runs import RunStatus
    from tasks.recoverable import task_name

    recoverable_handler(session, name)
    check_run_args(name, args)
    newest = session.runs.list_runs(name, limit=1)
    latest = newest[0] if newest else None
    if latest is not None and latest.status.is_active:
        return TriggerResult(name, "already_running", None, latest)
    session.require_broker()
    resumed = latest is not None and latest.status is RunStatus.Paused
    kwargs = {"args": args} if args else {}
    sent = session.app.tasks[task_name(name)].apply_async(kwargs=kwargs)
    deadline = time.monotonic() + wait
    while True:
        runs = session.runs.list_runs(name, limit=1)
        run = runs[0] if runs else None
        if run is not None and latest is not None and run.id == latest.id:
            moved = run.last_progress_at != latest.last_progress_at
            opened = resumed and (run.status is not RunStatus.Paused or moved)
        else:
            opened = run is not None
        if opened or time.monotonic() >= deadline:
            break
        time.sleep(poll)
    taken = run if opened else (latest if resumed else None)  # a resume's id is known already
    return TriggerResult(name, "resumed" if resumed else "fresh", getattr(sent, "id", None), taken)


def cancel_run(session: Planq, name: str) -> str:
    """Ask the Running run of name to pause at its next batch; its id, or Refused."""
    recoverable_handler(session, name)
    run_id = session.runs.request_cancel(name)
    if run_id is None:
        latest = session.runs.list_runs(name, limit=1)
        state = f"its latest run is {latest[0].status.as_str()}" if latest else "it has no runs"
        raise Refused(f"no Running run of {name!r} to cancel ({state})")
    return str(run_id)


def purge_runs(session: Planq, retention_days: float) -> tuple[int, float]:
    """(purged, days applied): ended runs older than max(1, days); active runs never."""
    days = max(1.0, float(retention_days))
    return int(session.runs.purge_terminal_runs(days)), days
