"""TTL cleanup on PostgreSQL: the batched delete (0006) against dropping partitions (0007).

Two throw-away databases, one per revision, get the same rows (generate_series): OLD
ended jobs created 8 to 18 days ago (past the 7-day TTL), RECENT ended jobs of the last
7 days, and the live set (3,000 queued, 300 running). Then planq's own
`SqlJobStore.delete_terminal_before(now - 7 days, 500)` runs once, timed, and the size of
async_jobs (every partition and index) is read before and after. Before the cleanup, 300
jobs go through queue, claim and finish one at a time (the job path's median per step),
to see what ~30 partitions cost the by-id statements.

    .venv/bin/python bench/ledger_cleanup.py --old 500000 --recent 100000
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import psycopg
from sqlalchemy import text

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.ledger_fill import QUEUED, RUNNING  # noqa: E402
from planq.domain.clock import utcnow  # noqa: E402
from planq.domain.jobs import AsyncJob, AsyncJobStatus  # noqa: E402
from planq.domain.plans import Plan, PlanPhase  # noqa: E402
from planq.store import Database, sql_ledger  # noqa: E402
from planq.store.migrate import upgrade  # noqa: E402
from planq.store.partitions import create_partitions, ulid_prefix_sql  # noqa: E402

ADMIN = "postgresql://postgres@127.0.0.1:5432/postgres"
TTL = timedelta(days=7)
FILL = f"""
INSERT INTO async_jobs (job_id, plan_id, phase, status, schema_version, payload_json,
                        worker_id, created_at, started_at, finished_at, last_heartbeat,
                        attempt, dispatched_at, dispatch_count)
SELECT {ulid_prefix_sql("at")} || lpad(upper(to_hex(:base + i)), 16, '0'),
       '01000000000000000000000000', 'execute', status, 1,
       '{{"phase": "execute", "schema_version": 1}}',
       CASE WHEN status = 'queued' THEN NULL ELSE 'w@h/1' END, at,
       CASE WHEN status = 'queued' THEN NULL ELSE at END,
       CASE WHEN status IN ('queued', 'running') THEN NULL ELSE at + interval '5 s' END,
       CASE WHEN status = 'running' THEN :now END, 1, at, 1
  FROM (SELECT i, :newest - (i * CAST(:span AS float8) / :n) * interval '1 second' AS at,
               CASE WHEN :status <> 'ended' THEN :status
                    WHEN i % 50 = 0 THEN 'failed' ELSE 'succeeded' END AS status
          FROM generate_series(1, :n) AS i) AS made
"""
SIZE = """
SELECT greatest(pg_total_relation_size('async_jobs'), (SELECT sum(pg_total_relation_size(relid))
                                                      FROM pg_partition_tree('async_jobs')))
"""


def fill(db: Database, now: datetime, old: int, recent: int) -> None:
    """The same rows whatever the revision: old and recent ended jobs, and the live set.

    Not bench/ledger_fill.py's shape: two ages either side of the TTL, and rows that fit the
    one-table schema of 0006 as well; the live set is the same (QUEUED, RUNNING).
    """
    batches = [  # (status, newest, span in seconds, n)
        ("ended", now - TTL - timedelta(days=1), 10 * 86400, old),
        ("ended", now, TTL.total_seconds() - 3600, recent),
        ("queued", now, 60, QUEUED),
        ("running", now, 600, RUNNING),
    ]
    base = 0
    with db.engine.begin() as conn:
        for status, newest, span, n in batches:
            params = {"status": status, "newest": newest, "span": span, "n": n}
            conn.execute(text(FILL), {**params, "base": base, "now": now})
            base += n
    with db.engine.connect().execution_options(isolation_level="AUTOCOMMIT") as conn:
        conn.exec_driver_sql("VACUUM ANALYZE async_jobs")


def job_path(db: Database, n: int) -> dict[str, float]:
    """Median ms of queue, claim and finish over n fresh jobs (planq's stores, one thread)."""
    jobs, plans = sql_ledger(db)
    took: dict[str, list[float]] = {"queue": [], "claim": [], "finish": []}
    for _ in range(n):
        plan = Plan.with_steps(["a"])
        plans.add(plan)
        job = AsyncJob(plan_id=plan.plan_id, phase=PlanPhase.strategize)
        for step, call in (
            ("queue", lambda j=job: jobs.queue([j], utcnow())),
            ("claim", lambda j=job: jobs.claim(j.job_id, "w@h/1", utcnow())),
            ("finish", lambda j=job: jobs.finish(j.job_id, AsyncJobStatus.succeeded, utcnow())),
        ):
            started = time.perf_counter()
            assert call()
            took[step].append((time.perf_counter() - started) * 1000)
    return {step: round(statistics.median(ms), 2) for step, ms in took.items()}


def measure(revision: str, old: int, recent: int) -> dict[str, Any]:
    """One database at revision: fill, size, cleanup timed, size again."""
    name = f"planq_bench_cleanup_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(ADMIN, autocommit=True) as admin:
        admin.execute(f'CREATE DATABASE "{name}"')
    url = f"postgresql+psycopg://postgres@127.0.0.1:5432/{name}"
    try:
        upgrade(url, revision)
        db = Database(url)
        now = datetime.now(UTC)
        with db.engine.begin() as conn:  # as beat made them, a day at a time
            if conn.execute(text("SELECT to_regclass('async_jobs_default')")).scalar():
                create_partitions(conn, now, behind=20)
        fill(db, now, old, recent)
        with db.engine.connect() as conn:
            before = conn.execute(text(SIZE)).scalar_one()
        path = job_path(db, 300)
        jobs, _ = sql_ledger(db)
        started = time.perf_counter()
        deleted = jobs.delete_terminal_before(now - TTL, 500)
        seconds = time.perf_counter() - started
        with db.engine.connect() as conn:
            after = conn.execute(text(SIZE)).scalar_one()
            rows = conn.execute(text("SELECT count(*) FROM async_jobs")).scalar_one()
        db.close()
        return {
            "revision": revision,
            "deleted": deleted,
            "seconds": round(seconds, 3),
            "size_before_mb": round(before / 2**20, 1),
            "size_after_mb": round(after / 2**20, 1),
            "rows_left": rows,
            "job_path": path,
        }
    finally:
        with psycopg.connect(ADMIN, autocommit=True) as admin:
            admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def main() -> None:
    """Both revisions, one after the other; a Markdown table on stdout."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--old", type=int, default=500_000)
    parser.add_argument("--recent", type=int, default=100_000)
    args = parser.parse_args()
    print(
        "| cleanup | rows removed | time | async_jobs before | after | rows left | "
        "queue / claim / finish (median ms) |"
    )
    print("|---|---|---|---|---|---|---|")
    for label, revision in (
        ("batched delete (0006)", "0006_error_traceback"),
        ("drop (0007)", "head"),
    ):
        r = measure(revision, args.old, args.recent)
        print(
            f"| {label} | {r['deleted']:,} | {r['seconds']:.2f} s | {r['size_before_mb']} MB "
            f"| {r['size_after_mb']} MB | {r['rows_left']:,} | "
            f"{' / '.join(str(v) for v in r['job_path'].values())} |",
            flush=True,
        )


if __name__ == "__main__":
    main()
