#!/usr/bin/env python
"""What a leaner ledger path would cost: a PROTOTYPE, measured against planq's own path.

Nothing here is used by planq. It answers "how much of a job's cost is the ledger's
work, and how much is the way it is done?" by running, in one process, against a
throw-away PostgreSQL ledger (same schema, store.migrate), for N jobs each:

  worker side (the task body, `noop` executor):
    current       runtime.worker.run_job(job_id)                     planq as it is
    no-preping    the same code, engine built with pool_pre_ping=False
    lean-core     2 transactions x (UPDATE job RETURNING + UPDATE plan RETURNING), Core
                  statements, no ORM Session/identity map; portable (SQLite 3.35+ too)
    lean-cte      2 autocommit statements (a data-modifying CTE per transition), PG only

  producer side (queue the phase, publish, stamp dispatched):
    current       execute_plan.delay(plan_id)
    lean-cte      1 autocommit CTE (UPDATE plan + INSERT job), publish, 1 autocommit UPDATE

For each: wall ms per job (p50, mean), client CPU ms per job (this process), PostgreSQL CPU
ms per job (all postgres processes, from /proc) and database round trips per job.
The lean variants keep planq's semantics for the happy path (CAS on the job status, plan
moved in the same transaction, domain objects validated with pydantic, a tracked
cancellation token); the unhappy paths (zero rows updated, plan moved on) would fall
back to today's code, so their cost is not measured here.

Usage:
  .venv/bin/python bench/lean_path.py [--jobs 500]
"""

from __future__ import annotations

import argparse
import contextlib
import os
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from bench.lean_ledger import LeanLedger  # noqa: E402
from bench.throughput import (  # noqa: E402
    _TICK,
    create_pg_database,
    drop_pg_database,
    percentile,
    seed_plans,
)


def postgres_ticks() -> int:
    total = 0
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            raw = Path(entry.path, "stat").read_text()
        except OSError:
            continue
        if not raw[raw.index("(") + 1 :].startswith("postgres"):
            continue
        fields = raw[raw.rindex(")") + 2 :].split()
        total += int(fields[11]) + int(fields[12])
    return total


class RoundTrips:
    """Counts client->server round trips (statements and BEGIN/COMMIT) made by psycopg."""

    def __init__(self) -> None:
        from psycopg import _connection_base as cb
        from psycopg import cursor as cursor_mod

        self.n = 0
        orig_cmd = cb.BaseConnection._exec_command
        orig_exec = cursor_mod.Cursor.execute
        counter = self

        def exec_command(self: Any, *a: Any, **k: Any) -> Any:
            counter.n += 1
            return orig_cmd(self, *a, **k)

        def execute(self: Any, *a: Any, **k: Any) -> Any:
            counter.n += 1
            return orig_exec(self, *a, **k)

        cb.BaseConnection._exec_command = exec_command
        cursor_mod.Cursor.execute = execute


