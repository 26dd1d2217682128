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
import tempfile
from pathlib import Path
from typing import Annotated, Any

import typer

from planq.cli.context import Planq
from planq.cli.limits import TOTAL_CAP, Page, check_window
from planq.cli.output import BadInput, NotFound, boundary

APP_MODULE = "planq.worker_config"
PASS_THROUGH = {"allow_extra_args": True, "ignore_unknown_options": True}

DryRun = Annotated[
    bool, typer.Option("--dry-run", help="Print the celery command instead of running it.")
]
LogLevel = Annotated[str, typer.Option("--loglevel", "-l", help="Celery log level.")]


def celery_argv(command: str, *options: str) -> list[str]:
    """[celery, '-A', 'planq.worker_config', command, *options]; celery from this environment."""
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
    from planq.cli.context import load_settings

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


SCHEDULE_FILE = "celerybeat-schedule"


def state_dir() -> Path:
    """Where planq keeps a process's own state: $XDG_STATE_HOME/planq (~/.local/state/planq).

    Created on first use. Where it cannot be (a home that is not writable, as for a service
    user), a directory of this user's under the system's temporary directory.
    """
    base = os.environ.get("XDG_STATE_HOME") or os.path.join(Path.home(), ".local", "state")
    for where in (Path(base) / "planq", Path(tempfile.gettempdir()) / f"planq-{os.getuid()}"):
        try:
            where.mkdir(parents=True, exist_ok=True, mode=0o700)
        except OSError:
            continue
        if os.access(where, os.W_OK):
            return where
    raise BadInput("no writable state directory for beat's schedule: pass --schedule PATH")


def beat(
    ctx: typer.Context,
    schedule: Annotated[
        str | None,
        typer.Option(
            "--schedule",
            "-s",
            help="Beat's schedule file (when each entry last ran). "
            "Default: $XDG_STATE_HOME/planq/celerybeat-schedule, never the current directory.",
            show_default=False,
        ),
    ] = None,
    loglevel: LogLevel = "INFO",
    dry_run: DryRun = False,
) -> None:
    """Run Celery beat: maintenance sweeps and scheduled recoverable runs."""
    path = schedule or str(state_dir() / SCHEDULE_FILE)  # Celery's default: ./ (a work tree)
    run(celery_argv("beat", f"--schedule={path}", f"--loglevel={loglevel}", *ctx.args), dry_run)


#: Flower reads its options from FLOWER_* variables too: the credentials travel this way, so
#: they never show in the process list (`ps`) the way a --basic-auth argument would.
FLOWER_AUTH_ENV = "FLOWER_BASIC_AUTH"
FLOWER_BROKER_API_ENV = "FLOWER_BROKER_API"


def check_broker_api(value: str) -> str:
    """An http(s) URL of RabbitMQ's management API; BadInput otherwise."""
    from urllib.parse import urlsplit

    parts = urlsplit(value)
    if parts.scheme not in ("http", "https") or not parts.hostname or "\x00" in value:
        raise BadInput(
            f"--broker-api / {FLOWER_BROKER_API_ENV} must be RabbitMQ's management API URL, "
            "e.g. http://user:password@rabbit:15672/api/"
        )
    return value


def check_basic_auth(value: str) -> str:
    """'user:pass[,user2:pass2]' with a non-empty user and password each; BadInput otherwise."""
    pairs = value.split(",")
    for pair in pairs:
        user, sep, password = pair.partition(":")
        if not sep or not user.strip() or not password or "\x00" in pair:
            raise BadInput(
                f"--basic-auth / {FLOWER_AUTH_ENV} must be USER:PASSWORD[,USER:PASSWORD…] "
                f"(got {len(pairs)} entr{'y' if len(pairs) == 1 else 'ies'}, one malformed)"
            )
    return value


