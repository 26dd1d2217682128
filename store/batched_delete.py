"""The TTL's one way to delete rows that are not in a droppable partition: short batches.

Each batch is its own transaction (a lock held for one batch, not the whole sweep), the
oldest first by an indexed column, and the loop stops at the first short batch.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import ColumnElement, delete, select

from planq.store.database import Database


def delete_in_batches(
    db: Database, key: Any, oldest: Any, where: ColumnElement[bool], batch_size: int
) -> int:
    """DELETE the rows where holds, batch_size at a time by key, oldest first; how many."""
    total = 0
    while True:
        doomed = select(key).where(where).order_by(oldest).limit(batch_size).scalar_subquery()
        with db.session() as s:
            deleted: int = s.execute(
                delete(key.table)
                .where(key.in_(doomed))
                .execution_options(synchronize_session=False)
            ).rowcount  # type: ignore[attr-defined]
        total += deleted
        if deleted < batch_size:
            return total
