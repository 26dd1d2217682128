"""Integration tier: the bounds tests' seeded ledger (`world`), on each backend."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest
from sqlalchemy import text

from planq.domain.bounds import (
    INT64_MAX,
    MAX_LIST_LIMIT,
)
from planq.domain.clock import utcnow
from planq.domain.errors import BoundsError
from planq.domain.jobs import AsyncJob
from planq.domain.lifecycle import PlanLifecycleService
from planq.domain.plans import PlanPhase
from planq.domain.runs import RunStore
from planq.domain.runs.ports import Fresh
from planq.store import (
    Database,
    InMemoryRunStoreProvider,
    SqlJobStore,
    SqlPlanStore,
    SqlRunStoreProvider,
    in_memory_ledger,
)
from tests.bounds_support import (
    expect_bounds,
)

_SNAPSHOT = {
    "async_jobs": "job_id, status, worker_id, progress, checkpoint_json, error_message, "
    "attempt, dispatch_count, cancel_requested_at",
    "plans": "plan_id, name, version, spec_json, phase, status",
    "recoverable_runs": "id, status, owner, cursor, scanned_count, finding_count, params_json, "
    "progress_total, progress_kind, lease_epoch, error_message",
    "run_findings": "id, run_id, kind",
}


class World:
    """One ledger with a plan, a queued job, a running job and an active run in it.

    On SQL (db given) the snapshot reads the tables; in memory (db None) it reads every
    row back through the stores' own listings.
    """

    def __init__(self, db: Database | None) -> None:
        self.db = db
        if db is None:
            self.jobs, self.plans = in_memory_ledger()
            self.runs: SqlRunStoreProvider | InMemoryRunStoreProvider = InMemoryRunStoreProvider()
        else:
            self.jobs, self.plans = SqlJobStore(db), SqlPlanStore(db)
            self.runs = SqlRunStoreProvider(db)
        self.service = PlanLifecycleService(self.plans, self.jobs)
        self.plan = self.service.create_plan(["a", {"name": "b", "seconds": 0.5}], name="seed")
        self.queued = AsyncJob(plan_id=self.plan.plan_id, phase=PlanPhase.strategize)
        self.jobs.add(self.queued)
        self.running = AsyncJob(plan_id=self.plan.plan_id, phase=PlanPhase.execute)
        self.jobs.add(self.running)
        assert self.jobs.claim(self.running.job_id, "worker-a", utcnow())
        opened = self.runs.open_or_start("bounds", owner="worker-a")
        assert isinstance(opened, Fresh)
        self.run: RunStore = opened.store
        self.run.checkpoint(b"start", INT64_MAX - 10)  # RUN_WRITES' overflow case needs this
        self.run.set_string_param("mode", "deep")
        self.run.record_finding("seeded", "anomaly", None, {"n": 1})
        self.before = self.snapshot()

    def snapshot(self) -> dict[str, list[tuple[Any, ...]]]:
        """Every row's mutable columns, per table, in id order."""
        if self.db is None:
            runs = self.runs.list_runs(limit=MAX_LIST_LIMIT)
            return {
                "async_jobs": [(j.model_dump(),) for j in self.jobs.list_all()],
                "plans": [(p.model_dump(),) for p in self.plans.list_all()],
                "recoverable_runs": [(r,) for r in runs],
                "run_findings": [(f,) for r in runs for f in self.runs.list_findings(r.id)],
            }
        with self.db.engine.connect() as conn:
            return {
                table: [
                    tuple(row)
                    for row in conn.execute(text(f"SELECT {cols} FROM {table} ORDER BY 1"))
                ]
                for table, cols in _SNAPSHOT.items()
            }

    def refuses(self, call: Callable[[], object], field: str) -> None:
        """The call raises a BoundsError naming field, and no row changed."""
        with pytest.raises(BoundsError) as error:
            call()
        expect_bounds(error, field)
        assert self.snapshot() == self.before


@pytest.fixture(params=["memory", "sqlite", "postgres"])
def world(request: pytest.FixtureRequest) -> Iterator[World]:
    """A seeded World on each backend; one database per test function."""
    if request.param == "memory":
        yield World(None)
        return
    fixture = "sqlite_database" if request.param == "sqlite" else "pg_database"
    yield World(request.getfixturevalue(fixture))
