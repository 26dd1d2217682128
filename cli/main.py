"""The `planq` command: typer app assembled from small command groups."""

from __future__ import annotations

import typer

app = typer.Typer(
    name="planq",
    help="Run plan phases as Celery jobs with a durable SQL job ledger.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
)
db_app = typer.Typer(help="The ledger database.", no_args_is_help=True)
app.add_typer(db_app, name="db")


@db_app.command("upgrade")
def db_upgrade(
    url: str = typer.Option(None, "--url", envvar="PLANQ_DATABASE_URL", help="Ledger URL."),
) -> None:
    """Apply the ledger's migrations (idempotent)."""
    from store.migrate import upgrade

    target = url or "sqlite:///planq.db"
    upgrade(target)
    typer.echo(f"ledger at {target.split('@')[-1]} is at the latest revision")


@app.command()
def demo() -> None:
    """Run the whole lifecycle embedded: nothing to install or start."""
    from cli.demo import run_demo

    raise typer.Exit(run_demo())


def main() -> None:
    """Console-script entry point."""
    app()
