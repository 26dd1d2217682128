#!/usr/bin/env python
"""PostgreSQL's own CPU per statement of a job's life: planq's three against Procrastinate's.

No worker, no broker: one connection each, on throw-away databases, statements sent one
after another for N jobs, and the server CPU of that connection's backend (utime + stime
from /proc) divided by N. What a job costs the database, without the end-to-end run's
concurrency, polling and bookkeeping around it (bench/throughput.py measures those).

  planq          queue, claim, finish through SqlJobStore (the hot path as the workers
                 run it), after `--behind` extra days of partitions (a month of retention)
  --batch K      a what-if, not planq's path: the same three writes for K jobs per
                 statement (queue through delay_many's statement; claim and finish as the
                 hot path's statements with `job_id = ANY(...)`): what batching writes
                 across jobs would buy, which Celery's one-message-at-a-time delivery and
                 the fenced claim before each body do not allow today
  procrastinate  defer (procrastinate_defer_jobs_v1), fetch (procrastinate_fetch_job_v2)
                 with N jobs waiting and with one, finish (procrastinate_finish_job_v1), its
                 own SQL; "a job" adds defer, fetch with one waiting and finish

Usage:
  .venv/bin/python bench/statement_cost.py [--jobs 3000] [--behind 30] [--batch 8 ...] [--out FILE]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from sqlalchemy import TextClause, text

if TYPE_CHECKING:
    from planq.domain.jobs import AsyncJob
    from planq.store import Database
    from planq.store.sql_jobs import SqlJobStore

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


def per_call(pid: int | list[int], calls: list[Callable[[], object]]) -> float:
    """Server CPU (ms) per call, over all the calls, of one backend or several."""
    pids = pid if isinstance(pid, list) else [pid]
    before = sum(backend_cpu(p) for p in pids)
    for call in calls:
        call()
    return round(1000.0 * (sum(backend_cpu(p) for p in pids) - before) / _TICK / len(calls), 3)


@contextmanager
def ledger(
    jobs: int, behind: int
) -> Iterator[tuple[Database, SqlJobStore, list[AsyncJob], list[int]]]:
    """A throw-away planq ledger, its job store, `jobs` unqueued jobs and its backends' pids.

    One connection per engine (the hot one and the sessions'), both opened here, so the
    pids cover every statement the store sends.
    """
    from planq.domain.jobs import AsyncJob, serialize_job_payload
    from planq.domain.plans import PlanPhase
    from planq.store import Database, sql_ledger
    from planq.store.migrate import upgrade
    from planq.store.partitions import create_partitions

    name, url = create_pg_database(ADMIN, "planq_stmt")
    try:
        upgrade(url)
        db = Database(url, pool_size=1, max_overflow=0)
        with db.connection("bench") as conn:
            create_partitions(conn, datetime.now(UTC), behind=behind)
        with db.session() as session:  # the session engine's one connection, opened too
            session.execute(text("SELECT 1"))
        with db.connection("bench") as conn:
            pids = list(
                conn.exec_driver_sql(
                    "SELECT pid FROM pg_stat_activity WHERE datname = current_database()"
                    " AND backend_type = 'client backend'"
                ).scalars()
            )
        store, _ = sql_ledger(db)
        made = [
            AsyncJob(
                plan_id=plan_id,
                phase=PlanPhase.execute,
                payload_json=serialize_job_payload(plan_id, "execute"),
            )
            for plan_id in seed_plans(url, jobs)
        ]
        yield db, store, made, pids
        db.close()
    finally:
        drop_pg_database(ADMIN, name)


def now() -> datetime:
    return datetime.now(UTC)  # each write its own moment, as in a fleet


def planq(jobs: int, behind: int) -> dict[str, float]:
    """The hot path: one job per statement, as `delay()` and the workers send them."""
    from planq.domain.jobs import AsyncJobStatus

    with ledger(jobs, behind) as (_db, store, made, pids):
        return {
            "queue": per_call(pids, [lambda j=j: store.queue([j], now()) for j in made]),
            "claim": per_call(
                pids,
                [lambda j=j: store.claim(j.job_id, "w@h/1", now(), follow_plan=True) for j in made],
            ),
            "finish": per_call(
                pids,
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


def _batched(statement: TextClause) -> TextClause:
    """A hot-path statement for many jobs: `job_id = :job_id` becomes an array match."""
    sql = statement.text.replace("job_id = :job_id", "job_id = ANY(CAST(:job_ids AS varchar[]))")
    return text(sql.replace("LEFT JOIN plan ON true", "LEFT JOIN plan USING (plan_id)"))


def planq_batched(jobs: int, behind: int, size: int) -> dict[str, float]:
    """The what-if: server CPU per job when queue, claim and finish each cover `size` jobs."""
    from planq.domain.jobs import AsyncJobStatus
    from planq.store.driver import fetch_all
    from planq.store.partitions import JOBS, PartitionMap
    from planq.store.sql_hot_path import _pg_claim, _pg_finish

    with ledger(jobs, behind) as (db, store, made, pids):
        groups = [made[i : i + size] for i in range(0, len(made), size)]
        with db.connection("bench") as conn:
            home = PartitionMap(JOBS).home(conn, made[0].job_id)  # made in one day
        claim = _batched(_pg_claim(home))
        finish = _batched(_pg_finish(AsyncJobStatus.succeeded, home))

        def run(statement: TextClause, group: list[AsyncJob], **values: Any) -> None:
            ids = [j.job_id for j in group]
            with db.connection("bench") as conn:
                fetch_all(conn, statement, {"job_ids": ids, "now": now(), **values})

        fenced = {"worker_id": "w@h/1", "follow": True}

        def analyze() -> None:
            """Fresh statistics, as autovacuum keeps them.

            Else a status with no rows at the last ANALYZE looks rare, and the planner scans
            that status's index instead of the key.
            """
            with db.connection("bench") as conn:
                conn.exec_driver_sql(f"ANALYZE {home}")

        out = {"queue": per_call(pids, [lambda g=g: store.queue(g, now()) for g in groups])}
        analyze()
        out["claim"] = per_call(pids, [lambda g=g: run(claim, g, **fenced) for g in groups])
        analyze()
        out["finish"] = per_call(
            pids,
            [
                lambda g=g: run(finish, g, error=None, traceback=None, fenced=True, **fenced)
                for g in groups
            ],
        )
        with db.connection("bench") as conn:
            done = conn.exec_driver_sql(
                "SELECT count(*) FROM async_jobs WHERE status = 'succeeded'"
            ).scalar_one()
        assert done == len(made), f"{done} of {len(made)} jobs went through the batches"
        return {step: round(cost / size, 3) for step, cost in out.items()}


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
    parser.add_argument(
        "--batch", type=int, nargs="*", default=[], help="what-if batch sizes (jobs per statement)"
    )
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
    batched = {
        f"planq, {k} jobs a statement (what-if)": planq_batched(args.jobs, args.behind, k)
        for k in args.batch
    }
    result.update(batched)
    for system in ("planq", "procrastinate", *batched):
        steps = result[system]
        total = round(sum(v for k, v in steps.items() if k != "fetch"), 3)  # a drained queue
        shown = ", ".join(f"{k} {v:.3f}" for k, v in steps.items())
        print(f"{system:<14} {shown}; a job {total:.3f} ms")
    if batched:
        print("what-if rows: server CPU per job, each statement's cost divided by its jobs")
    if args.out:
        args.out.write_text(json.dumps(result, indent=2) + "\n")


if __name__ == "__main__":
    main()
