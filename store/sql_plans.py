"""Plans on SQL, saved with an optimistic version check."""

from __future__ import annotations

import json
from datetime import datetime
from typing import Any

from sqlalchemy import delete, func, insert, select, text, update
from sqlalchemy.exc import IntegrityError

from planq.domain.clock import as_utc
from planq.domain.errors import ConcurrentUpdateError, PlanNotFoundError
from planq.domain.pipeline import GateSummary, PlanEvent
from planq.domain.plans import PipelineState, Plan
from planq.store.batched_delete import delete_in_batches
from planq.store.checked import CheckedPlanStore
from planq.store.database import OnDatabase
from planq.store.keyset import past_cursor
from planq.store.models import PLAN_FIELDS, PlanEventModel, PlanModel
from planq.store.partitions import EVENTS, drop_expired_partitions
from planq.store.sql_webhooks import SqlWebhookOutbox

P = PlanModel
E = PlanEventModel
_EVENT_FIELDS = [c.key for c in E.__table__.columns]
#: The listing's order, newest first (served by ix_plans_created_at_plan_id).
_NEWEST_FIRST = (P.created_at.desc(), P.plan_id.desc())
#: PostgreSQL: many plans in one statement, one array per column (unnest), whatever n.
_PG_ADD_MANY = text("""
INSERT INTO plans (plan_id, name, phase, status, spec_json, created_at, updated_at, version)
SELECT * FROM unnest(
    CAST(:plan_id AS varchar[]), CAST(:name AS varchar[]), CAST(:phase AS varchar[]),
    CAST(:status AS varchar[]), CAST(:spec_json AS text[]), CAST(:created_at AS timestamptz[]),
    CAST(:updated_at AS timestamptz[]), CAST(:version AS integer[])
)
""")


def to_domain(row: PlanModel) -> Plan:
    """Row to domain plan."""
    return Plan.model_validate({name: getattr(row, name) for name in PLAN_FIELDS})


def to_values(plan: Plan) -> dict[str, Any]:
    """Domain plan to column values."""
    data = plan.model_dump()
    data["phase"] = plan.phase.value if plan.phase else None
    data["status"] = plan.status.value if plan.status else None
    for name in ("pipeline_through", "pipeline_gate", "pipeline_state"):  # enums as text
        value = getattr(plan, name)
        data[name] = value.value if value is not None else None
    for name in ("pipeline_approved_by", "pipeline_notify"):  # lists as JSON text
        value = getattr(plan, name)
        data[name] = json.dumps(value) if value else None
    values = {name: data[name] for name in PLAN_FIELDS}
    waiting = plan.pipeline_state is PipelineState.awaiting_approval
    values["gated_at"] = plan.updated_at if waiting else None  # the gate index's key
    return values


