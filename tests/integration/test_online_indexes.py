"""Index builds in migrations let writes go on (migrations/online.py: CONCURRENTLY).

A plain CREATE INDEX waits for the transactions already writing the table and, while it
waits and builds, every new write queues behind its SHARE lock: a fleet's queue stands
still. Here a transaction holding a write on `plans` stays open while migration 0010
builds its index; a second writer, with a 2 s lock timeout, must still get through.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator

import pytest
from sqlalchemy import text

from planq.domain.plans import Plan
from planq.store import Database
from planq.store.migrate import upgrade
from tests.support import add_plan_at_any_revision, create_pg_database, drop_pg_database, wait_for

pytestmark = pytest.mark.postgres

BEFORE = "0009_severity_counters"
TARGET = "0010_gate_index"


@pytest.fixture
def url() -> Iterator[str]:
    made = create_pg_database()
    try:
        upgrade(made, BEFORE)
        yield made
    finally:
        drop_pg_database(made)


def _migration_waiting(db: Database) -> bool:
    """The migration's backend is waiting on another transaction (the open writer)."""
    with db.engine.connect() as conn:
        return bool(
            conn.execute(
                text(
                    "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() "
                    "AND wait_event_type = 'Lock' AND query ILIKE '%ix_plans_awaiting_gate%'"
                )
            ).scalar()
        )


def test_writes_go_on_while_the_gate_index_is_built(url: str) -> None:
    db = Database(url)
    held, other = Plan.with_steps(["a"]), Plan.with_steps(["b"])
    add_plan_at_any_revision(db, held)
    add_plan_at_any_revision(db, other)
    outcome: dict[str, BaseException | None] = {}

    def migrate() -> None:
        try:
            upgrade(url, TARGET)
            outcome["migration"] = None
        except BaseException as exc:  # reported by the assertion below
            outcome["migration"] = exc

    with db.engine.connect() as holder:
        holder.execute(  # a write, left open
            text("UPDATE plans SET version = version WHERE plan_id = :id"), {"id": held.plan_id}
        )
        migration = threading.Thread(target=migrate)
        migration.start()
        wait_for(lambda: _migration_waiting(db), timeout=30, what="the build to wait on it")
        with db.engine.begin() as writer:  # a plain CREATE INDEX would queue this behind it
            writer.execute(text("SET LOCAL lock_timeout = '2s'"))
            writer.execute(
                text("UPDATE plans SET version = version + 1 WHERE plan_id = :id"),
                {"id": other.plan_id},
            )
        holder.rollback()
    migration.join(60)
    assert outcome == {"migration": None}
    with db.engine.connect() as conn:
        valid = conn.execute(
            text(
                "SELECT indisvalid FROM pg_index "
                "WHERE indexrelid = to_regclass('ix_plans_awaiting_gate')"
            )
        ).scalar()
        version = conn.execute(
            text("SELECT version FROM plans WHERE plan_id = :id"), {"id": other.plan_id}
        ).scalar()
    assert valid is True and version == 1
    db.close()


def test_0005_runs_again_after_an_interrupted_upgrade() -> None:
    # Its builds commit one by one, so an upgrade stopped after the retry_of swap (the
    # version row not yet written) leaves the unique index where the constraint was.
    from alembic import command

    from planq.store.migrate import alembic_config

    made = create_pg_database()
    try:
        upgrade(made, "0005_live_indexes")
        command.stamp(alembic_config(made), "0004_availability")  # as if stopped there
        upgrade(made, "0005_live_indexes")  # again: each step finds its work done or redoes it
        db = Database(made)
        with db.engine.connect() as conn:
            unique = conn.execute(
                text(
                    "SELECT indisunique AND indisvalid AND indpred IS NOT NULL FROM pg_index "
                    "WHERE indexrelid = to_regclass('uq_async_jobs_retry_of')"
                )
            ).scalar()
            left = conn.execute(
                text("SELECT count(*) FROM pg_class WHERE relname LIKE '%retry_of_set'")
            ).scalar()
        assert unique is True and left == 0
        db.close()
    finally:
        drop_pg_database(made)
