"""webhook outbox: notifications written with their event, delivered by beat

Revision ID: 0014_webhook_outbox
Revises: 0013_principals

`webhook_deliveries` is the outbox: a row per notification and receiver, inserted in the
transaction of the plan event it tells of, deleted once delivered. It holds the live set
only (due, leased to a delivering process, or given up), so it stays small: the claim
reads the partial index on next_at (the due rows), the TTL cleanup the one on created_at
of the given-up rows. `plans.pipeline_notify` keeps a pipeline's own receivers as a JSON
list: a nullable column without a default rewrites no row.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0014_webhook_outbox"
down_revision = "0013_principals"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "webhook_deliveries",
        sa.Column("delivery_id", sa.String(length=26), nullable=False),
        sa.Column("event_id", sa.String(length=26), nullable=False),
        sa.Column("plan_id", sa.String(length=26), nullable=False),
        sa.Column("url", sa.Text(), nullable=False),
        sa.Column("body", sa.Text(), nullable=False),
        sa.Column("attempts", sa.Integer(), nullable=False),
        sa.Column("next_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("last_error", sa.Text(), nullable=True),
        sa.CheckConstraint("attempts >= 0", name=op.f("ck_webhook_deliveries_attempts")),
        sa.ForeignKeyConstraint(
            ["plan_id"],
            ["plans.plan_id"],
            name=op.f("fk_webhook_deliveries_plan_id_plans"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("delivery_id", name=op.f("pk_webhook_deliveries")),
    )
    due, given_up = sa.text("next_at IS NOT NULL"), sa.text("next_at IS NULL")
    op.create_index(
        "ix_webhook_deliveries_due",
        "webhook_deliveries",
        ["next_at"],
        postgresql_where=due,
        sqlite_where=due,
    )
    op.create_index(
        "ix_webhook_deliveries_given_up",
        "webhook_deliveries",
        ["created_at"],
        postgresql_where=given_up,
        sqlite_where=given_up,
    )
    op.create_index(
        op.f("ix_webhook_deliveries_plan_id"), "webhook_deliveries", ["plan_id"], unique=False
    )
    with op.batch_alter_table("plans", schema=None) as batch_op:
        batch_op.add_column(sa.Column("pipeline_notify", sa.Text(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("plans", schema=None) as batch_op:
        batch_op.drop_column("pipeline_notify")
    op.drop_table("webhook_deliveries")
