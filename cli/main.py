"""The `planq` command: typer app assembled from small command groups.

Settings come from the environment (PLANQ_DATABASE_URL, PLANQ_BROKER_URL, …) and the app is
built only when a command needs it, so `planq --help` is instant and needs no services.
Exit codes: 0 ok, 1 refused (or timed out, or the watched job failed), 2 bad input, 3 ledger
or broker unavailable, 4 the watched job was cancelled (cli/output.py has the list).
"""

from __future__ import annotations

import logging
from typing import Annotated

import typer

from planq.cli import services
from planq.cli.api.server import api_command
from planq.cli.jobs import jobs_app
from planq.cli.output import OneLineErrors, boundary, redacted
from planq.cli.plans import plans_app
from planq.cli.runs import runs_app
from planq.cli.schedule import schedule_command
from planq.cli.tokens import tokens_app

app = typer.Typer(
    name="planq",
    cls=OneLineErrors,  # a bad option value is one stderr line and exit 2, like every error
    help="Run plan phases as Celery jobs with a durable SQL job ledger.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    epilog="Exit codes: 0 ok, 1 refused, timed out or the watched job failed, 2 bad input, "
    "3 ledger/broker unavailable, 4 the watched job was cancelled.",
)
db_app = typer.Typer(help="The ledger database.", no_args_is_help=True)
app.add_typer(db_app, name="db")
app.add_typer(plans_app, name="plans")
app.add_typer(jobs_app, name="jobs")
app.add_typer(runs_app, name="runs")
app.add_typer(tokens_app, name="tokens")
app.command("schedule")(schedule_command)
app.command("api")(api_command)
services.register(app)


class _OneLine(logging.Handler):
    """Library warnings as one stderr line each, without tracebacks (the CLI explains)."""

    def emit(self, record: logging.LogRecord) -> None:
        try:
            message = " ".join(record.getMessage().split())
        except Exception:  # a broken log call must not break the command
            message = str(record.msg)
        typer.echo(f"planq: {record.levelname.lower()}: {redacted(message)}", err=True)


@app.callback()
def root(
    verbose: Annotated[
        bool, typer.Option("--verbose", "-v", help="Show library logs with tracebacks.")
    ] = False,
) -> None:
    """Run plan phases as Celery jobs with a durable SQL job ledger."""
    root_logger = logging.getLogger()
    if verbose:
        logging.basicConfig(level=logging.INFO)
    elif not root_logger.handlers:
        root_logger.addHandler(_OneLine(logging.WARNING))
        root_logger.setLevel(logging.WARNING)


@db_app.command("upgrade")
@boundary
def db_upgrade(
    url: Annotated[
        str | None,
        typer.Option("--url", envvar="PLANQ_DATABASE_URL", help="Ledger URL.", show_default=False),
    ] = None,
) -> None:
    """Apply the ledger's migrations (idempotent)."""
    from planq.worker_config.ledger import upgrade_ledger

    target = url or "sqlite:///planq.db"
    upgrade_ledger(target)
    typer.echo(f"ledger at {target.split('@')[-1]} is at the latest revision")


@app.command()
def demo() -> None:
    """Run the whole lifecycle embedded: nothing to install or start."""
    from planq.cli.demo import run_demo

    raise typer.Exit(run_demo())


def main() -> None:
    """Console-script entry point."""
    app()
