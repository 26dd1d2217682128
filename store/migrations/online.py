"""Index builds that let writes go on: CONCURRENTLY on PostgreSQL, plain on SQLite.

A plain CREATE INDEX holds a SHARE lock on its table for the whole build, so every write
to the table waits: at millions of rows, minutes of a fleet's queue standing still.
CONCURRENTLY builds beside the writes (two passes, waiting out the transactions already
running) but cannot run inside a transaction, so the migration's transaction is committed
first: env.py runs one transaction per migration, so what commits is this migration's
earlier steps, not half of another's. An interrupted concurrent build leaves an INVALID
index behind: a rerun drops any index of the name (that one, or a valid one a later
failure left) and builds it again. Not for a partitioned table: PostgreSQL refuses
CONCURRENTLY there (a partition's index is built with its partition).
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op


def on_postgres() -> bool:
    """Whether the migration runs against PostgreSQL (offline too: the context knows)."""
    return op.get_context().dialect.name == "postgresql"


def create_index(
    name: str, table: str, columns: list[str], *, where: str | None = None, unique: bool = False
) -> None:
    """CREATE INDEX, CONCURRENTLY on PostgreSQL (after dropping any left by an earlier run)."""
    clause = sa.text(where) if where else None
    if not on_postgres():
        op.create_index(name, table, columns, unique=unique, sqlite_where=clause)
        return
    with op.get_context().autocommit_block():
        op.execute(f"DROP INDEX CONCURRENTLY IF EXISTS {name}")
        op.create_index(
            name,
            table,
            columns,
            unique=unique,
            postgresql_where=clause,
            postgresql_concurrently=True,
        )


def drop_index(name: str, table: str) -> None:
    """DROP INDEX, CONCURRENTLY on PostgreSQL (no lock on the table's writes)."""
    if not on_postgres():
        op.drop_index(name, table_name=table)
        return
    with op.get_context().autocommit_block():
        op.execute(f"DROP INDEX CONCURRENTLY IF EXISTS {name}")
