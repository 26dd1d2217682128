"""On a filled PostgreSQL ledger no listing, sweep or count seq-scans or sorts the big tables.

A throw-away database gets JOBS job rows (generate_series: a few seconds) with the live set
a busy fleet has (3,000 queued, 300 running, the rest ended: 2 % failed, 1 % cancelled),
a plan per three jobs, and FINDINGS findings over a few runs; then ANALYZE. Every statement
is planq's own: an engine listener records what each store method sends, and each is
EXPLAINed (FORMAT JSON, not ANALYZE: nothing timed, nothing run twice). A Seq Scan of
async_jobs, run_findings or plans, or a Sort above one, is a statement whose cost grows with
the ledger (issue 23); the failure names the operation and its plan.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import datetime, timedelta
from typing import Any

import pytest
from sqlalchemy import event, text
from sqlalchemy.exc import ProgrammingError

from planq.domain.clock import utcnow
from planq.domain.jobs import AsyncJobStatus
from planq.domain.runs import Fresh
from planq.store import Database, SqlRunStoreProvider, sql_ledger
from planq.store.migrate import upgrade
from planq.store.partitions import (
    create_partitions,
    is_partition_table,
    ulid_prefix,
    ulid_prefix_sql,
)
from tests.support import create_pg_database, drop_pg_database

JOBS = 200_000
QUEUED, RUNNING = 3_000, 300
FINDINGS = 100_000
BIG = {"async_jobs", "run_findings", "plans"}
WORKER = "w@h/1"

FILL_PLANS = """
INSERT INTO plans (plan_id, name, phase, status, spec_json, created_at, updated_at, version)
SELECT upper(lpad(to_hex(p), 26, '0')), 'plan-' || p, 'apply', 'complete', '{"steps": []}',
       :t0 + p * interval '30 seconds', :t0 + p * interval '30 seconds', 1
  FROM generate_series(1, :plans) AS p
"""
JOB_ID = ulid_prefix_sql("made.created_at") + " || lpad(upper(to_hex(i)), 16, '0')"
RETRIED = ulid_prefix_sql("made.created_at - interval '10 seconds'")
FILL_JOBS = f"""
INSERT INTO async_jobs (job_id, plan_id, phase, status, schema_version, payload_json,
                        worker_id, created_at, started_at, finished_at, last_heartbeat,
                        error_message, attempt, retry_of, dispatched_at, dispatch_count)
SELECT {JOB_ID}, plan_id, phase, status, 1,
       json_build_object('phase', phase, 'plan_id', plan_id, 'schema_version', 1)::text,
       CASE WHEN status = 'queued' THEN NULL ELSE :worker END,
       created_at,
       CASE WHEN status = 'queued' THEN NULL ELSE created_at END,
       CASE WHEN status IN ('queued', 'running') THEN NULL ELSE created_at + interval '5 s' END,
       CASE WHEN status = 'queued' THEN NULL
            WHEN status = 'running' AND i % 10 = 0 THEN :now - interval '1 hour'
            WHEN status = 'running' THEN :now
            ELSE created_at + interval '4 s' END,
       CASE WHEN status = 'failed' THEN 'boom' END,
       CASE WHEN i % 50 = 1 THEN 2 ELSE 1 END,
       CASE WHEN i % 50 = 1 THEN {RETRIED} || lpad(upper(to_hex(i - 1)), 16, '0') END,
       CASE WHEN status = 'queued' AND i % 10 = 0 THEN NULL ELSE created_at + interval '1 s' END,
       CASE WHEN status = 'queued' AND i % 10 = 0 THEN 0 ELSE 1 END
  FROM (
    SELECT i, upper(lpad(to_hex((i + 2) / 3), 26, '0')) AS plan_id,
           (ARRAY['strategize', 'execute', 'apply'])[(i - 1) % 3 + 1] AS phase,
           CASE WHEN i > :jobs - :queued THEN 'queued'
                WHEN i > :jobs - :queued - :running THEN 'running'
                WHEN i % 50 = 0 THEN 'failed'
                WHEN i % 100 = 7 THEN 'cancelled'
                ELSE 'succeeded' END AS status,
           CAST(:t0 AS timestamptz) + i * interval '10 seconds' AS created_at
      FROM generate_series(1, :jobs) AS i
  ) AS made
