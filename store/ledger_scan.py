"""The ledger-consistency scan's reads: keyset pages of `async_jobs` with their plans.

The scan itself (what counts as a finding, when to checkpoint) is the handler's
(`tasks/ledger_consistency.py`); its SQL lives here, beside the other stores.
"""

from __future__ import annotations

from contextlib import AbstractContextManager
from typing import Any

from sqlalchemy import func, select, text

from planq.store.database import Database
from planq.store.models import AsyncJobModel, PlanModel

#: Below this many rows (by the planner's estimate) the total is counted exactly.
EXACT_BELOW = 100_000
_RELTUPLES = "SELECT reltuples::bigint FROM pg_class WHERE oid = 'async_jobs'::regclass"


class LedgerScan:
    """Read-only pages of the job ledger for a scan, and one transaction to checkpoint in."""

    def __init__(self, db: Database) -> None:
        self.db = db

    def estimated_jobs(self) -> int:
        """About how many rows async_jobs holds (the progress bar's total, an estimate).

        PostgreSQL, from EXACT_BELOW rows on: the planner's estimate (`pg_class.reltuples`,
        kept by autovacuum), flat at any size, where `count(*)` would read the whole table.
        Below that (or before the first ANALYZE, -1) it is counted: cheap, and exact where an
        estimate is least reliable. SQLite: counted.
        """
        with self.db.session() as s:
            if self.db.dialect == "postgresql":
                estimate = s.scalar(text(_RELTUPLES))
                if estimate is not None and estimate >= EXACT_BELOW:
                    return int(estimate)
            return int(s.scalar(select(func.count()).select_from(AsyncJobModel)) or 0)

    def page(self, after_job_id: str, limit: int) -> list[dict[str, Any]]:
        """One keyset page in ONE statement (one snapshot): rows, their plan, latest-ness."""
        j, p = AsyncJobModel, PlanModel
        newer = AsyncJobModel.__table__.alias("newer")
        is_latest = ~(
            select(newer.c.job_id)
            .where(
                newer.c.plan_id == j.plan_id,
                (newer.c.created_at > j.created_at)
                | ((newer.c.created_at == j.created_at) & (newer.c.job_id > j.job_id)),
            )
            .exists()
        )
        stmt = (
            select(
                j.job_id,
                j.plan_id,
                j.phase,
                j.status,
                j.payload_json,
                j.worker_id,
                j.last_heartbeat,
                p.plan_id.label("plan_found"),
                p.phase.label("plan_phase"),
                p.status.label("plan_status"),
                is_latest.label("is_latest"),
            )
            .outerjoin(p, p.plan_id == j.plan_id)
            .where(j.job_id > after_job_id)
            .order_by(j.job_id)
            .limit(limit)
        )
        with self.db.session() as s:
            return [dict(row._mapping) for row in s.execute(stmt)]

    def transaction(self) -> AbstractContextManager[None]:
        """One transaction for the findings and the checkpoint (the run store shares the db)."""
        return self.db.transaction()
