"""On a filled PostgreSQL ledger no listing, sweep or count seq-scans or sorts the big tables.

A throw-away database gets JOBS job rows (bench/ledger_fill.py: a few seconds) with the live set
a busy fleet has (3,000 queued, 300 running, the rest ended: 2 % failed, 1 % cancelled),
a plan per three jobs, and FINDINGS findings over a few runs; then ANALYZE. Every statement
is planq's own: an engine listener records what each store method sends, and each is
EXPLAINed (FORMAT JSON, not ANALYZE: nothing timed, nothing run twice). A Seq Scan of
async_jobs, run_findings or plans, or a Sort above one, is a statement whose cost grows with
the ledger (issue 23); the failure names the operation and its plan.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import pytest
from sqlalchemy.exc import ProgrammingError

from bench.ledger_fill import (
    QUEUED,
    RUNNING,
    Shape,
    explain,
    fill,
    key_nodes,
    nodes,
    operations,
    recorded,
    unique,
)
from planq.domain.jobs import AsyncJobStatus
from planq.domain.runs import Fresh
from planq.store import Database, SqlRunStoreProvider, sql_ledger
from planq.store.migrate import upgrade
from planq.store.partitions import partitioned_parent
from tests.support import create_pg_database, drop_pg_database

JOBS = 200_000
FINDINGS = 100_000
BIG = {"async_jobs", "run_findings", "plans"}


@pytest.fixture(scope="module")
def filled() -> Iterator[tuple[Database, Shape]]:
    """The fill (bench/ledger_fill.py): a job every 10 s, so 23 days of daily partitions."""
    url = create_pg_database("planq_explain")
    try:
        upgrade(url)
        db = Database(url)
        shape = Shape(JOBS, timedelta(seconds=10), FINDINGS)
        fill(db, shape)
        with db.engine.connect() as conn:
            EMPTY.update(
                conn.exec_driver_sql(
                    f"SELECT relname FROM pg_class WHERE relispartition AND relpages < {SMALL}"
                ).scalars()
            )
            rows = "SELECT relname, reltuples FROM pg_class WHERE relispartition AND relkind = 'r'"
            PARTITION_ROWS.update((name, n) for name, n in conn.exec_driver_sql(rows))
        yield db, shape
        db.close()
    finally:
        drop_pg_database(url)


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
    """The table a node reads: a partition is its parent table, a small one none."""
    name = node.get("Relation Name")
    if name in EMPTY:
        return None
    return (partitioned_parent(name) or name) if name else name


def _mostly_selected(node: dict[str, Any]) -> bool:
    """A scan the planner expects to return most of its partition: reading it whole is right.

    Only the fill's partial days at its two edges look like that, depending on the hour the
    test runs: the last day's rows are then mostly the live set, and the first day's are
    mostly what one TTL cleanup batch deletes. A fleet's full day partition is neither.
    """
    name = str(node.get("Relation Name"))
    rows = PARTITION_ROWS.get(name)
    parent = partitioned_parent(name)
    days = sorted(
        n
        for n, r in PARTITION_ROWS.items()
        if r > 0 and "default" not in n and partitioned_parent(n) == parent
    )
    edges = {days[0], days[-1]} if days else set()
    return name in edges and rows is not None and node.get("Plan Rows", 0) >= rows / 2


def _reads_big(plan: dict[str, Any]) -> bool:
    return any(_table(node) in BIG for node, _ in nodes(plan))


def problems(plan: dict[str, Any]) -> list[str]:
    """What in a plan grows with the table: a Seq Scan of a big table, or a Sort above one."""
    found = []
    for node, _ in nodes(plan):
        kind = node["Node Type"]
        if kind == "Seq Scan" and _table(node) in BIG and not _mostly_selected(node):
            found.append(f"Seq Scan on {node['Relation Name']}")
        sorts = kind in ("Sort", "Incremental Sort") and node.get("Plan Rows", 0) > LIVE_SET_ROWS
        if sorts and _reads_big(node) and not _one_plan(node):
            found.append(f"{kind} over {sorted(BIG & _relations(node))}")
    return found


def _one_plan(plan: dict[str, Any]) -> bool:
    """Whether every big-table scan below reads one plan's jobs only (a handful of rows)."""
    scans = [n for n, _ in nodes(plan) if _table(n) in BIG]
    return all(str(n.get("Index Cond", "")).startswith("((plan_id)::text = ") for n in scans)


def _relations(plan: dict[str, Any]) -> set[str]:
    return {str(_table(n)) for n, _ in nodes(plan) if "Relation Name" in n}


def test_no_statement_scans_or_sorts_the_big_tables(filled: tuple[Database, Shape]) -> None:
    db, shape = filled
    opened = SqlRunStoreProvider(db).open_or_start("explain_probe", owner="w@h")
    assert isinstance(opened, Fresh)  # the run tables answer on the filled database
    bad: dict[str, list[str]] = {}
    seen = 0
    for name, call in operations(db, shape).items():
        with recorded(db) as sent:
            call()
        assert sent, f"{name}: sent no statement"
        for statement, parameters in unique(sent):
            if not statement.lstrip().upper().startswith(("SELECT", "UPDATE", "DELETE", "WITH")):
                continue
            seen += 1
            try:
                plan = explain(db, statement, parameters)
            except ProgrammingError as exc:  # the cleanup's probe of a partition it dropped
                assert "does not exist" in str(exc) and name == "TTL cleanup", exc
                continue
            print(f"{name}: {key_nodes(plan)}")
            if found := problems(plan):
                bad.setdefault(name, []).extend([*found, json.dumps(plan)[:1500]])
    assert seen >= len(operations(db, shape))
    assert bad == {}, json.dumps(bad, indent=1)


def test_a_deep_offset_skips_over_index_entries_not_rows(filled: tuple[Database, Shape]) -> None:
    # Failed jobs lie far apart on the heap: skipping 1,000 of them row by row read a heap
    # page each (10,264 buffers at 1M rows for offset 9,950). The skip reads ids only.
    db, _ = filled
    jobs, _ = sql_ledger(db)
    with recorded(db) as sent:
        page = jobs.list_recent(status=AsyncJobStatus.failed, limit=50, offset=1_000)
    skip, fetch = unique(sent)
    plan = explain(db, *skip)
    scans = {n["Node Type"] for n, _ in nodes(plan) if _table(n)}  # of partitions with rows
    assert scans == {"Index Only Scan"}, key_nodes(plan)
    assert len(page) == 50 and all(job.status is AsyncJobStatus.failed for job in page)
    assert "IN" in fetch[0] and "OFFSET" not in fetch[0].upper()  # the page's rows, by id
