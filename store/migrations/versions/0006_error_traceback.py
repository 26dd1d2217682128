"""error_traceback: a failed job keeps its executor's traceback, redacted and bounded

Revision ID: 0006_error_traceback
Revises: 0005_live_indexes

One nullable TEXT column on async_jobs, written by the finish statement that ends the
job failed (no extra statement); NULL for every other row and for rows failed before it.
No index names it, so no update that writes it is kept from being HOT by it. Adding a
nullable column without a default rewrites no row on PostgreSQL; SQLite's batch mode
adds it in place (ALTER TABLE ADD COLUMN).
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0006_error_traceback"
down_revision = "0005_live_indexes"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("async_jobs", schema=None) as batch_op:
        batch_op.add_column(sa.Column("error_traceback", sa.Text(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("async_jobs", schema=None) as batch_op:
        batch_op.drop_column("error_traceback")
