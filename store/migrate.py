"""Apply the ledger's Alembic migrations: `python -m store.migrate [URL]` or `planq db upgrade`."""

from __future__ import annotations

import os
import sys
from pathlib import Path

from alembic import command
from alembic.config import Config

MIGRATIONS = Path(__file__).with_name("migrations")
DEFAULT_URL_ENV = "PLANQ_DATABASE_URL"


def alembic_config(url: str) -> Config:
    """An Alembic config pointing at planq's migrations, with no alembic.ini needed."""
    from planq.store.database import normalise_url

    cfg = Config()
    cfg.set_main_option("script_location", str(MIGRATIONS))
    cfg.set_main_option("sqlalchemy.url", normalise_url(url).replace("%", "%%"))
    return cfg


def upgrade(url: str, revision: str = "head") -> None:
    """Bring the database at url up to revision."""
    command.upgrade(alembic_config(url), revision)


def downgrade(url: str, revision: str) -> None:
    """Take the database at url down to revision."""
    command.downgrade(alembic_config(url), revision)


def main(argv: list[str] | None = None) -> int:
    """CLI entry: upgrade the database named on the command line or in PLANQ_DATABASE_URL."""
    args = sys.argv[1:] if argv is None else argv
    url = args[0] if args else os.environ.get(DEFAULT_URL_ENV, "sqlite:///planq.db")
    upgrade(url)
    print(f"ledger at {url.split('@')[-1]} is at the latest revision")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
