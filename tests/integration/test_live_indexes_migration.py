"""Migration 0005: the live-set indexes, up and down, on SQLite and PostgreSQL, and HOT writes.

The indexes it builds are the models' (test_schema compares the whole schema); this file
checks what the change is for: the old full-table (status, time) indexes are gone, the
partial ones hold only their rows, `retry_of` is unique only where set, rows survive the
round trip, and on PostgreSQL a heartbeat and a dispatch stamp are HOT updates.
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path

import pytest
from sqlalchemy import inspect, text
from sqlalchemy.exc import IntegrityError

from planq.domain.clock import utcnow
from planq.domain.jobs import AsyncJob
from planq.domain.plans import Plan, PlanPhase
from planq.store import Database, sql_ledger
from planq.store.migrate import downgrade, upgrade
from tests.support import create_pg_database, drop_pg_database, wait_for

OLD = {
    "ix_async_jobs_status_last_heartbeat",
    "ix_async_jobs_status_dispatched_at",
    "ix_async_jobs_status_finished_at",
}
NEW = {
    "ix_async_jobs_live",
    "ix_async_jobs_failures",
    "ix_async_jobs_finished_terminal",
    "ix_async_jobs_created_at_job_id",
}
INSERT = (
    "INSERT INTO async_jobs (job_id, plan_id, phase, status, schema_version, payload_json, "
    "created_at, attempt, dispatch_count, retry_of) VALUES "
    "(:id, 'P0000000000000000000000000', 'execute', 'queued', 1, '{}', CURRENT_TIMESTAMP, "
    ":attempt, 0, :retry_of)"
)


#: The last revision with one unpartitioned async_jobs on PostgreSQL (0007 partitions it).
BEFORE_PARTITIONS = "0006_error_traceback"


@pytest.fixture(params=["sqlite", "postgres"])
def url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    """A fresh database brought to 0006 by the migrations (the test goes on to head)."""
    if request.param == "sqlite":
        made = f"sqlite:///{tmp_path / 'ledger.db'}"
        upgrade(made, BEFORE_PARTITIONS)
        yield made
        return
    made = create_pg_database()
    try:
        upgrade(made, BEFORE_PARTITIONS)
        yield made
    finally:
        drop_pg_database(made)


def _indexes(db: Database, table: str = "async_jobs") -> set[str]:
    with db.engine.connect() as conn:
        return {str(i["name"]) for i in inspect(conn).get_indexes(table)}


def _row(id_: str, retry_of: str | None = None) -> dict[str, object]:
    return {"id": id_, "attempt": 2 if retry_of else 1, "retry_of": retry_of}


def _fillfactor(db: Database, table: str) -> str | None:
    with db.engine.connect() as conn:
        options = conn.execute(
            text("SELECT reloptions FROM pg_class WHERE relname = :t"), {"t": table}
        ).scalar_one()
    return next((o for o in options or [] if o.startswith("fillfactor=")), None)


def test_live_indexes_replace_the_full_table_ones_and_go_back(url: str) -> None:
    db = Database(url)
    try:
        assert NEW | {"uq_async_jobs_retry_of"} <= _indexes(db) and not OLD & _indexes(db)
        assert "ix_plans_created_at_plan_id" in _indexes(db, "plans")
        if db.dialect == "postgresql":
            assert _fillfactor(db, "async_jobs") == _fillfactor(db, "plans") == "fillfactor=85"
        with db.engine.begin() as conn:  # first attempts (NULL) are never in the unique index
            for i in range(3):
                conn.execute(text(INSERT), _row(f"J{i}"))
            conn.execute(text(INSERT), _row("R1", retry_of="J0"))
        with pytest.raises(IntegrityError), db.engine.begin() as conn:
            conn.execute(text(INSERT), _row("R2", retry_of="J0"))

        downgrade(url, "0004_availability")
        assert _indexes(db) >= OLD and not NEW & _indexes(db)
        assert "ix_plans_created_at" in _indexes(db, "plans")
        if db.dialect == "postgresql":
            assert _fillfactor(db, "async_jobs") is None
        with pytest.raises(IntegrityError), db.engine.begin() as conn:  # the constraint is back
            conn.execute(text(INSERT), _row("R2", retry_of="J0"))

        upgrade(url)  # to head: on PostgreSQL through 0007, into partitions
        with db.engine.connect() as conn:
            kept = conn.execute(text("SELECT job_id FROM async_jobs ORDER BY job_id")).scalars()
            assert list(kept) == ["J0", "J1", "J2", "R1"]
        assert _indexes(db) >= NEW and not OLD & _indexes(db)
    finally:
        db.close()


def _hot_updates(db: Database) -> tuple[int, int]:
    with db.engine.connect() as conn:
        row = conn.execute(
            text(
                "SELECT coalesce(sum(n_tup_upd), 0), coalesce(sum(n_tup_hot_upd), 0) "
                "FROM pg_stat_user_tables "
                "WHERE relid IN (SELECT relid FROM pg_partition_tree(:t))"  # each partition's
            ),
            {"t": "async_jobs"},
        ).one()
    return int(row[0]), int(row[1])


def test_heartbeats_and_stamps_are_hot_on_postgres() -> None:
    made = create_pg_database()
    try:
        upgrade(made)
        db = Database(made)
        jobs, plans = sql_ledger(db)
        plan = Plan.with_steps(["a"])
        plans.add(plan)
        job = AsyncJob(plan_id=plan.plan_id, phase=PlanPhase.strategize)
        now = utcnow()
        assert jobs.queue([job], now)
        assert jobs.claim(job.job_id, "w@h/1", now) is not None  # changes status: not HOT
        wait_for(lambda: _hot_updates(db)[0] >= 1, timeout=10, what="the claim in the stats")
        before = _hot_updates(db)
        for i in range(1, 6):
            assert jobs.heartbeat([job.job_id], now + timedelta(seconds=i), "w@h/1") == set()
        assert jobs.mark_dispatched([job.job_id], now) == 1
        assert jobs.save_progress(job.job_id, 0.5, None, "w@h/1")
        after = wait_for(
            lambda: (s := _hot_updates(db))[0] >= before[0] + 7 and s,
            timeout=10,
            what="the heartbeats in the stats",
        )
        assert after[1] - before[1] == after[0] - before[0] == 7  # every one of them HOT
        db.close()
    finally:
        drop_pg_database(made)
