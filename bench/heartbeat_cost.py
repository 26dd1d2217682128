"""What a heartbeat costs PostgreSQL, per running job: an input of the fleet model.

A worker process stamps all of its running jobs in one UPDATE … RETURNING every
heartbeat interval (default 5 s). This fills a throw-away database with RUNNING jobs of
one worker (plus ENDED finished ones, so the table is not just the live set), then calls
planq's own `SqlJobStore.heartbeat` with batches of 1, 10, 100 and 1,000 ids, many times
each, and reads the server backend's CPU time (/proc/<pid>/stat of the connection's
backend, so the database runs on this machine) and the wall time per call.

    .venv/bin/python bench/heartbeat_cost.py [--running 10000] [--ended 200000]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
import uuid
from datetime import timedelta
from pathlib import Path
from typing import Any

import psycopg
from sqlalchemy import text

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.ledger_cleanup import FILL  # noqa: E402
from planq.domain.clock import utcnow  # noqa: E402
from planq.store import Database, sql_ledger  # noqa: E402
from planq.store.migrate import upgrade  # noqa: E402
from planq.store.partitions import create_partitions  # noqa: E402

ADMIN = "postgresql://postgres@127.0.0.1:5432/postgres"
WORKER = "w@h/1"
TICKS = os.sysconf("SC_CLK_TCK")


def backend_cpu_seconds(pid: int) -> float:
    """Utime + stime of a local process, in seconds."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICKS


def fill(db: Database, running: int, ended: int) -> list[str]:
    """The rows, made as beat would have partitioned them; the running jobs' ids."""
    now = utcnow()
    with db.engine.begin() as conn:
        create_partitions(conn, now, behind=3)
        for status, n, base, newest in (
            ("succeeded", ended, 0, now - timedelta(hours=1)),
            ("running", running, 10**9, now),
        ):
            params = {"n": n, "base": base, "newest": newest, "span": 86_400, "status": status}
            conn.execute(text(FILL), {**params, "now": now})
        conn.execute(
            text("UPDATE async_jobs SET worker_id = :w WHERE status = 'running'"), {"w": WORKER}
        )
    with db.engine.connect().execution_options(isolation_level="AUTOCOMMIT") as conn:
        conn.exec_driver_sql("VACUUM ANALYZE async_jobs")
        rows = conn.exec_driver_sql("SELECT job_id FROM async_jobs WHERE status = 'running'")
        return [r[0] for r in rows]


def measure(db: Database, ids: list[str], batch: int, calls: int) -> dict[str, Any]:
    jobs, _ = sql_ledger(db)
    chosen = ids[:batch]
    jobs.heartbeat(chosen, utcnow(), WORKER)  # warm: the pooled connection and its plan
    with db.connection("probe") as conn:
        pid = int(conn.exec_driver_sql("SELECT pg_backend_pid()").scalar_one())
    cpu0, wall0 = backend_cpu_seconds(pid), time.perf_counter()
    for _ in range(calls):
        jobs.heartbeat(chosen, utcnow(), WORKER)
    cpu, wall = backend_cpu_seconds(pid) - cpu0, time.perf_counter() - wall0
    with db.connection("probe") as conn:  # the same backend served every call
        assert int(conn.exec_driver_sql("SELECT pg_backend_pid()").scalar_one()) == pid
    return {
        "batch": batch,
        "calls": calls,
        "pg_cpu_ms_per_call": round(1000 * cpu / calls, 3),
        "pg_cpu_ms_per_job": round(1000 * cpu / (calls * batch), 4),
        "wall_ms_per_call": round(1000 * wall / calls, 3),
    }


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--running", type=int, default=10_000)
    p.add_argument("--ended", type=int, default=200_000)
    args = p.parse_args()
    name = f"planq_hb_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(ADMIN, autocommit=True) as admin:
        admin.execute(f'CREATE DATABASE "{name}"')
    url = f"postgresql+psycopg://postgres@127.0.0.1:5432/{name}"
    try:
        upgrade(url)
        db = Database(url)
        ids = fill(db, args.running, args.ended)
        results = [
            measure(db, ids, batch, calls)
            for batch, calls in ((1, 2000), (10, 1000), (100, 300), (1000, 60))
        ]
        db.close()
        print(json.dumps({"running": len(ids), "ended": args.ended, "results": results}, indent=1))
    finally:
        with psycopg.connect(ADMIN, autocommit=True) as admin:
            admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


if __name__ == "__main__":
    main()
