"""gated_at: the gate index no longer keeps every plan move from being HOT

Revision ID: 0012_gated_at
Revises: 0011_partitioned_events

0010 indexed plans (updated_at, plan_id) WHERE pipeline_state = 'awaiting_approval'.
PostgreSQL makes an update HOT only when no column any index names changes, whatever the
index's predicate says of the row, and every plan move (queue, claim, finish: three per
job) writes updated_at: from 0010 on, none of them was HOT, each adding an entry to every
index of `plans`. The gate's reads now key on `gated_at`, when the plan reached its gate:
the plan store writes it with the plan (NULL unless waiting), and nothing else does, so
the moves are HOT again. The waiting plans (a few, by design) are backfilled from
updated_at, which is when they reached the gate. The new index is built and the old one
dropped CONCURRENTLY (migrations/online.py); a nullable column without a default rewrites
no row. A plan that a process still on the old code moves to its gate after the backfill
has no gated_at until its next write: its expiry is unchanged (it counts from updated_at),
only its place in the gate's order (NULLs last on PostgreSQL) and the oldest-wait gauge.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from planq.store.migrations import online

revision = "0012_gated_at"
down_revision = "0011_partitioned_events"
branch_labels = None
depends_on = None

WAITING = "pipeline_state = 'awaiting_approval'"


def upgrade() -> None:
    with op.batch_alter_table("plans", schema=None) as batch_op:
        batch_op.add_column(sa.Column("gated_at", sa.DateTime(timezone=True), nullable=True))
    op.execute(f"UPDATE plans SET gated_at = updated_at WHERE {WAITING}")
    online.create_index("ix_plans_gated_at", "plans", ["gated_at", "plan_id"], where=WAITING)
    online.drop_index("ix_plans_awaiting_gate", "plans")


def downgrade() -> None:
    online.create_index("ix_plans_awaiting_gate", "plans", ["updated_at", "plan_id"], where=WAITING)
    online.drop_index("ix_plans_gated_at", "plans")
    with op.batch_alter_table("plans", schema=None) as batch_op:
        batch_op.drop_column("gated_at")
