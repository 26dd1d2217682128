"""Plans on SQL, saved with an optimistic version check."""

from __future__ import annotations

from typing import Any

from sqlalchemy import delete, func, insert, select, text, update
from sqlalchemy.exc import IntegrityError

from planq.domain.errors import ConcurrentUpdateError
from planq.domain.plans import Plan
from planq.domain.ports import Ledger
from planq.store.checked import CheckedPlanStore
from planq.store.database import Database
from planq.store.keyset import past_cursor
from planq.store.models import PlanModel

P = PlanModel
#: The listing's order, newest first (served by ix_plans_created_at_plan_id).
_NEWEST_FIRST = (P.created_at.desc(), P.plan_id.desc())
_FIELDS = [c.key for c in P.__table__.columns]
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
    return Plan.model_validate({name: getattr(row, name) for name in _FIELDS})


def to_values(plan: Plan) -> dict[str, Any]:
    """Domain plan to column values."""
    data = plan.model_dump()
    data["phase"] = plan.phase.value if plan.phase else None
    data["status"] = plan.status.value if plan.status else None
    return {name: data[name] for name in _FIELDS}


class SqlPlanStore(CheckedPlanStore):
    """Plans table access; shares its Database (and so its transactions) with SqlJobStore."""

    def __init__(self, database: Database) -> None:
        self.db = database

    @property
    def ledger(self) -> Ledger:
        """The database: stores on the same Database object are one ledger."""
        return self.db

    def transaction(self) -> Any:
        """The database's ambient transaction."""
        return self.db.transaction()

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
                    conn.execute(_PG_ADD_MANY, {f: [r[f] for r in rows] for f in _FIELDS})
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