"""
FILL_RUNS = """
INSERT INTO recoverable_runs (id, job_name, status, started_at, last_progress_at,
                              completed_at, scanned_count, finding_count, params_json)
SELECT 'R' || lpad(r::text, 25, '0'), 'scan', 'Completed', :t0 + r * interval '1 hour',
       :t0 + r * interval '1 hour', :t0 + r * interval '1 hour', 0, 0, '{}'
  FROM generate_series(1, 20) AS r
"""
FILL_FINDINGS = """
INSERT INTO run_findings (id, run_id, kind, severity, resource_id, detail_json, created_at)
SELECT 'F' || lpad(f::text, 25, '0'), 'R' || lpad((f % 20 + 1)::text, 25, '0'), 'k',
       (ARRAY['data_loss', 'inconsistent', 'anomaly'])[f % 3 + 1], 'res-' || f, '{}',
       :t0 + f * interval '1 second'
  FROM generate_series(1, :findings) AS f
"""


#: When the fill's first job was created (job ids are ULIDs of their creation time).
FILLED_AT: dict[str, datetime] = {}


def _id(i: int) -> str:
    """The i-th job's id, as FILL_JOBS makes it: its partition is its creation day's."""
    return ulid_prefix(FILLED_AT["t0"] + i * timedelta(seconds=10)) + f"{i:x}".upper().rjust(
        16, "0"
    )


def _plan(i: int) -> str:
    return f"{i:x}".upper().rjust(26, "0")


@pytest.fixture(scope="module")
def filled() -> Iterator[Database]:
    url = create_pg_database("planq_explain")
    try:
        upgrade(url)
        db = Database(url)
        now = utcnow()
        t0 = now - timedelta(seconds=10 * JOBS + 60)
        FILLED_AT["t0"] = t0
        params = {
            "t0": t0,
            "now": now,
            "jobs": JOBS,
            "plans": (JOBS + 2) // 3,
            "queued": QUEUED,
            "running": RUNNING,
            "worker": WORKER,
            "findings": FINDINGS,
        }
        with db.engine.begin() as conn:
            # On PostgreSQL, one partition per day of the fill (as beat made them day by day).
            create_partitions(conn, now, behind=(t0 - now) // -timedelta(days=1) + 1)
            for sql in (FILL_PLANS, FILL_JOBS, FILL_RUNS, FILL_FINDINGS):
                conn.execute(text(sql), params)
        with db.engine.connect().execution_options(isolation_level="AUTOCOMMIT") as conn:
            conn.exec_driver_sql("VACUUM ANALYZE")
            EMPTY.update(
                conn.exec_driver_sql(
                    f"SELECT relname FROM pg_class WHERE relispartition AND relpages < {SMALL}"
                ).scalars()
            )
            rows = "SELECT relname, reltuples FROM pg_class WHERE relispartition AND relkind = 'r'"
            PARTITION_ROWS.update((name, n) for name, n in conn.exec_driver_sql(rows))
        yield db
        db.close()
    finally:
        drop_pg_database(url)


@contextmanager
def recorded(db: Database) -> Iterator[list[tuple[str, Any]]]:
    """The (statement, parameters) planq sends while inside, on every engine."""
    sent: list[tuple[str, Any]] = []

    def on_statement(_c: Any, _cur: Any, statement: str, parameters: Any, *_: Any) -> None:
        sent.append((statement, parameters))

    for engine in db.engines:
        event.listen(engine, "before_cursor_execute", on_statement)
    try:
        yield sent
    finally:
        for engine in db.engines:
            event.remove(engine, "before_cursor_execute", on_statement)


def _nodes(plan: dict[str, Any], above: tuple[str, ...] = ()) -> Iterator[tuple[dict, tuple]]:
    yield plan, above
    for child in plan.get("Plans", []):
        yield from _nodes(child, (*above, plan["Node Type"]))


#: Partitions of under SMALL pages: made ahead and still empty, or at the fill's edges
#: (the fill starts and ends mid-day). The planner rightly reads such a partition whole;
#: a full day's partition (hundreds of pages here) is read by its indexes.
SMALL = 64
EMPTY: set[str] = set()
#: A Sort of no more rows than the live set (what a fleet has in flight: bounded by its
#: workers and backlog, not by the ledger's age) is fine: a capped count of queued jobs
#: reads them all either way, and the planner sorts them when that is cheaper than merging
#: 30 partitions' index scans (at some hours of the day, when the live set falls in one
#: partition). A backlog bigger than the cap turns the plan into a Merge Append.
LIVE_SET_ROWS = 2 * (QUEUED + RUNNING)
#: Each partition's row count after the fill (pg_class.reltuples, from its ANALYZE).
PARTITION_ROWS: dict[str, float] = {}


def _table(node: dict[str, Any]) -> str | None:
    """The table a node reads: a partition of async_jobs is async_jobs, a small one none."""
    name = node.get("Relation Name")
    if name in EMPTY:
        return None
    return "async_jobs" if name and is_partition_table(name) else name


def _mostly_selected(node: dict[str, Any]) -> bool:
    """A scan the planner expects to return most of its partition: reading it whole is right.

    Only the fill's last, partial day looks like that (at some hours of the day its rows
    are mostly the live set); a fleet's day partition is mostly finished jobs.
    """
    name = str(node.get("Relation Name"))
    rows = PARTITION_ROWS.get(name)
    newest = max((n for n, r in PARTITION_ROWS.items() if r > 0 and "default" not in n), default="")
    return name == newest and rows is not None and node.get("Plan Rows", 0) >= rows / 2


def _reads_big(plan: dict[str, Any]) -> bool:
    return any(_table(node) in BIG for node, _ in _nodes(plan))


def problems(plan: dict[str, Any]) -> list[str]:
    """What in a plan grows with the table: a Seq Scan of a big table, or a Sort above one."""
    found = []
    for node, _ in _nodes(plan):
        kind = node["Node Type"]
        if kind == "Seq Scan" and _table(node) in BIG and not _mostly_selected(node):
            found.append(f"Seq Scan on {node['Relation Name']}")
        sorts = kind in ("Sort", "Incremental Sort") and node.get("Plan Rows", 0) > LIVE_SET_ROWS
        if sorts and _reads_big(node) and not _one_plan(node):
            found.append(f"{kind} over {sorted(BIG & _relations(node))}")
    return found


def _one_plan(plan: dict[str, Any]) -> bool:
    """Whether every big-table scan below reads one plan's jobs only (a handful of rows)."""
    scans = [n for n, _ in _nodes(plan) if _table(n) in BIG]
    return all(str(n.get("Index Cond", "")).startswith("((plan_id)::text = ") for n in scans)