class SqlPlanStore(OnDatabase, SqlWebhookOutbox, CheckedPlanStore):
    """Plans table access; shares its Database (and so its transactions) with SqlJobStore."""

    def _add(self, plan: Plan) -> None:
        """INSERT a new plan."""
        with self.db.session() as s:
            try:
                with s.begin_nested():
                    s.add(P(**to_values(plan)))
            except IntegrityError as exc:
                raise ValueError(f"plan {plan.plan_id!r} already exists") from exc

    def _add_many(self, plans: list[Plan]) -> None:
        """INSERT new plans: one statement (PostgreSQL: unnest; SQLite: one executemany)."""
        rows = [to_values(p) for p in plans]
        with self.db.connection("add plans") as conn:  # PostgreSQL: one round trip
            try:
                if self.db.dialect == "postgresql":
                    conn.execute(_PG_ADD_MANY, {f: [r[f] for r in rows] for f in PLAN_FIELDS})
                else:
                    conn.execute(insert(P), rows)
            except IntegrityError as exc:  # rolled back: the block ends in an exception
                raise ValueError("a plan in the batch already exists") from exc

    def _get(self, plan_id: str) -> Plan | None:
        """SELECT one plan."""
        with self.db.session() as s:
            row = s.get(P, plan_id.upper())
            return to_domain(row) if row else None

    def _update(self, plan: Plan) -> None:
        """UPDATE … WHERE version = read version; bumps plan.version in place."""
        values = to_values(plan)
        values.pop("plan_id")
        values["version"] = plan.version + 1
        with self.db.session() as s:
            stmt = update(P).where(P.plan_id == plan.plan_id, P.version == plan.version)
            if s.execute(stmt.values(**values)).rowcount == 0:  # type: ignore[attr-defined]
                if s.get(P, plan.plan_id) is None:
                    raise ValueError(f"no plan with id {plan.plan_id!r} to update")
                raise ConcurrentUpdateError(f"plan {plan.plan_id} changed since it was read")
        plan.version += 1

    def _list_all(self, limit: int | None) -> list[Plan]:
        """Plans, oldest first."""
        with self.db.session() as s:
            stmt = select(P).order_by(P.created_at, P.plan_id).limit(limit)
            return [to_domain(r) for r in s.scalars(stmt)]

    def _list_recent(self, limit: int, offset: int, after: str | None) -> list[Plan]:
        """One page of plans, newest first (what people list), after a plan by key."""
        stmt = select(P)
        if after is not None:
            stmt = stmt.where(past_cursor(P, "created_at", "plan_id", after, descending=True))
        stmt = stmt.order_by(*_NEWEST_FIRST).limit(limit).offset(offset)
        with self.db.session() as s:
            return [to_domain(r) for r in s.scalars(stmt)]

    def _count(self, at_most: int | None) -> int:
        """How many plans: one COUNT(*), of the listing's first at_most rows if given."""
        if at_most is None:
            stmt = select(func.count()).select_from(P)
        else:
            first = select(P.plan_id).order_by(*_NEWEST_FIRST).limit(at_most)
            stmt = select(func.count()).select_from(first.subquery())
        with self.db.session() as s:
            return int(s.scalar(stmt) or 0)

    def _remove(self, plan_id: str) -> bool:
        """DELETE one plan."""
        with self.db.session() as s:
            return bool(s.execute(delete(P).where(P.plan_id == plan_id.upper())).rowcount)  # type: ignore[attr-defined]

    def _list_awaiting(self, limit: int | None) -> list[Plan]:
        """Plans at their gate with a timeout, longest waiting first (the gate index)."""
        stmt = (
            select(P)
            .where(
                P.pipeline_state == PipelineState.awaiting_approval.value,
                P.pipeline_approval_timeout.is_not(None),
            )
            .order_by(P.gated_at, P.plan_id)
            .limit(limit)
        )
        with self.db.session() as s:
            return [to_domain(r) for r in s.scalars(stmt)]

    def _gate_summary(self, at_most: int) -> GateSummary:
        """One statement over the gate index: the first at_most waiting plans, counted."""
        first = (
            select(P.gated_at)
            .where(P.pipeline_state == PipelineState.awaiting_approval.value)
            .order_by(P.gated_at, P.plan_id)
            .limit(at_most)
            .subquery()
        )
        stmt = select(func.count(), func.min(first.c.gated_at))
        with self.db.session() as s:
            waiting, oldest = s.execute(stmt).one()
        since = None if oldest is None else as_utc(oldest)
        return GateSummary(int(waiting), since)

    # -- the audit trail (append-only) ---------------------------------------------------
    def _add_event(self, event: PlanEvent) -> None:
        """INSERT one event; a plan that is gone is PlanNotFoundError."""
        values = event.model_dump()
        values["kind"] = event.kind.value
        values["phase"] = event.phase.value if event.phase else None
        row = {name: values[name] for name in _EVENT_FIELDS}
        with self.db.session() as s:
            try:  # one INSERT, no savepoint: a refusal rolls the caller's transaction back
                s.execute(insert(E).values(**row))
            except IntegrityError as exc:
                raise PlanNotFoundError(event.plan_id) from exc

    def _list_events(self, plan_id: str, limit: int) -> list[PlanEvent]:
        """A plan's events, oldest first (ix_plan_events_plan_id_at)."""
        stmt = select(E).where(E.plan_id == plan_id.upper()).order_by(E.at, E.event_id).limit(limit)
        with self.db.session() as s:
            return [
                PlanEvent.model_validate({n: getattr(r, n) for n in _EVENT_FIELDS})
                for r in s.scalars(stmt)
            ]

    def _delete_events_before(self, cutoff: datetime, batch_size: int) -> int:
        """TTL: drop the expired days of events (PostgreSQL), then DELETE the rest in batches.

        As the jobs' cleanup (store/partitions.py): a day's partition whose events are all
        older than cutoff goes whole; the old events left (in a day that still holds a
        recent one, in DEFAULT, or on SQLite everywhere) go in short batches.
        """
        total = drop_expired_partitions(self.db.engine, cutoff, EVENTS)
        return total + delete_in_batches(self.db, E.event_id, E.at, E.at < cutoff, batch_size)
