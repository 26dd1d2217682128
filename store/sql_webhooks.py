"""The webhook outbox on SQL: rows written with their event, leased by the delivering beat."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import and_, delete, insert, select, update

from planq.domain.webhooks import Delivery
from planq.store.batched_delete import delete_in_batches
from planq.store.database import Database
from planq.store.models import WebhookDeliveryModel

W = WebhookDeliveryModel
_FIELDS = [c.key for c in W.__table__.columns]


def _domain(row: Any) -> Delivery:
    return Delivery.model_validate({name: getattr(row, name) for name in _FIELDS})


class SqlWebhookOutbox:
    """The outbox half of the plan store (it shares the plans' Database, so its transaction)."""

    db: Database

    def _add_deliveries(self, deliveries: list[Delivery]) -> None:
        """INSERT the rows: one statement, in the event's transaction."""
        with self.db.session() as s:
            s.execute(insert(W), [d.model_dump() for d in deliveries])

    def _claim_deliveries(self, now: datetime, lease_until: datetime, limit: int) -> list[Delivery]:
        """One UPDATE … RETURNING over the due index; SKIP LOCKED keeps two beats apart."""
        due = (
            select(W.delivery_id)
            .where(W.next_at.is_not(None), W.next_at <= now)
            .order_by(W.next_at)
            .limit(limit)
            .with_for_update(skip_locked=True)
        )
        stmt = (
            update(W)
            .where(W.delivery_id.in_(due.scalar_subquery()))
            .values(next_at=lease_until, attempts=W.attempts + 1)
            .returning(*W.__table__.columns)
        )
        with self.db.session() as s:
            rows = s.execute(stmt.execution_options(synchronize_session=False)).all()
        return sorted((_domain(r) for r in rows), key=lambda d: (d.created_at, d.delivery_id))

    def _delivered(self, delivery_id: str) -> bool:
        """DELETE the row: the outbox keeps only what is still to do."""
        with self.db.session() as s:
            return bool(s.execute(delete(W).where(W.delivery_id == delivery_id)).rowcount)  # type: ignore[attr-defined]

    def _delivery_failed(self, delivery_id: str, error: str, retry_at: datetime | None) -> bool:
        """UPDATE the row's next try (NULL: given up) and its last error."""
        stmt = update(W).where(W.delivery_id == delivery_id)
        with self.db.session() as s:
            done = s.execute(stmt.values(next_at=retry_at, last_error=error)).rowcount  # type: ignore[attr-defined]
        return bool(done)

    def _list_deliveries(self, plan_id: str | None, limit: int) -> list[Delivery]:
        """Rows, oldest first (a plan's by its index)."""
        stmt = select(W)
        if plan_id is not None:
            stmt = stmt.where(W.plan_id == plan_id.upper())
        stmt = stmt.order_by(W.created_at, W.delivery_id).limit(limit)
        with self.db.session() as s:
            return [_domain(r) for r in s.scalars(stmt)]

    def _delete_deliveries_before(self, cutoff: datetime, batch_size: int) -> int:
        """DELETE given-up rows before cutoff, in batches (the given-up index)."""
        given_up = and_(W.next_at.is_(None), W.created_at < cutoff)
        return delete_in_batches(self.db, W.delivery_id, W.created_at, given_up, batch_size)
