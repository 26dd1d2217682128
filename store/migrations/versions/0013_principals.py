"""principals and four-eyes: named API tokens with roles, who ran a pipeline, who approved

Revision ID: 0013_principals
Revises: 0012_gated_at

`api_principals` holds each principal's name, roles, the SHA-256 of its token (never the
token), and when it was made, last used, expires, was revoked: a handful of rows, read by
its unique hash index on every request, so a revoke reaches every API process at once.
Three nullable columns on plans (who ran the pipeline, how many distinct approvers its
gate needs, who approved so far as a JSON list): adding them rewrites no row on
PostgreSQL, and on SQLite they are added in place. The events' kind CHECK gains
`approval_refused` (a four-eyes refusal is kept in the trail): on PostgreSQL the new
CHECK is added NOT VALID and then validated, which reads the partitions under a lock that
lets writes go on; SQLite rebuilds its (unpartitioned) events table.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0013_principals"
down_revision = "0012_gated_at"
branch_labels = None
depends_on = None

OLD_KINDS = (
    "'queued', 'started', 'succeeded', 'failed', 'cancelled', 'cancel_requested', "
    "'awaiting_approval', 'approved', 'rejected', 'retried', 'done', 'expired'"
)
NEW_KINDS = f"{OLD_KINDS}, 'approval_refused'"
CHECK = "ck_plan_events_kind"


def _kinds(kinds: str) -> None:
    """Replace the events' kind CHECK with one over kinds."""
    if op.get_context().dialect.name == "postgresql":
        op.execute(f"ALTER TABLE plan_events DROP CONSTRAINT {CHECK}")
        op.execute(
            f"ALTER TABLE plan_events ADD CONSTRAINT {CHECK} CHECK (kind IN ({kinds})) NOT VALID"
        )
        op.execute(f"ALTER TABLE plan_events VALIDATE CONSTRAINT {CHECK}")
        return
    with op.batch_alter_table("plan_events", schema=None) as batch_op:
        batch_op.drop_constraint(op.f(CHECK), type_="check")
        batch_op.create_check_constraint("kind", f"kind IN ({kinds})")


def upgrade() -> None:
    op.create_table(
        "api_principals",
        sa.Column("name", sa.String(length=64), nullable=False),
        sa.Column("token_hash", sa.String(length=64), nullable=False),
        sa.Column("roles", sa.String(length=64), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("last_used_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("expires_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("revoked_at", sa.DateTime(timezone=True), nullable=True),
        sa.PrimaryKeyConstraint("name", name=op.f("pk_api_principals")),
        sa.UniqueConstraint("token_hash", name=op.f("uq_api_principals_token_hash")),
    )
    with op.batch_alter_table("plans", schema=None) as batch_op:
        batch_op.add_column(sa.Column("pipeline_started_by", sa.String(length=200), nullable=True))
        batch_op.add_column(sa.Column("pipeline_approvals", sa.Integer(), nullable=True))
        batch_op.add_column(sa.Column("pipeline_approved_by", sa.Text(), nullable=True))
    _kinds(NEW_KINDS)


def downgrade() -> None:
    op.execute("DELETE FROM plan_events WHERE kind = 'approval_refused'")
    _kinds(OLD_KINDS)
    with op.batch_alter_table("plans", schema=None) as batch_op:
        batch_op.drop_column("pipeline_approved_by")
        batch_op.drop_column("pipeline_approvals")
        batch_op.drop_column("pipeline_started_by")
    op.drop_table("api_principals")
