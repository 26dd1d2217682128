"""`planq worker|beat|flower`: exec `celery -A worker_config …` with planq's defaults.

The process is replaced (os.execv), so signals reach Celery directly and
`planq worker` behaves exactly like `celery -A worker_config worker` with these options.
Options this wrapper does not know are passed through to Celery unchanged.
"""

from __future__ import annotations

import os
import shlex
import shutil
import sys
from pathlib import Path
from typing import Annotated

import typer

from cli.output import boundary

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
