"""ledger availability: one row per sweep kind, the evidence for fair lease expiry

Revision ID: 0004_availability
Revises: 0003_run_leases

Each stuck/stale sweep reads and updates its row in one transaction: last_seen_at (when a
sweep last reached the ledger, on the ledger's clock) and available_since (the start of
the current unbroken stretch of sightings; NULL: no gap on record). A sweep expires a
lease only after its holder had a full timeout of availability to renew it
(domain/availability.py).
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0004_availability"
down_revision = "0003_run_leases"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "ledger_availability",
        sa.Column("sweep", sa.String(length=16), nullable=False),
        sa.Column("last_seen_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("available_since", sa.DateTime(timezone=True), nullable=True),
        sa.PrimaryKeyConstraint("sweep", name=op.f("pk_ledger_availability")),
    )


def downgrade() -> None:
    op.drop_table("ledger_availability")
