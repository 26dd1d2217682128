"""The hot path goes by key even on a new day's partition, whose statistics say it is empty.

psycopg prepares a hot statement after a few uses, and PostgreSQL keeps the generic plan
it made from the statistics of that moment for the connection's life. A new partition
(made ahead, or at midnight) holds no rows by its statistics, and the planner's cheapest
way to read a table that small is to read it whole: a Seq Scan that stays cached while
the partition grows (the bench's prefork row: two scans of the whole partition per job). The
hot engine's sessions run with `enable_seqscan = off` (store/database.py), so each of its
statements is planned on the partition's primary key whatever the statistics say.

Every statement here is planq's own, recorded as the store sends it (queue, claim,
heartbeat, progress, finish, one job and a batch), and EXPLAINed on a hot connection with
the parameters it was sent with. The control: the same claim EXPLAINed on the default
engine reads the partition whole, so the hot path's plans are not the planner's default.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest
from sqlalchemy import Connection

from bench.ledger_fill import nodes, recorded
from planq.domain.clock import utcnow
from planq.domain.jobs import AsyncJob, AsyncJobStatus
from planq.domain.plans import Plan, PlanPhase
from planq.domain.ports import Finish
from planq.store import Database, sql_ledger
from tests.support import create_migrated_pg_database, drop_pg_database

WORKER = "node-a/1"


@pytest.fixture
def db() -> Iterator[Database]:
    """A fresh database at head: today's partition exists and its statistics say empty."""
    url = create_migrated_pg_database("planq_hot_plans")
    database = Database(url)
    try:
        yield database
    finally:
        database.close()
        drop_pg_database(url)


def _plan(conn: Connection, statement: str, parameters: Any) -> dict[str, Any]:
    doc = conn.exec_driver_sql(f"EXPLAIN (FORMAT JSON) {statement}", parameters).scalar_one()
    rows = json.loads(doc) if isinstance(doc, str) else doc
    return dict(rows[0]["Plan"])


def _job_reads(plan: dict[str, Any]) -> list[tuple[str, str]]:
    """(node type, index or '') of every scan of a job table."""
    return [
        (node["Node Type"], str(node.get("Index Name", "")))
        for node, _ in nodes(plan)
        if str(node.get("Relation Name", "")).startswith("async_jobs")
        and str(node["Node Type"]).endswith("Scan")
    ]


def _bounded_indexes(conn: Connection) -> set[str]:
    """The job tables' indexes a key lookup may use: primary keys and the live-set index.

    The live-set index (queued and running rows only) is as big as a fleet's work in hand,
    not as the ledger; an index on created_at, finished_at or plan_id read without its
    leading column would be read whole.
    """
    rows = conn.exec_driver_sql(
        "SELECT indexname, indexdef FROM pg_indexes WHERE starts_with(tablename, 'async_jobs')"
    ).all()
    live = "WHERE ((status)::text = ANY ((ARRAY['queued'::character varying, 'running'"
    return {name for name, ddl in rows if name.endswith("_pkey") or live in ddl}


def _hot_statements(db: Database) -> list[tuple[str, Any]]:
    """What queue, claim, heartbeat, progress and finish send, one job and a batch each."""
    jobs, plans = sql_ledger(db)
    queued = []
    for i in range(6):
        plan = Plan(name=f"hot-{i}")
        plans.add(plan)
        queued.append(AsyncJob(plan_id=plan.plan_id, phase=PlanPhase.strategize))
    with recorded(db) as sent:
        assert jobs.queue(queued[:1], utcnow()) is not None
        assert jobs.queue(queued[1:], utcnow()) is not None
        assert jobs.claim(queued[0].job_id, WORKER, utcnow()) is not None
        claimed = jobs.claim_many([j.job_id for j in queued[1:]], WORKER, utcnow())
        assert all(c is not None for c in claimed)
        jobs.heartbeat([queued[0].job_id], utcnow(), WORKER)
        assert jobs.save_progress(queued[0].job_id, 0.5, None, WORKER)
        done = AsyncJobStatus.succeeded
        assert jobs.finish(queued[0].job_id, done, utcnow(), worker_id=WORKER)
        batch = [Finish(j.job_id, done, None, None, WORKER) for j in queued[1:]]
        assert len(jobs.finish_many(batch, utcnow())) == len(batch)
    hot = [(s, p) for s, p in sent if "async_jobs" in s and s.lstrip()[:6] != "SELECT"]
    return list({s: (s, p) for s, p in reversed(hot)}.values())


def test_every_hot_statement_reads_a_new_partition_by_a_bounded_index(db: Database) -> None:
    statements = _hot_statements(db)
    sent = [" ".join(s.split())[:60] for s, _ in statements]
    assert len(statements) >= 8, f"expected 8 forms (queue, claim, beat, progress, finish): {sent}"
    with db.connection("explain") as conn:
        assert conn.exec_driver_sql("SHOW enable_seqscan").scalar_one() == "off"
        bounded = _bounded_indexes(conn)
        for statement, parameters in statements:
            reads = _job_reads(_plan(conn, statement, parameters))
            if "INSERT INTO" not in statement:  # the queue reads plans only
                assert reads, f"no job table read in the plan of {statement[:200]}"
            scans = [r for r in reads if r[0] == "Seq Scan"]
            assert not scans, f"{reads} for {statement[:300]}"
            unbounded = [r for r in reads if r[1] not in bounded]
            assert not unbounded, (
                f"a job table read by an index that grows with the ledger: {reads}\n"
                f"{statement[:300]}"
            )


def test_the_default_engine_would_read_the_new_partition_whole(db: Database) -> None:
    """The control: without the hot session's setting the same claim is a Seq Scan."""
    claim = next(
        (s, p)
        for s, p in _hot_statements(db)
        if "started_at" in s and "ANY(" not in s and "INSERT" not in s
    )
    with db.engine.connect() as conn:
        assert conn.exec_driver_sql("SHOW enable_seqscan").scalar_one() == "on"
        reads = _job_reads(_plan(conn, *claim))
    assert ("Seq Scan", "") in reads, reads
