"""gate index: the plans waiting at an approval gate, by how long they have waited

Revision ID: 0010_gate_index
Revises: 0009_severity_counters

A partial index on plans (updated_at, plan_id) WHERE pipeline_state = 'awaiting_approval':
the expiry sweep and the metrics endpoint's gauges (how many plans wait, the oldest wait)
read only the plans at a gate, so at millions of plans they stay index reads of the few
waiting ones instead of a scan of the table on every scrape.

Built with a plain CREATE INDEX inside the upgrade's transaction: writes to `plans` wait
while it is built (one pass over the table; as 0005's indexes, not CONCURRENTLY yet).
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0010_gate_index"
down_revision = "0009_severity_counters"
branch_labels = None
depends_on = None

WAITING = "pipeline_state = 'awaiting_approval'"


def upgrade() -> None:
    op.create_index(
        "ix_plans_awaiting_gate",
        "plans",
        ["updated_at", "plan_id"],
        postgresql_where=sa.text(WAITING),
        sqlite_where=sa.text(WAITING),
    )


def downgrade() -> None:
    op.drop_index("ix_plans_awaiting_gate", table_name="plans")
