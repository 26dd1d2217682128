"""EXPLAIN (ANALYZE, BUFFERS) of the runner's claim and finish, one and a batch, on a filled ledger.

A throw-away PostgreSQL database gets bench/ledger_fill.py's fill at --rows job rows (30
days of daily partitions, 3,000 queued and 300 running: the live set); then the batch
claim of 16 queued jobs and the batch finish of 16 running ones (each batch's rows in one
partition) are explained inside a transaction that is rolled back: on the parent, and on
the partition, as the runner names it (`SqlJobStore._many_at_home`); then the single claim
and finish on the partition. Each is explained twice: as the default engine's session
plans it, and as a hot session does (`KEYED_LOOKUPS_ONLY`, store/database.py). Prints each
plan's scan nodes, time (planning and execution) and shared buffers.

    .venv/bin/python bench/explain_batches.py --rows 1000000
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from sqlalchemy import text

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.ledger_fill import Shape, fill
from bench.ledger_scale import SPAN, throwaway
from planq.domain.clock import utcnow
from planq.domain.jobs import AsyncJobStatus
from planq.store import Database
from planq.store.database import KEYED_LOOKUPS_ONLY
from planq.store.migrate import upgrade
from planq.store.partitions import JOBS
from planq.store.sql_batch import _pg_claim_many, _pg_finish_many
from planq.store.sql_hot_path import _pg_claim, _pg_finish

BATCH = 16


def explained(conn: Any, statement: Any, parameters: dict[str, Any]) -> dict[str, Any]:
    sql = str(statement)  # the TextClause's SQL, its :binds kept
    row = conn.execute(
        text(f"EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) {sql}"), parameters
    ).scalar_one()
    doc: dict[str, Any] = (json.loads(row) if isinstance(row, str) else row)[0]
    return doc


def scans(node: dict[str, Any]) -> list[str]:
    """Each scan node of the plan: its kind, and the index or table it reads."""
    found = []
    if "Scan" in node.get("Node Type", ""):
        on = node.get("Index Name") or node.get("Relation Name", "?")
        found.append(f"{node['Node Type']} {on}")
    for child in node.get("Plans", []):
        found.extend(scans(child))
    return found


def report(name: str, doc: dict[str, Any]) -> None:
    plan = doc["Plan"]
    ms = doc.get("Planning Time", 0.0) + doc.get("Execution Time", 0.0)
    hits = plan.get("Shared Hit Blocks", 0) + plan.get("Shared Read Blocks", 0)
    print(f"{name}: {ms:.2f} ms, {hits} shared buffers; {len(scans(plan))} scans")
    for kind in sorted(set(scans(plan))):
        print(f"  {kind} x{scans(plan).count(kind)}")


def one_partition(conn: Any, status: str, with_worker: bool = False) -> tuple[str, list[Any]]:
    """BATCH rows of this status in one partition (the most populated): its name, the rows."""
    rows = conn.execute(
        text(
            "SELECT tableoid::regclass::text AS home, job_id, worker_id FROM async_jobs "
            "WHERE status = :status LIMIT 2000"
        ),
        {"status": status},
    ).all()
    by_home: dict[str, list[Any]] = {}
    for row in rows:
        by_home.setdefault(row.home, []).append(row)
    home = max(by_home, key=lambda h: len(by_home[h]))
    return home, by_home[home][:BATCH]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, default=1_000_000)
    rows = parser.parse_args().rows
    with throwaway() as url:
        upgrade(url)
        db = Database(url)
        try:
            fill(db, Shape.over(rows, SPAN, findings=2_000, runs=20))
            with db.engine.connect() as conn:
                home, queued = one_partition(conn, "queued")
                running_home, running = one_partition(conn, "running", with_worker=True)
                now = utcnow()
                claim = {
                    "job_ids": [r.job_id for r in queued],
                    "worker_id": "bench/1",
                    "now": now,
                    "follow": True,
                }
                finish = {
                    "job_ids": [r.job_id for r in running],
                    "statuses": ["succeeded"] * len(running),
                    "errors": [None] * len(running),
                    "tracebacks": [None] * len(running),
                    "worker_ids": [r.worker_id for r in running],
                    "now": now,
                    "follow": True,
                }
                one_claim = {"job_id": queued[0].job_id, "worker_id": "bench/1", "now": now}
                one_finish = {
                    "job_id": running[0].job_id,
                    "now": now,
                    "error": None,
                    "traceback": None,
                    "fenced": True,
                    "worker_id": running[0].worker_id,
                }
                for session in ("default", "hot"):
                    # The parent's form, then the runner's: the statement named on the partition.
                    for table, where in ((JOBS.parent, "parent"), (None, "partition")):
                        if session == "hot":  # a plain SET: the rollback below takes it back
                            conn.exec_driver_sql(KEYED_LOOKUPS_ONLY)
                        on_claim, on_finish = table or home, table or running_home
                        label = f"{where} {on_claim}" if where == "partition" else where
                        report(
                            f"{session}: claim_many({len(queued)}) on {label}",
                            explained(conn, _pg_claim_many(on_claim), claim),
                        )
                        report(
                            f"{session}: finish_many({len(running)}) on {where}",
                            explained(conn, _pg_finish_many(on_finish), finish),
                        )
                        if where == "partition":
                            report(
                                f"{session}: claim(1) on {label}",
                                explained(conn, _pg_claim(home), {**one_claim, "follow": True}),
                            )
                            finish_one = _pg_finish(AsyncJobStatus.succeeded, running_home)
                            report(
                                f"{session}: finish(1) on {where}",
                                explained(conn, finish_one, {**one_finish, "follow": True}),
                            )
                        conn.rollback()  # nothing claimed or finished stays, nor the SET
        finally:
            db.close()
    print(f"({rows:,} job rows over {SPAN.days} days of daily partitions)")


if __name__ == "__main__":
    main()