def flower(
    ctx: typer.Context,
    port: Annotated[int, typer.Option("--port", min=1, max=65535, help="HTTP port.")] = 5555,
    basic_auth: Annotated[
        str | None,
        typer.Option(
            "--basic-auth",
            envvar=FLOWER_AUTH_ENV,
            help="USER:PASSWORD[,…] Flower asks for (default: FLOWER_BASIC_AUTH).",
            show_default=False,
            show_envvar=True,
        ),
    ] = None,
    broker_api: Annotated[
        str | None,
        typer.Option(
            "--broker-api",
            envvar=FLOWER_BROKER_API_ENV,
            help="RabbitMQ's management API (http://user:password@host:15672/api/): fills "
            "Flower's Broker page on an amqp:// broker.",
            show_default=False,
            show_envvar=True,
        ),
    ] = None,
    dry_run: DryRun = False,
) -> None:
    """Run Flower on planq's broker (Redis, or RabbitMQ with --broker-api for its Broker page).

    Task events and remote control work on both. Without --basic-auth or FLOWER_BASIC_AUTH,
    Flower asks for no password: bind it to a private network only.
    """
    from planq.domain.redaction import redact_secrets

    argv = celery_argv("flower", f"--port={port}", *ctx.args)
    if basic_auth:
        os.environ[FLOWER_AUTH_ENV] = check_basic_auth(basic_auth)  # exec'd Flower reads it
        if dry_run:
            users = ",".join(pair.partition(":")[0] for pair in basic_auth.split(","))
            typer.echo(f"{FLOWER_AUTH_ENV}={users}:*** (in the environment)")
    if broker_api:  # by the environment too: its URL usually carries a password
        os.environ[FLOWER_BROKER_API_ENV] = check_broker_api(broker_api)
        if dry_run:
            shown = redact_secrets(broker_api)
            typer.echo(f"{FLOWER_BROKER_API_ENV}={shown} (in the environment)")
    run(argv, dry_run)


def register(app: typer.Typer) -> None:
    """Add worker, beat and flower to the planq app."""
    for fn in (worker, beat, flower):
        app.command(fn.__name__, context_settings=PASS_THROUGH)(boundary(fn))


# -- the reads the CLI and the admin API (cli/api) share ---------------------------------------
# Pages, filters and keyset cursors over the ledger's stores; every write is the service
# object's (tasks/service.py: `session.service`). Errors are cli.output's CliError family
# (BadInput, NotFound) or domain errors, which classify() maps for the CLI and the API alike.


def parse_status(text: str | None) -> Any:
    """The AsyncJobStatus named, or BadInput listing the valid ones."""
    from planq.domain.jobs import AsyncJobStatus

    if text is None:
        return None
    try:
        return AsyncJobStatus(text.strip().lower())
    except ValueError:
        valid = ", ".join(s.value for s in AsyncJobStatus)
        raise BadInput(f"--status {text!r} is not a job status (one of: {valid})") from None


def find_job(session: Planq, job_id: str) -> Any:
    """The job row; InvalidIdError for a malformed id, NotFound for an unknown one."""
    from planq.domain.ids import require_ulid

    job = session.ledger.jobs.get(require_ulid("job_id", job_id))
    if job is None:
        raise NotFound(f"no job with id {job_id!r}")
    return job


def list_jobs(
    session: Planq,
    status: str | None,
    plan_id: str | None,
    limit: int,
    offset: int = 0,
    after: str | None = None,
) -> list[Any]:
    """Jobs newest first (the CLI's, the API's and the dashboard's order), one page.

    after (a job id) pages by key: the jobs listed after that one. A row whose payload
    the domain refuses is listed as an UnreadableJob naming why, not an error for the page.
    """
    check_window(limit, offset)
    wanted, plan = job_filter(status, plan_id)
    store = session.ledger.jobs
    cursor = keyset_cursor(store, "job", after)
    return list(store.list_recent(wanted, plan, limit=limit, offset=offset, after=cursor))


def job_filter(status: str | None, plan_id: str | None) -> tuple[Any, str | None]:
    """(status, plan id) of a job listing's filter, checked (BadInput / InvalidIdError)."""
    from planq.domain.ids import require_ulid

    return parse_status(status), None if plan_id is None else require_ulid("plan_id", plan_id)


def keyset_cursor(store: Any, kind: str, after: str | None) -> str | None:
    """A listing's `after` id, checked: a ULID of a row that still exists (BadInput if not).

    A gone cursor would page to nothing; saying so beats an empty page that looks final.
    """
    from planq.domain.ids import require_ulid

    if after is None:
        return None
    cursor = require_ulid("after", after)
    if store.get(cursor) is None:
        raise BadInput(f"after: no {kind} with id {after!r} (deleted?); list from the first page")
    return cursor