def _relations(plan: dict[str, Any]) -> set[str]:
    return {str(_table(n)) for n, _ in _nodes(plan) if "Relation Name" in n}


def key_nodes(plan: dict[str, Any]) -> str:
    """The plan's path to its scans, e.g. 'Limit > Index Scan Backward (ix_…)' (pytest -s)."""
    parts = []
    for node, above in _nodes(plan):
        if "Relation Name" in node or "Index Name" in node:
            where = node.get("Index Name") or node.get("Relation Name")
            parts.append(" > ".join((*above, f"{node['Node Type']} ({where})")))
    return "; ".join(parts)


def explain(db: Database, statement: str, parameters: Any) -> dict[str, Any]:
    with db.engine.connect() as conn:
        doc = conn.exec_driver_sql(f"EXPLAIN (FORMAT JSON) {statement}", parameters).scalar_one()
    rows = json.loads(doc) if isinstance(doc, str) else doc
    return dict(rows[0]["Plan"])


def operations(db: Database) -> dict[str, Callable[[], object]]:
    """Each listing, count and sweep as planq calls it, and the writes the brief names."""
    jobs, plans = sql_ledger(db)
    runs = SqlRunStoreProvider(db)
    now = utcnow()
    middle, queued, running = _id(JOBS // 2), _id(JOBS), _id(JOBS - QUEUED)
    failed = AsyncJobStatus.failed
    cutoff = now - timedelta(seconds=10 * JOBS - 10 * 1_500)  # the oldest ~1,500 rows
    return {
        "list newest": lambda: jobs.list_recent(),
        "list after a cursor": lambda: jobs.list_recent(after=middle),
        "list offset 9950": lambda: jobs.list_recent(limit=50, offset=9_950),
        "list failed": lambda: jobs.list_recent(failed),
        "list failed after": lambda: jobs.list_recent(failed, after=_id(JOBS // 2 - 50)),
        "list succeeded": lambda: jobs.list_recent(AsyncJobStatus.succeeded),
        "list cancelled": lambda: jobs.list_recent(AsyncJobStatus.cancelled),
        "list queued": lambda: jobs.list_recent(AsyncJobStatus.queued),
        "list running": lambda: jobs.list_recent(AsyncJobStatus.running),
        "list of a plan": lambda: jobs.list_recent(plan_id=_plan(JOBS // 6)),
        "jobs of a plan": lambda: jobs.list_by_plan(_plan(JOBS // 6)),
        "count capped": lambda: jobs.count(at_most=10_001),
        "count failed capped": lambda: jobs.count(failed, at_most=10_001),
        "count succeeded capped": lambda: jobs.count(AsyncJobStatus.succeeded, at_most=10_001),
        "count queued capped": lambda: jobs.count(AsyncJobStatus.queued, at_most=10_001),
        "count of a plan": lambda: jobs.count(plan_id=_plan(JOBS // 6)),
        "plans list": lambda: plans.list_recent(),
        "plans list after a cursor": lambda: plans.list_recent(after=_id(JOBS // 6)),
        "plans count capped": lambda: plans.count(at_most=10_001),
        "plans waiting at a gate (metrics)": lambda: plans.gate_summary(),
        "approval expiry sweep": lambda: plans.list_awaiting(),
        "stuck sweep": lambda: jobs.list_stuck(now - timedelta(minutes=5)),
        "relay": lambda: jobs.list_dispatch_due(
            now - timedelta(seconds=30), now - timedelta(minutes=5)
        ),
        "queued oldest first": lambda: jobs.list_by_status(AsyncJobStatus.queued, 100),
        "TTL cleanup": lambda: jobs.delete_terminal_before(cutoff, 500),
        "cancel queued": lambda: jobs.cancel_queued(queued, now),
        "cancel request": lambda: jobs.cancel(running, now),
        "heartbeat": lambda: jobs.heartbeat([running], now, WORKER),
        "dispatch stamp": lambda: jobs.mark_dispatched([_id(JOBS - 1)], now),
        "availability sighting": lambda: jobs.sight_ledger("jobs", 45.0),
        "findings first page": lambda: runs.list_findings(_run(5), limit=50),
        # A deep offset into one run (4,950 of its 5,000) is planned as a sort of that run's
        # rows: bounded by the run, not the table; the keyset page after it is a range read.
        "findings page 10": lambda: runs.list_findings(_run(5), limit=50, offset=450),
        "findings after": lambda: runs.list_findings(
            _run(5), limit=50, after=_finding(4 + 20 * 2500)
        ),
        "severity counts": lambda: runs.finding_severity_counts(_run(5)),
        "runs list": lambda: runs.list_runs(limit=50),
    }


def _finding(n: int) -> str:
    return "F" + str(n).rjust(25, "0")


def _run(n: int) -> str:
    return "R" + str(n).rjust(25, "0")


def test_no_statement_scans_or_sorts_the_big_tables(filled: Database) -> None:
    opened = SqlRunStoreProvider(filled).open_or_start("explain_probe", owner="w@h")
    assert isinstance(opened, Fresh)  # the run tables answer on the filled database
    bad: dict[str, list[str]] = {}
    seen = 0
    for name, call in operations(filled).items():
        with recorded(filled) as sent:
            call()
        assert sent, f"{name}: sent no statement"
        for statement, parameters in _unique(sent):
            if not statement.lstrip().upper().startswith(("SELECT", "UPDATE", "DELETE", "WITH")):
                continue
            seen += 1
            try:
                plan = explain(filled, statement, parameters)
            except ProgrammingError as exc:  # the cleanup's probe of a partition it dropped
                assert "does not exist" in str(exc) and name == "TTL cleanup", exc
                continue
            print(f"{name}: {key_nodes(plan)}")
            if found := problems(plan):
                bad.setdefault(name, []).extend([*found, json.dumps(plan)[:1500]])
    assert seen >= len(operations(filled))
    assert bad == {}, json.dumps(bad, indent=1)


def _unique(sent: list[tuple[str, Any]]) -> list[tuple[str, Any]]:
    out: dict[str, Any] = {}
    for statement, parameters in sent:
        out.setdefault(statement, parameters)
    return list(out.items())
