"""Alembic environment: planq's metadata, the URL from the caller's config."""

from __future__ import annotations

from typing import Any

from alembic import context
from sqlalchemy import event, pool
from sqlalchemy.engine import Engine

from planq.store.database import make_engine
from planq.store.models import Base
from planq.store.partitions import compare_filters

config = context.config
target_metadata = Base.metadata


def run_migrations_offline() -> None:
    """Emit SQL without a connection."""
    context.configure(
        url=config.get_main_option("sqlalchemy.url"),
        target_metadata=target_metadata,
        literal_binds=True,
        render_as_batch=True,
    )
    with context.begin_transaction():
        context.run_migrations()


def run_migrations_online() -> None:
    """Apply migrations over one connection (SQLite gets batch mode for ALTERs)."""
    connection = config.attributes.get("connection")
    if connection is not None:
        _run(connection)
        return
    url = config.get_main_option("sqlalchemy.url")
    assert url
    engine = make_engine(url, poolclass=pool.NullPool)
    rebuilds_tables = engine.dialect.name == "sqlite"
    if rebuilds_tables:
        _foreign_keys_off(engine)
    with engine.connect() as conn:
        _run(conn)
        if rebuilds_tables:
            _check_foreign_keys(conn)
    engine.dispose()


def _foreign_keys_off(engine: Engine) -> None:
    """SQLite rebuilds a table (batch mode: copy, DROP, rename) with foreign keys off.

    With them on, the DROP cascades into every row that points at the table: a run's
    findings (`ON DELETE CASCADE`) vanished when 0003 rebuilt recoverable_runs. SQLite's
    own procedure for altering a table turns them off first and checks them after. This
    listener runs after make_engine's, which turns them on for planq's own connections.
    """

    @event.listens_for(engine, "connect")
    def _off(dbapi_conn: Any, _record: Any) -> None:
        dbapi_conn.execute("PRAGMA foreign_keys=OFF")


def _check_foreign_keys(conn: Any) -> None:
    """Fail the migration loudly if a rebuild left a row pointing at nothing."""
    broken = conn.exec_driver_sql("PRAGMA foreign_key_check").all()
    if broken:
        raise RuntimeError(f"migration left {len(broken)} row(s) with a broken foreign key")


def _run(connection: object) -> None:
    context.configure(
        connection=connection,  # type: ignore[arg-type]
        target_metadata=target_metadata,
        render_as_batch=True,
        compare_type=True,
        # One transaction per migration: a migration that builds an index CONCURRENTLY
        # (migrations/online.py) commits its own earlier steps first, never half of another's.
        transaction_per_migration=True,
        **compare_filters(connection.dialect.name),  # type: ignore[attr-defined]
    )
    with context.begin_transaction():
        context.run_migrations()


if context.is_offline_mode():
    run_migrations_offline()
else:
    run_migrations_online()