def next_cursor(rows: list[Any], limit: int, id_name: str) -> str | None:
    """The next page's `after`: the last row's id when this page is full (else no next)."""
    return str(getattr(rows[-1], id_name)) if rows and len(rows) == limit else None


def job_page(
    session: Planq,
    status: str | None,
    plan_id: str | None,
    limit: int,
    offset: int = 0,
    after: str | None = None,
) -> Page:
    """Jobs newest first, filtered by status and/or plan, with the filter's bounded total."""
    wanted, plan = job_filter(status, plan_id)
    rows = list_jobs(session, status, plan, limit, offset, after)
    counted = session.ledger.jobs.count(wanted, plan, at_most=TOTAL_CAP + 1)
    cursor = next_cursor(rows, limit, "job_id")
    return Page.bounded(rows, counted, limit, offset, next_after=cursor)


def recent_plans(
    session: Planq, limit: int, offset: int = 0, after: str | None = None
) -> list[Any]:
    """Plans newest first, one page; after (a plan id) pages by key like the jobs'."""
    check_window(limit, offset)
    store = session.ledger.plans
    cursor = keyset_cursor(store, "plan", after)
    return list(store.list_recent(limit, offset, after=cursor))


def plan_page(session: Planq, limit: int, offset: int = 0, after: str | None = None) -> Page:
    """Plans newest first with how many there are (bounded: "more than 10,000")."""
    rows = recent_plans(session, limit, offset, after)
    counted = session.ledger.plans.count(at_most=TOTAL_CAP + 1)
    cursor = next_cursor(rows, limit, "plan_id")
    return Page.bounded(rows, counted, limit, offset, next_after=cursor)


def run_page(session: Planq, job_name: str | None, limit: int) -> Page:
    """Runs newest first (of one job name) with how many there are."""
    check_window(limit, 0)
    rows = session.runs.list_runs(job_name, limit=limit)  # the run port bounds the name
    return Page(rows, session.runs.count_runs(job_name), limit)


def find_plan(session: Planq, plan_id: str) -> Any:
    """The plan; InvalidIdError for a malformed id, NotFound for an unknown one."""
    from planq.domain.ids import require_ulid

    plan = session.ledger.plans.get(require_ulid("plan_id", plan_id))
    if plan is None:
        raise NotFound(f"no plan with id {plan_id!r}")
    return plan


def plan_jobs(session: Planq, plan_id: str) -> tuple[Any, list[Any]]:
    """(plan, its jobs oldest first: the order its phases ran in)."""
    plan = find_plan(session, plan_id)
    return plan, session.ledger.jobs.list_by_plan(plan.plan_id)


def find_run(session: Planq, run_id: str, job_name: str | None = None) -> Any:
    """The run's summary (of job_name, if given); InvalidIdError / NotFound."""
    from planq.domain.ids import require_ulid

    run = session.runs.get_run_by_id(require_ulid("run_id", run_id))
    if run is None or (job_name is not None and run.job_name != job_name):
        where = f" of {job_name!r}" if job_name is not None else ""
        raise NotFound(f"no run{where} with id {run_id!r} (it may have been purged)")
    return run


def finding_page(
    session: Planq,
    run_id: str,
    limit: int,
    offset: int = 0,
    after: str | None = None,
    job_name: str | None = None,
) -> tuple[Any, Page, dict[str, int]]:
    """A run's findings in the order recorded, one page: (run, page, counts by severity).

    `after` (a finding id, the page before's `next_after`) pages by key: one index range
    read of (run_id, created_at, id) however deep the page. The total is the severity
    counts' sum; next_after is set when the page is full.
    """
    from planq.domain.ids import require_ulid

    cursor = None if after is None else require_ulid("after", after)
    run = find_run(session, run_id, job_name=job_name)
    rows = session.runs.list_findings(run.id, limit=limit, offset=offset, after=cursor)
    counts: dict[str, int] = session.runs.finding_severity_counts(run.id)
    next_after = rows[-1].id if rows and len(rows) == limit else None
    page = Page(
        rows, sum(counts.values()), limit, offset, next_after=next_after, order="oldest first"
    )
    return run, page, counts


def plan_events(session: Planq, plan_id: str) -> list[Any]:
    """The plan's audit trail, oldest first."""
    plan = find_plan(session, plan_id)
    return list(session.ledger.plans.list_events(plan.plan_id))
