"""severity counters: a run keeps its findings' count per severity on its own row

Revision ID: 0009_severity_counters
Revises: 0008_plan_pipeline

Three BIGINT columns on recoverable_runs (data_loss_findings, inconsistent_findings,
anomaly_findings), bumped by the same fenced UPDATE that bumps finding_count when a finding
is recorded, so the counts the dashboard, the API and `planq runs show` read are one
primary-key lookup instead of a GROUP BY over run_findings (at a million findings, 0.2-0.5 s
per run on every dashboard refresh). Existing runs are backfilled from their findings in one
statement. On PostgreSQL 11+ a column added with a constant default rewrites no row.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0009_severity_counters"
down_revision = "0008_plan_pipeline"
branch_labels = None
depends_on = None

COUNTERS = {
    "data_loss": "data_loss_findings",
    "inconsistent": "inconsistent_findings",
    "anomaly": "anomaly_findings",
}


def upgrade() -> None:
    # Plain ALTER TABLE … ADD/DROP COLUMN on both backends (SQLite >= 3.35), never batch
    # mode: its copy-and-drop of recoverable_runs would cascade into run_findings on SQLite.
    for column in COUNTERS.values():
        op.add_column(
            "recoverable_runs",
            sa.Column(column, sa.BigInteger(), nullable=False, server_default=sa.text("0")),
        )
    for severity, column in COUNTERS.items():
        op.execute(
            sa.text(
                f"UPDATE recoverable_runs SET {column} = (SELECT count(*) FROM run_findings "
                "WHERE run_findings.run_id = recoverable_runs.id AND run_findings.severity = "
                f"'{severity}') WHERE EXISTS (SELECT 1 FROM run_findings WHERE "
                "run_findings.run_id = recoverable_runs.id)"
            )
        )


def downgrade() -> None:
    for column in COUNTERS.values():
        op.execute(sa.text(f"ALTER TABLE recoverable_runs DROP COLUMN {column}"))
