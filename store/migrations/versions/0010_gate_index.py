"""gate index: the plans waiting at an approval gate, by how long they have waited

Revision ID: 0010_gate_index
Revises: 0009_severity_counters

A partial index on plans (updated_at, plan_id) WHERE pipeline_state = 'awaiting_approval':
the expiry sweep and the metrics endpoint's gauges (how many plans wait, the oldest wait)
read only the plans at a gate, so at millions of plans they stay index reads of the few
waiting ones instead of a scan of the table on every scrape.

Built CONCURRENTLY on PostgreSQL (migrations/online.py): writes to `plans` go on while it
is built.
"""

from __future__ import annotations

from planq.store.migrations import online

revision = "0010_gate_index"
down_revision = "0009_severity_counters"
branch_labels = None
depends_on = None

WAITING = "pipeline_state = 'awaiting_approval'"


def upgrade() -> None:
    online.create_index("ix_plans_awaiting_gate", "plans", ["updated_at", "plan_id"], where=WAITING)


def downgrade() -> None:
    online.drop_index("ix_plans_awaiting_gate", "plans")