def measure(
    name: str, items: list[Any], fn: Callable[[Any], Any], rt: RoundTrips
) -> dict[str, Any]:
    walls: list[float] = []
    rt.n = 0
    pg0, cpu0 = postgres_ticks(), time.process_time()
    for item in items:
        t = time.perf_counter()
        fn(item)
        walls.append(time.perf_counter() - t)
    cpu = time.process_time() - cpu0
    pg = (postgres_ticks() - pg0) / _TICK
    n = len(items)
    return {
        "variant": name,
        "wall_p50_ms": percentile([w * 1000 for w in walls], 50),
        "wall_mean_ms": statistics.fmean(walls) * 1000,
        "client_cpu_ms": cpu * 1000 / n,
        "postgres_cpu_ms": pg * 1000 / n,
        "round_trips": rt.n / n,
    }


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--jobs", type=int, default=500, help="jobs per variant (500)")
    p.add_argument("--redis-url", default="redis://127.0.0.1:6379/14")
    p.add_argument("--pg-admin-url", default="postgresql://postgres@127.0.0.1:5432/postgres")
    args = p.parse_args(argv)

    import redis

    broker = redis.Redis.from_url(args.redis_url)
    broker.flushdb()
    db_name, url = create_pg_database(args.pg_admin_url)
    rows: list[dict[str, Any]] = []
    try:
        from store.migrate import upgrade

        upgrade(url)
        warm = 20
        worker_variants = ["current", "no-preping", "lean-core", "lean-cte"]
        producer_variants = ["current", "lean-cte"]
        n_plans = (warm + args.jobs) * (len(worker_variants) + len(producer_variants))
        plan_ids = iter(seed_plans(url, n_plans))
        os.environ.update(
            PLANQ_BROKER_URL=args.redis_url, PLANQ_DATABASE_URL=url, PLANQ_DEFAULT_EXECUTOR="noop"
        )
        from domain.cancellation import CancellationToken
        from domain.jobs import AsyncJob
        from domain.plans import Plan, PlanPhase
        from store.database import make_engine
        from tasks.executors import JobContext, noop
        from tasks.runtime import reset_runtime, runtime_for
        from worker_config.app import create_app

        app = create_app()
        task = app.tasks["planq.execute_plan"]
        runtime = runtime_for(app)
        lean = LeanLedger(url)
        tracker = runtime.worker.tracker
        rt = RoundTrips()

        def queued_jobs(n: int) -> list[str]:
            return [task.delay(next(plan_ids)).id for _ in range(n)]

        def lean_body(claim: Callable[[str, str], tuple[Any, Any]], finish: Callable[..., None]):
            def body(job_id: str) -> None:
                job_row, plan_row = claim(job_id, runtime.worker.worker_id)
                job = AsyncJob.model_validate(dict(job_row))
                plan = Plan.model_validate(dict(plan_row))
                token = tracker.track(job.job_id)
                try:
                    noop(JobContext(job=job, token=token or CancellationToken(), plan=plan))
                finally:
                    tracker.untrack(job.job_id)
                finish(job.job_id, job.plan_id, job.phase.value)

            return body

        worker_fns: dict[str, Callable[[str], Any]] = {
            "current": runtime.worker.run_job,
            "no-preping": runtime.worker.run_job,
            "lean-core": lean_body(lean.claim_core, lean.finish_core),
            "lean-cte": lean_body(lean.claim_cte, lambda jid, *_: lean.finish_cte(jid)),
        }
        original_engine = runtime.db.engine
        for variant in worker_variants:
            if variant == "no-preping":
                runtime.db.engine = make_engine(url, pool_pre_ping=False)
            fn = worker_fns[variant]
            for job_id in queued_jobs(warm):
                fn(job_id)
            jobs = queued_jobs(args.jobs)
            rows.append({"side": "worker", **measure(variant, jobs, fn, rt)})
            if variant == "no-preping":
                runtime.db.engine.dispose()
                runtime.db.engine = original_engine

        publish_job = task.publish_job

        def lean_delay(plan_id: str) -> None:
            job = AsyncJob(plan_id=plan_id, phase=PlanPhase.execute)
            if not lean.queue_cte(plan_id, job):
                raise RuntimeError(f"plan {plan_id} not queued")
            publish_job(job)
            lean.mark_dispatched(job.job_id)

        producer_fns: dict[str, Callable[[str], Any]] = {
            "current": task.delay,
            "lean-cte": lean_delay,
        }
        for variant in producer_variants:
            fn = producer_fns[variant]
            for _ in range(warm):
                fn(next(plan_ids))
            ids = [next(plan_ids) for _ in range(args.jobs)]
            rows.append({"side": "producer", **measure(variant, ids, fn, rt)})

        reset_runtime(app)
        lean.engine.dispose()
    finally:
        with contextlib.suppress(Exception):
            broker.flushdb()
        drop_pg_database(args.pg_admin_url, db_name)

    header = (
        f"{'side':<9} {'variant':<11} {'wall p50':>9} {'wall mean':>9} {'client CPU':>10} "
        f"{'PG CPU':>7} {'round trips':>11}"
    )
    print(f"per job, ms (N={args.jobs})")
    print(header)
    print("-" * len(header))
    for r in rows:
        print(
            f"{r['side']:<9} {r['variant']:<11} {r['wall_p50_ms']:>9.2f} {r['wall_mean_ms']:>9.2f} "
            f"{r['client_cpu_ms']:>10.2f} {r['postgres_cpu_ms']:>7.2f} {r['round_trips']:>11.1f}"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
