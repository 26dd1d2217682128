"""partitioned jobs: async_jobs range-partitioned by job id (a day of ULIDs each), PostgreSQL

Revision ID: 0007_partitioned_jobs
Revises: 0006_error_traceback

TTL cleanup then drops a whole partition whose rows all ended before the cutoff
(store/partitions.py) instead of deleting row by row, and the table shrinks. The rows do
not move: the old table is set aside and adopted as the partition of every job id up to
the end of today (`set_aside`, `partition_from`), its primary key and 0005's indexes
attached as the new parent's, so the lock the upgrade holds on async_jobs lasts two reads
of the table (ATTACH checking every id is in range, and the build of the small `retry_of`
index), not a copy and six index builds. One partition per day follows, from tomorrow to
AHEAD days ahead, and a DEFAULT partition. A unique index of a partitioned table must hold
the partition key, so `retry_of` keeps a plain partial index and the retry's insert checks
uniqueness under an advisory lock (store/sql_jobs.py). Fillfactor is set on every
partition (a partitioned table takes no storage parameter; the adopted table has 0005's).
An empty table (a new ledger) is dropped instead, and the partitions start yesterday. The
downgrade copies the rows back into one table with 0006's indexes. SQLite is left as it is.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import sqlalchemy as sa
from alembic import op

from planq.store.partitions import JOBS, partition_from, set_aside

revision = "0007_partitioned_jobs"
down_revision = "0006_error_traceback"
branch_labels = None
depends_on = None

LIVE = "status IN ('queued', 'running')"
FAILURES = "status IN ('failed', 'cancelled')"
TERMINAL = "status IN ('succeeded', 'failed', 'cancelled')"
RETRIES = "retry_of IS NOT NULL"
FILLFACTOR = 85
OLD = "async_jobs_unpartitioned"
INDEXES = [  # (name, columns, where): every index of 0005 but the unique one
    ("ix_async_jobs_live", ["status", "created_at", "job_id"], LIVE),
    ("ix_async_jobs_failures", ["status", "created_at", "job_id"], FAILURES),
    ("ix_async_jobs_finished_terminal", ["finished_at"], TERMINAL),
    ("ix_async_jobs_created_at_job_id", ["created_at", "job_id"], None),
    ("ix_async_jobs_plan_id_created_at", ["plan_id", "created_at"], None),
]
CHECKS = {
    "terminal_finished": f"NOT ({TERMINAL}) OR finished_at IS NOT NULL",
    "phase": "phase IN ('strategize', 'execute', 'apply')",
    "running_worker": "status <> 'running' OR worker_id IS NOT NULL",
    "status": "status IN ('queued', 'running', 'succeeded', 'failed', 'cancelled')",
    "attempt": "attempt >= 1",
    "dispatch_count": "dispatch_count >= 0",
    "schema_version": "schema_version >= 1",
}


def _columns() -> list[sa.Column[object]]:
    moment = sa.DateTime(timezone=True)
    return [
        sa.Column("job_id", sa.String(length=26), nullable=False),
        sa.Column("plan_id", sa.String(length=26), nullable=False),
        sa.Column("phase", sa.String(length=16), nullable=False),
        sa.Column("status", sa.String(length=16), nullable=False),
        sa.Column("schema_version", sa.Integer(), nullable=False),
        sa.Column("payload_json", sa.Text(), nullable=False),
        sa.Column("worker_id", sa.String(length=255), nullable=True),
        sa.Column("created_at", moment, nullable=False),
        sa.Column("started_at", moment, nullable=True),
        sa.Column("finished_at", moment, nullable=True),
        sa.Column("last_heartbeat", moment, nullable=True),
        sa.Column("error_message", sa.Text(), nullable=True),
        sa.Column("attempt", sa.Integer(), nullable=False),
        sa.Column("retry_of", sa.String(length=26), nullable=True),
        sa.Column("dispatched_at", moment, nullable=True),
        sa.Column("dispatch_count", sa.Integer(), nullable=False),
        sa.Column("cancel_requested_at", moment, nullable=True),
        sa.Column("progress", sa.Float(), nullable=True),
        sa.Column("checkpoint_json", sa.Text(), nullable=True),
        sa.Column("error_traceback", sa.Text(), nullable=True),
    ]


def _create_jobs_table(**options: Any) -> None:
    op.create_table(
        "async_jobs",
        *_columns(),
        *(
            sa.CheckConstraint(sql, name=op.f(f"ck_async_jobs_{name}"))
            for name, sql in CHECKS.items()
        ),
        sa.PrimaryKeyConstraint("job_id", name="pk_async_jobs"),
        **options,
    )


def _strip(table: str, names: list[str]) -> None:
    """Drop a table's indexes and primary key, so the new table can take their names."""
    for name in names:
        op.execute(f"DROP INDEX IF EXISTS {name}")
    op.execute(f"ALTER TABLE {table} DROP CONSTRAINT pk_async_jobs")


def _index(name: str, columns: list[str], where: str | None, unique: bool = False) -> None:
    clause = sa.text(where) if where else None
    op.create_index(name, "async_jobs", columns, unique=unique, postgresql_where=clause)


def _copy(source: str) -> None:
    names = ", ".join(c.name for c in _columns())
    op.execute(f"INSERT INTO async_jobs ({names}) SELECT {names} FROM {source}")
    op.execute(f"DROP TABLE {source}")


def upgrade() -> None:
    bind = op.get_bind()
    if bind.dialect.name != "postgresql":
        return
    op.execute("DROP INDEX IF EXISTS uq_async_jobs_retry_of")  # the parent's is not unique
    old = set_aside(bind, JOBS, [name for name, _, _ in INDEXES] + ["pk_async_jobs"])
    _create_jobs_table(postgresql_partition_by="RANGE (job_id)")
    for name, columns, where in INDEXES:
        _index(name, columns, where)
    _index("ix_async_jobs_retry_of", ["retry_of"], RETRIES)
    partition_from(bind, JOBS, old, datetime.now(UTC))


def downgrade() -> None:
    if op.get_bind().dialect.name != "postgresql":
        return
    op.execute(f"ALTER TABLE async_jobs RENAME TO {OLD}")
    _strip(OLD, [name for name, _, _ in INDEXES] + ["ix_async_jobs_retry_of"])
    _create_jobs_table(postgresql_with={"fillfactor": FILLFACTOR})
    _copy(OLD)  # drops the partitioned table with its partitions
    for name, columns, where in INDEXES:
        _index(name, columns, where)
    _index("uq_async_jobs_retry_of", ["retry_of"], RETRIES, unique=True)
