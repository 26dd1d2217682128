"""live-set indexes: partial indexes for the sweeps, keyset listings, room for HOT updates

Revision ID: 0005_live_indexes
Revises: 0004_availability

The three (status, time) indexes covered every row of async_jobs and were rewritten by
every heartbeat and dispatch stamp (their time columns were indexed, so no such update
could be HOT). They become:

- ix_async_jobs_live (status, created_at, job_id) WHERE queued or running: the stuck sweep,
  the dispatch relay and the live listings read only the live set, in their own order;
- ix_async_jobs_finished_terminal (finished_at) WHERE terminal: TTL cleanup, oldest first;
- ix_async_jobs_failures (status, created_at, job_id) WHERE failed or cancelled: the
  failed-jobs listing, newest first, without walking the succeeded rows;
- ix_async_jobs_created_at_job_id: every listing newest first, keyset-paged (a plan's
  jobs keep (plan_id, created_at): a handful of rows, whose ties sort for nothing);
- uq_async_jobs_retry_of only WHERE retry_of IS NOT NULL (first attempts are most rows).

No index names last_heartbeat, dispatched_at, dispatch_count, cancel_requested_at,
progress or checkpoint_json, so heartbeats, stamps, cancel requests and progress writes
can be HOT on PostgreSQL; the fillfactor (PostgreSQL only) leaves room on each page for
the new row versions. A run's findings page and the runs list get indexes in their
order. plans gets the same fillfactor (every transition updates its row,
and no indexed column of plans changes then) and an index in its listing's order.
SQLite gets the same partial indexes (it has them since 3.8); fillfactor is PostgreSQL's.

On PostgreSQL every index is built CONCURRENTLY before the ones it replaces are dropped
(migrations/online.py), so writes go on during the builds; the unique `retry_of` index is
built under a new name and takes the old constraint's name in one short transaction.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from planq.store.migrations import online

revision = "0005_live_indexes"
down_revision = "0004_availability"
branch_labels = None
depends_on = None

LIVE = "status IN ('queued', 'running')"
FAILURES = "status IN ('failed', 'cancelled')"
TERMINAL = "status IN ('succeeded', 'failed', 'cancelled')"
RETRIES = "retry_of IS NOT NULL"
FILLFACTOR = 85
RUN_FINDINGS = ["run_id", "created_at", "id"]


def _partial(name: str, columns: list[str], where: str, unique: bool = False) -> None:
    op.create_index(
        name,
        "async_jobs",
        columns,
        unique=unique,
        postgresql_where=sa.text(where),
        sqlite_where=sa.text(where),
    )


NEW_INDEXES = [  # (name, table, columns, where)
    ("ix_async_jobs_live", "async_jobs", ["status", "created_at", "job_id"], LIVE),
    ("ix_async_jobs_failures", "async_jobs", ["status", "created_at", "job_id"], FAILURES),
    ("ix_async_jobs_finished_terminal", "async_jobs", ["finished_at"], TERMINAL),
    ("ix_async_jobs_created_at_job_id", "async_jobs", ["created_at", "job_id"], None),
    ("ix_plans_created_at_plan_id", "plans", ["created_at", "plan_id"], None),
    ("ix_run_findings_run_id_created_at_id", "run_findings", RUN_FINDINGS, None),
    ("ix_recoverable_runs_started_at_id", "recoverable_runs", ["started_at", "id"], None),
]
OLD_INDEXES = [
    ("ix_async_jobs_status_last_heartbeat", "async_jobs"),
    ("ix_async_jobs_status_dispatched_at", "async_jobs"),
    ("ix_async_jobs_status_finished_at", "async_jobs"),
    ("ix_plans_created_at", "plans"),
]


def _upgrade_sqlite() -> None:
    with op.batch_alter_table("async_jobs", schema=None) as batch_op:
        batch_op.drop_constraint("uq_async_jobs_retry_of", type_="unique")
        batch_op.drop_index("ix_async_jobs_status_last_heartbeat")
        batch_op.drop_index("ix_async_jobs_status_dispatched_at")
        batch_op.drop_index("ix_async_jobs_status_finished_at")
    _partial("uq_async_jobs_retry_of", ["retry_of"], RETRIES, unique=True)
    op.drop_index("ix_plans_created_at", table_name="plans")
    for name, table, columns, where in NEW_INDEXES:
        online.create_index(name, table, columns, where=where)


def upgrade() -> None:
    if not online.on_postgres():
        _upgrade_sqlite()
        return
    for table in ("async_jobs", "plans"):  # SHARE UPDATE EXCLUSIVE: writes go on
        op.execute(f"ALTER TABLE {table} SET (fillfactor = {FILLFACTOR})")
    for name, table, columns, where in NEW_INDEXES:
        online.create_index(name, table, columns, where=where)
    online.create_index(
        "uq_async_jobs_retry_of_set", "async_jobs", ["retry_of"], where=RETRIES, unique=True
    )
    # The swap, safe to run again: the constraint (first run) or the index (a rerun) goes.
    op.execute("ALTER TABLE async_jobs DROP CONSTRAINT IF EXISTS uq_async_jobs_retry_of")
    op.execute("DROP INDEX IF EXISTS uq_async_jobs_retry_of")
    op.execute("ALTER INDEX uq_async_jobs_retry_of_set RENAME TO uq_async_jobs_retry_of")
    for name, table in OLD_INDEXES:
        online.drop_index(name, table)


def downgrade() -> None:
    if online.on_postgres():
        for table in ("async_jobs", "plans"):
            op.execute(f"ALTER TABLE {table} RESET (fillfactor)")
    op.drop_index("ix_recoverable_runs_started_at_id", table_name="recoverable_runs")
    op.drop_index("ix_run_findings_run_id_created_at_id", table_name="run_findings")
    op.drop_index("ix_plans_created_at_plan_id", table_name="plans")
    op.create_index("ix_plans_created_at", "plans", ["created_at"])
    for name in (
        "ix_async_jobs_created_at_job_id",
        "ix_async_jobs_finished_terminal",
        "ix_async_jobs_failures",
        "ix_async_jobs_live",
        "uq_async_jobs_retry_of",
    ):
        op.drop_index(name, table_name="async_jobs")
    with op.batch_alter_table("async_jobs", schema=None) as batch_op:
        batch_op.create_unique_constraint("uq_async_jobs_retry_of", ["retry_of"])
        batch_op.create_index("ix_async_jobs_status_last_heartbeat", ["status", "last_heartbeat"])
        batch_op.create_index("ix_async_jobs_status_dispatched_at", ["status", "dispatched_at"])
        batch_op.create_index("ix_async_jobs_status_finished_at", ["status", "finished_at"])
