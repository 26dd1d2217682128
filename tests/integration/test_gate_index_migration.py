"""Migration 0012: the gate index keys on gated_at, so plan moves are HOT again.

From 0010 to 0011 the gate index named `plans.updated_at`, which every plan move writes:
PostgreSQL then made none of those updates HOT (it looks at which indexed columns change,
not at the partial index's predicate). These tests show the moves non-HOT before 0012 and
HOT after it, through the stores with a later timestamp at each step, and that a plan
already waiting at its gate keeps its place in the gate's reads across the migration.
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from sqlalchemy import inspect, text

from planq.domain.jobs import AsyncJob, AsyncJobStatus
from planq.domain.plans import PipelineState, Plan, PlanPhase
from planq.store import Database, sql_ledger
from planq.store.migrate import downgrade, upgrade
from tests.support import create_pg_database, drop_pg_database, wait_for

BEFORE = "0011_partitioned_events"
GATED = "01KBWAA7G0W5YJ0AT0GATE0000"
T0 = datetime(2026, 1, 5, 9, 0, tzinfo=UTC)
WAITING_PLAN = (
    "INSERT INTO plans (plan_id, name, phase, status, spec_json, created_at, updated_at, "
    "version, pipeline_through, pipeline_gate, pipeline_state, pipeline_approval_timeout) "
    "VALUES (:id, 'gated', 'strategize', 'complete', '{}', :at, :at, 1, 'apply', 'execute', "
    "'awaiting_approval', 60.0)"
)


@pytest.fixture
def pg_url() -> Iterator[str]:
    url = create_pg_database()
    try:
        yield url
    finally:
        drop_pg_database(url)


def _plan_updates(db: Database) -> tuple[int, int]:
    """(updates, HOT updates) on plans, as the statistics have them."""
    with db.engine.connect() as conn:
        row = conn.execute(
            text("SELECT n_tup_upd, n_tup_hot_upd FROM pg_stat_user_tables WHERE relname = 'plans'")
        ).one()
    return int(row[0]), int(row[1])


def _moves(db: Database, count: int) -> None:
    """Queue, claim and finish `count` jobs through the stores, each step a second later."""
    jobs, plans = sql_ledger(db)
    at = T0
    for _ in range(count):
        plan = Plan.with_steps(["a"])
        plans.add(plan)
        job = AsyncJob(plan_id=plan.plan_id, phase=PlanPhase.strategize)
        at += timedelta(seconds=1)
        assert jobs.queue([job], at)
        at += timedelta(seconds=1)
        assert jobs.claim(job.job_id, "w@h/1", at, follow_plan=True) is not None
        at += timedelta(seconds=1)
        assert jobs.finish(
            job.job_id, AsyncJobStatus.succeeded, at, worker_id="w@h/1", follow_plan=True
        )


def _counted(db: Database, moves: int, before: tuple[int, int]) -> tuple[int, int]:
    """The plans' (updates, HOT updates) since `before`, once all `moves` are counted."""
    after = wait_for(
        lambda: (s := _plan_updates(db))[0] >= before[0] + moves and s,
        timeout=20,
        what="the plan moves in the statistics",
    )
    return after[0] - before[0], after[1] - before[1]


def test_plan_moves_are_hot_only_after_0012(pg_url: str) -> None:
    upgrade(pg_url, BEFORE)
    db = Database(pg_url)
    try:
        with db.engine.begin() as conn:  # the old index: every write of updated_at is non-HOT
            conn.execute(text(WAITING_PLAN), {"id": GATED, "at": T0})
            before = _plan_updates(db)
            for i in range(1, 6):
                conn.execute(
                    text("UPDATE plans SET updated_at = :at WHERE plan_id = :id"),
                    {"id": GATED, "at": T0 + timedelta(seconds=i)},
                )
        updates, hot = _counted(db, 5, before)
        assert (updates, hot) == (5, 0)

        upgrade(pg_url)
        before = _plan_updates(db)
        _moves(db, 10)  # three plan moves per job
        updates, hot = _counted(db, 30, before)
        assert updates == hot == 30
    finally:
        db.close()


@pytest.mark.parametrize("dialect", ["sqlite", "postgresql"])
def test_a_waiting_plan_keeps_its_place_at_the_gate(
    dialect: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    url = (
        f"sqlite:///{tmp_path / 'gate.db'}"
        if dialect == "sqlite"
        else request.getfixturevalue("pg_url")
    )
    upgrade(url, BEFORE)
    db = Database(url)
    try:
        with db.engine.begin() as conn:
            conn.execute(text(WAITING_PLAN), {"id": GATED, "at": T0})
        upgrade(url)
        _, plans = sql_ledger(db)
        assert [p.plan_id for p in plans.list_awaiting()] == [GATED]
        summary = plans.gate_summary()
        assert (summary.waiting, summary.oldest_since) == (1, T0)

        waiting = plans.get(GATED)
        assert waiting is not None
        waiting.pipeline_state = PipelineState.rejected  # it leaves the gate, and the index
        plans.update(waiting)
        assert plans.list_awaiting() == []
        assert plans.gate_summary().waiting == 0

        downgrade(url, BEFORE)  # and back: the old index, the column gone
        with db.engine.connect() as conn:
            names = set(conn.execute(text("SELECT * FROM plans LIMIT 0")).keys())
            indexes = {i["name"]: i for i in inspect(conn).get_indexes("plans")}
        assert "gated_at" not in names and "updated_at" in names
        assert "ix_plans_gated_at" not in indexes
        assert indexes["ix_plans_awaiting_gate"]["column_names"] == ["updated_at", "plan_id"]
    finally:
        db.close()
