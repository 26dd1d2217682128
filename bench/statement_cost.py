#!/usr/bin/env python
"""PostgreSQL's own CPU per statement of a job's life: planq's three against Procrastinate's.

No worker, no broker: one connection each, on throw-away databases, statements sent one
after another for N jobs, and the server CPU of that connection's backend (utime + stime
from /proc) divided by N. What a job costs the database, without the end-to-end run's
concurrency, polling and bookkeeping around it (bench/throughput.py measures those).

  planq          queue, claim, finish through SqlJobStore (the hot path as the workers
                 run it), after `--behind` extra days of partitions (a month of retention)
  procrastinate  defer (procrastinate_defer_jobs_v1), fetch (procrastinate_fetch_job_v2)
                 with N jobs waiting and with one, finish (procrastinate_finish_job_v1), its
                 own SQL; "a job" adds defer, fetch with one waiting and finish

Usage:
  .venv/bin/python bench/statement_cost.py [--jobs 3000] [--behind 30] [--out FILE]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from bench.throughput import create_pg_database, drop_pg_database, seed_plans  # noqa: E402

ADMIN = os.environ.get("PLANQ_BENCH_PG_ADMIN", "postgresql://postgres@127.0.0.1:5432/postgres")
_TICK = os.sysconf("SC_CLK_TCK")


def backend_cpu(pid: int) -> int:
    """A backend's CPU so far, in clock ticks."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return int(fields[11]) + int(fields[12])


def per_call(pid: int, calls: list[Callable[[], object]]) -> float:
    """Server CPU (ms) per call, over all the calls."""
    before = backend_cpu(pid)
    for call in calls:
        call()
    return round(1000.0 * (backend_cpu(pid) - before) / _TICK / len(calls), 3)


def planq(jobs: int, behind: int) -> dict[str, float]:
    from planq.domain.jobs import AsyncJob, AsyncJobStatus
    from planq.domain.payload import serialize_job_payload
    from planq.domain.plans import PlanPhase
    from planq.store import Database, sql_ledger
    from planq.store.migrate import upgrade
    from planq.store.partitions import create_partitions

    name, url = create_pg_database(ADMIN, "planq_stmt")
    try:
        upgrade(url)
        db = Database(url, pool_size=1, max_overflow=0)  # one hot connection: one backend
        with db.connection("bench") as conn:
            create_partitions(conn, datetime.now(UTC), behind=behind)
            pid = int(conn.exec_driver_sql("SELECT pg_backend_pid()").scalar_one())
        store, _ = sql_ledger(db)
        made = [
            AsyncJob(
                plan_id=plan_id,
                phase=PlanPhase.execute,
                payload_json=serialize_job_payload(plan_id, "execute"),
            )
            for plan_id in seed_plans(url, jobs)
        ]

        def now() -> datetime:
            return datetime.now(UTC)  # each write its own moment, as in a fleet

        out = {
            "queue": per_call(pid, [lambda j=j: store.queue([j], now()) for j in made]),
            "claim": per_call(
                pid,
                [lambda j=j: store.claim(j.job_id, "w@h/1", now(), follow_plan=True) for j in made],
            ),
            "finish": per_call(
                pid,
                [
                    lambda j=j: store.finish(
                        j.job_id,
                        AsyncJobStatus.succeeded,
                        now(),
                        worker_id="w@h/1",
                        follow_plan=True,
                    )
                    for j in made
                ],
            ),
        }
        db.close()
        return out
    finally:
        drop_pg_database(ADMIN, name)


def procrastinate(jobs: int) -> dict[str, float]:
    import psycopg
    from procrastinate import App, SyncPsycopgConnector

    name, url = create_pg_database(ADMIN, "procr_stmt")
    try:
        app = App(connector=SyncPsycopgConnector(conninfo=url))
        with app.open():
            app.schema_manager.apply_schema()
        with psycopg.connect(url, autocommit=True) as conn:
            pid = int(conn.execute("SELECT pg_backend_pid()").fetchone()[0])  # type: ignore[index]
            worker = conn.execute("SELECT * FROM procrastinate_register_worker_v1()").fetchone()
            defer = (
                "SELECT unnest(procrastinate_defer_jobs_v1(ARRAY[ROW('default', 'noop', 0, "
                "NULL, NULL, '{}'::jsonb, NOW())]::procrastinate_job_to_defer_v1[]))"
            )
            fetch = (
                "SELECT id, status, task_name, priority, lock, queueing_lock, args, "
                "scheduled_at, queue_name, attempts, worker_id "
                "FROM procrastinate_fetch_job_v2(%(queues)s::varchar[], %(worker_id)s)"
            )
            ids: list[Any] = []
            fetch_args = {"queues": None, "worker_id": worker[0] if worker else None}

            def fetched() -> None:
                ids.append(conn.execute(fetch, fetch_args).fetchone()[0])  # type: ignore[index]

            out = {"defer": per_call(pid, [lambda: conn.execute(defer)] * jobs)}
            out["fetch"] = per_call(pid, [fetched] * jobs)  # all N waiting at first
            finish = "SELECT procrastinate_finish_job_v1(%s, 'succeeded', false)"
            out["finish"] = per_call(pid, [lambda i=i: conn.execute(finish, (i,)) for i in ids])

            def one_waiting() -> None:
                conn.execute(defer)
                fetched()

            both = per_call(pid, [one_waiting] * jobs)  # what a drained queue sees
            out["fetch, one waiting"] = round(both - out["defer"], 3)
            return out
    finally:
        drop_pg_database(ADMIN, name)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--jobs", type=int, default=3000)
    parser.add_argument("--behind", type=int, default=30, help="extra days of partitions")
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args()
    result = {
        "benchmark": "server CPU per statement of a job's life (ms)",
        "when": datetime.now(UTC).isoformat(timespec="seconds"),
        "jobs": args.jobs,
        "partitions_behind": args.behind,
        "planq": planq(args.jobs, args.behind),
        "procrastinate": procrastinate(args.jobs),
    }
    for system in ("planq", "procrastinate"):
        steps = result[system]
        total = round(sum(v for k, v in steps.items() if k != "fetch"), 3)  # a drained queue
        shown = ", ".join(f"{k} {v:.3f}" for k, v in steps.items())
        print(f"{system:<14} {shown}; a job {total:.3f} ms")
    if args.out:
        args.out.write_text(json.dumps(result, indent=2) + "\n")


if __name__ == "__main__":
    main()
