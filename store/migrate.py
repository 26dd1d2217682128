"""Apply the ledger's Alembic migrations: `python -m store.migrate [URL]` or `planq db upgrade`."""

from __future__ import annotations

import fcntl
import os
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # alembic loads only when a migration runs (a CLI listing never needs it)
    from alembic.config import Config

MIGRATIONS = Path(__file__).with_name("migrations")
DEFAULT_URL_ENV = "PLANQ_DATABASE_URL"


def alembic_config(url: str) -> Config:
    """An Alembic config pointing at planq's migrations, with no alembic.ini needed."""
    from alembic.config import Config

    from planq.store.database import normalise_url

    cfg = Config()
    cfg.set_main_option("script_location", str(MIGRATIONS))
    cfg.set_main_option("sqlalchemy.url", normalise_url(url).replace("%", "%%"))
    return cfg


def upgrade(url: str, revision: str = "head") -> None:
    """Bring the database at url up to revision, and its job partitions up to date.

    `planq db upgrade` at head still creates the partitions ahead (PostgreSQL from 0007),
    as the beat task does: an upgrade after a long beat outage leaves none missing.
    """
    from alembic import command
    from sqlalchemy.pool import NullPool

    from planq.store.database import make_engine
    from planq.store.partitions import prepare_partitions

    command.upgrade(alembic_config(url), revision)
    engine = make_engine(url, poolclass=NullPool)
    try:
        prepare_partitions(engine)
    finally:
        engine.dispose()


#: The newest revision (a test holds it equal to the migrations' head): lets a SQLite
#: ledger that is already current be opened without loading alembic's scripts.
HEAD_REVISION = "0014_webhook_outbox"


def migrate_sqlite(url: str) -> bool:
    """A SQLite ledger migrates itself (PostgreSQL only by `planq db upgrade`); True if it did.

    The one door for automatic migration (the worker's preflight, each process's Runtime,
    the CLI's reader): one catalogue query when the file is current, else `upgrade(url)`
    under an exclusive lock on the file, asked again inside it: a worker and a producer
    started together on a new file migrate it once (the second finds it current), where
    both used to create the same tables ("table ... already exists").
    """
    from sqlalchemy.engine import make_url

    from planq.store.database import normalise_url

    parsed = make_url(normalise_url(url))
    if parsed.get_backend_name() != "sqlite":
        return False
    if _sqlite_revision(url) == HEAD_REVISION:
        return False
    with _migrating(parsed.database):
        if _sqlite_revision(url) == HEAD_REVISION:  # another process migrated it meanwhile
            return False
        upgrade(url)
    return True


def _sqlite_revision(url: str) -> str | None:
    """The SQLite file's Alembic revision; None for a new file (or no file yet)."""
    from sqlalchemy import create_engine
    from sqlalchemy.exc import OperationalError
    from sqlalchemy.pool import NullPool

    from planq.store.database import normalise_url

    engine = create_engine(normalise_url(url), poolclass=NullPool)
    try:
        with engine.connect() as conn:
            revision = conn.exec_driver_sql("SELECT version_num FROM alembic_version").scalar()
    except OperationalError:  # no such table (a new file), or no file yet
        return None
    finally:
        engine.dispose()
    return None if revision is None else str(revision)


@contextmanager
def _migrating(database: str | None) -> Iterator[None]:
    """An exclusive flock on the SQLite file while one process migrates it.

    flock, not SQLite's own locks: those are POSIX record locks, which flock does not see
    on Linux or the BSDs, so readers and writers of the ledger are not held up by it. An
    in-memory database is one process's own: nothing to lock.
    """
    if not database or database == ":memory:":
        yield
        return
    path = Path(database)
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("ab") as handle:  # an empty new file is an empty SQLite database
        fcntl.flock(handle.fileno(), fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle.fileno(), fcntl.LOCK_UN)


def downgrade(url: str, revision: str) -> None:
    """Take the database at url down to revision."""
    from alembic import command

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
