"""run leases: recoverable_runs.lease_epoch and heartbeat_at (fencing, run heartbeat)

Revision ID: 0003_run_leases
Revises: 0002_runs

lease_epoch is bumped at every open/resume and by a sweep; every write of a run carries it
in its WHERE, so a process that lost its run writes nothing. heartbeat_at is the owner
process's batched heartbeat: the stale sweep spares a run whose progress OR heartbeat is
recent. Existing rows start at epoch 0 with no heartbeat (their last progress decides).
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0003_run_leases"
down_revision = "0002_runs"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("recoverable_runs", schema=None) as batch_op:
        batch_op.add_column(
            sa.Column("lease_epoch", sa.BigInteger(), server_default=sa.text("0"), nullable=False)
        )
        batch_op.add_column(sa.Column("heartbeat_at", sa.DateTime(timezone=True), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("recoverable_runs", schema=None) as batch_op:
        batch_op.drop_column("heartbeat_at")
        batch_op.drop_column("lease_epoch")
