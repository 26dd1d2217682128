"""partitioned events: plan_events range-partitioned by event id (a day of ULIDs each), PostgreSQL

Revision ID: 0011_partitioned_events
Revises: 0010_gate_index

A plan's audit trail grows several rows per job (queued, started, ended, and the gate's),
faster than async_jobs, and its TTL cleanup was a batched DELETE that never shrank the
table. As async_jobs since 0007 (store/partitions.py, `EVENTS`): one partition per UTC day
of event ids, a DEFAULT partition, partitions made ahead by beat, and cleanup that drops a
day whose events all passed the TTL.

The events already written are not moved: the old table is set aside and adopted as the
partition of every id up to the end of today (`set_aside`, `partition_from`); its indexes,
primary key and foreign key are attached as the new parent's, so the lock the upgrade
holds lasts ATTACH's one read of the table (every id in range), not a copy and three
index builds. `plans` is locked first, in the order every transition takes the two
tables (the foreign key makes ATTACH lock it). That partition is dropped whole once its
last event has passed the TTL. An empty table (a new ledger) is dropped instead, and the
partitions start yesterday. The downgrade copies the rows back into one table. SQLite is
left as it is.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import sqlalchemy as sa
from alembic import op

from planq.store.partitions import EVENTS, partition_from, set_aside

revision = "0011_partitioned_events"
down_revision = "0010_gate_index"
branch_labels = None
depends_on = None

OLD = "plan_events_unpartitioned"
PHASES = "('strategize', 'execute', 'apply')"
KINDS = (
    "('queued', 'started', 'succeeded', 'failed', 'cancelled', 'cancel_requested', "
    "'awaiting_approval', 'approved', 'rejected', 'retried', 'done', 'expired')"
)
COLUMNS = "event_id, plan_id, at, kind, phase, job_id, actor, note"
INDEXES = {"ix_plan_events_plan_id_at": ["plan_id", "at"], "ix_plan_events_at": ["at"]}


def _create_events_table(**options: Any) -> None:
    """0008's plan_events, with its constraints' names."""
    op.create_table(
        "plan_events",
        sa.Column("event_id", sa.String(length=26), nullable=False),
        sa.Column("plan_id", sa.String(length=26), nullable=False),
        sa.Column("at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("kind", sa.String(length=24), nullable=False),
        sa.Column("phase", sa.String(length=16), nullable=True),
        sa.Column("job_id", sa.String(length=26), nullable=True),
        sa.Column("actor", sa.String(length=200), nullable=True),
        sa.Column("note", sa.Text(), nullable=True),
        sa.CheckConstraint(f"kind IN {KINDS}", name=op.f("ck_plan_events_kind")),
        sa.CheckConstraint(
            f"phase IS NULL OR phase IN {PHASES}", name=op.f("ck_plan_events_phase")
        ),
        sa.ForeignKeyConstraint(
            ["plan_id"],
            ["plans.plan_id"],
            name=op.f("fk_plan_events_plan_id_plans"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("event_id", name=op.f("pk_plan_events")),
        **options,
    )
    for name, columns in INDEXES.items():
        op.create_index(op.f(name), "plan_events", columns)


def upgrade() -> None:
    bind = op.get_bind()
    if bind.dialect.name != "postgresql":
        return
    # plans first, as every transition takes them: the foreign key locks it (no deadlock)
    op.execute("LOCK TABLE plans IN SHARE ROW EXCLUSIVE MODE")
    old = set_aside(bind, EVENTS, [*INDEXES, "pk_plan_events"])
    _create_events_table(postgresql_partition_by="RANGE (event_id)")
    partition_from(bind, EVENTS, old, datetime.now(UTC))


def downgrade() -> None:
    if op.get_bind().dialect.name != "postgresql":
        return
    op.execute(f"ALTER TABLE plan_events RENAME TO {OLD}")
    for name in [*INDEXES, "pk_plan_events"]:
        op.execute(f"ALTER INDEX {name} RENAME TO {OLD}_{name}")
    _create_events_table()
    op.execute(f"INSERT INTO plan_events ({COLUMNS}) SELECT {COLUMNS} FROM {OLD}")
    op.execute(f"DROP TABLE {OLD}")  # with its partitions
