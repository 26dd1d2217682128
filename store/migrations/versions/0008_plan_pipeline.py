"""plan pipeline: a plan runs its phases by itself, waits at an approval gate, keeps its events

Revision ID: 0008_plan_pipeline
Revises: 0007_partitioned_jobs

Four nullable columns on plans (where the pipeline stops, the phase it waits before, its
state, how long a decision may take; NULL on every plan without one, so the spec's plans
are unchanged; no CHECK, so SQLite adds them in place without rebuilding the table: the
domain's enums check them) and the append-only plan_events table (the audit trail,
cleaned by the jobs' TTL). Adding nullable columns without a default rewrites no row on
PostgreSQL. Another branch adds 0007 in parallel: the merger rechains down_revision.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0008_plan_pipeline"
down_revision = "0007_partitioned_jobs"
branch_labels = None
depends_on = None

PHASES = "('strategize', 'execute', 'apply')"
KINDS = (
    "('queued', 'started', 'succeeded', 'failed', 'cancelled', 'cancel_requested', "
    "'awaiting_approval', 'approved', 'rejected', 'retried', 'done', 'expired')"
)


def upgrade() -> None:
    with op.batch_alter_table("plans", schema=None) as batch_op:
        batch_op.add_column(sa.Column("pipeline_through", sa.String(length=16), nullable=True))
        batch_op.add_column(sa.Column("pipeline_gate", sa.String(length=16), nullable=True))
        batch_op.add_column(sa.Column("pipeline_state", sa.String(length=24), nullable=True))
        batch_op.add_column(sa.Column("pipeline_approval_timeout", sa.Float(), nullable=True))
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
    )
    op.create_index(op.f("ix_plan_events_plan_id_at"), "plan_events", ["plan_id", "at"])
    op.create_index(op.f("ix_plan_events_at"), "plan_events", ["at"])


def downgrade() -> None:
    op.drop_index(op.f("ix_plan_events_at"), table_name="plan_events")
    op.drop_index(op.f("ix_plan_events_plan_id_at"), table_name="plan_events")
    op.drop_table("plan_events")
    with op.batch_alter_table("plans", schema=None) as batch_op:
        batch_op.drop_column("pipeline_approval_timeout")
        batch_op.drop_column("pipeline_state")
        batch_op.drop_column("pipeline_gate")
        batch_op.drop_column("pipeline_through")
