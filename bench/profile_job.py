#!/usr/bin/env python
"""Where a planq job's time goes: the producer call and the task body, in one process.

No worker is started. For N plans in Strategize/COMPLETE on a throw-away PostgreSQL
database, this times and profiles (cProfile) the two halves of a job separately:

  producer  execute_plan.delay(plan_id)       (ledger transaction + publish + dispatched stamp)
  worker    runtime.worker.run_job(job_id)    (the task body, `noop` executor)

and counts the SQL statements and transactions of each half (SQLAlchemy events). The
published messages are left in the dedicated Redis db, which is flushed at the end.

Usage:
  .venv/bin/python bench/profile_job.py [--jobs 500] [--top 30] [--sort cumulative]
"""

from __future__ import annotations

import argparse
import contextlib
import cProfile
import io
import os
import pstats
import statistics
import sys
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from bench.throughput import (  # noqa: E402
    create_pg_database,
    drop_pg_database,
    percentile,
    seed_plans,
)


class SqlCounter:
    """Counts statements, BEGINs and COMMITs on an engine, and pool checkouts."""

    def __init__(self, engine: Any) -> None:
        from sqlalchemy import event

        self.counts: Counter[str] = Counter()
        event.listen(engine, "before_cursor_execute", self._stmt)
        event.listen(engine, "commit", lambda *_: self.counts.update(["COMMIT"]))
        event.listen(engine, "begin", lambda *_: self.counts.update(["BEGIN"]))
        event.listen(engine.pool, "checkout", lambda *_: self.counts.update(["pool checkout"]))

    def _stmt(self, _conn: Any, _cursor: Any, statement: str, *_: Any) -> None:
        words = statement.split()
        verb = words[0].upper() if words else "?"
        if verb == "SELECT" and "async_jobs" in statement:
            verb = "SELECT async_jobs"
        elif verb == "SELECT" and "plans" in statement:
            verb = "SELECT plans"
        elif verb in ("UPDATE", "INSERT") and len(words) > 2:
            verb = f"{verb} {words[2] if verb == 'INSERT' else words[1]}"
        self.counts[verb] += 1

    def take(self) -> Counter[str]:
        out, self.counts = self.counts, Counter()
        return out


def summarise(name: str, seconds: list[float]) -> str:
    ms = [s * 1000 for s in seconds]
    return (
        f"{name:<9} n={len(ms)} p50={percentile(ms, 50):.2f}ms p99={percentile(ms, 99):.2f}ms "
        f"mean={statistics.fmean(ms):.2f}ms"
    )


def profile_report(prof: cProfile.Profile, sort: str, top: int) -> str:
    buf = io.StringIO()
    pstats.Stats(prof, stream=buf).strip_dirs().sort_stats(sort).print_stats(top)
    return buf.getvalue()


def by_package(prof: cProfile.Profile) -> list[tuple[str, float]]:
    """Self time (tottime) grouped by library layer: where the CPU actually burns."""
    stats = pstats.Stats(prof)
    groups: Counter[str] = Counter()
    for (filename, _line, func), (_cc, _nc, tottime, _ct, _callers) in stats.stats.items():  # type: ignore[attr-defined]
        path = filename.replace("\\", "/")
        if "site-packages/" in path:
            parts = path.split("site-packages/", 1)[1].split("/")
            key = "/".join(parts[:2]) if parts[0] == "sqlalchemy" else parts[0]
        elif path.startswith(str(ROOT)):
            key = "planq:" + path[len(str(ROOT)) + 1 :].split("/")[0]
        elif filename == "~":
            key = f"builtin:{func.split(' ')[0][:40]}"
            if "poll" in func or "select" in func or "recv" in func or "send" in func:
                key = "builtin:socket/poll"
        else:
            key = "stdlib"
        groups[key] += tottime
    total = sum(groups.values()) or 1.0
    return [(k, v / total) for k, v in groups.most_common(20)]


@contextlib.contextmanager
def planq_on_throwaway(
    redis_url: str, admin_url: str, plans: int, **env: str
) -> Iterator[tuple[Any, list[str]]]:
    """A planq app on a throw-away ledger with `plans` plans seeded; all gone after.

    The Redis db is flushed before and after; env (PLANQ_*, BENCH_*) is set first.
    """
    import redis

    broker = redis.Redis.from_url(redis_url)
    broker.flushdb()
    db_name, url = create_pg_database(admin_url)
    try:
        from planq.store.migrate import upgrade

        upgrade(url)
        plan_ids = seed_plans(url, plans)
        os.environ.update(PLANQ_BROKER_URL=redis_url, PLANQ_DATABASE_URL=url, **env)
        from planq.tasks.runtime import reset_runtime
        from planq.worker_config.bootstrap import bootstrap
        from planq.worker_config.settings import load_settings

        app = bootstrap(load_settings())
        try:
            yield app, plan_ids
        finally:
            reset_runtime(app)
    finally:
        with contextlib.suppress(Exception):
            broker.flushdb()
        drop_pg_database(admin_url, db_name)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--jobs", type=int, default=500)
    p.add_argument("--warmup", type=int, default=20)
    p.add_argument("--top", type=int, default=30)
    p.add_argument("--sort", default="cumulative")
    p.add_argument("--redis-url", default="redis://127.0.0.1:6379/14")
    p.add_argument("--pg-admin-url", default="postgresql://postgres@127.0.0.1:5432/postgres")
    p.add_argument("--no-profile", dest="profile", action="store_false", help="timings only")
    p.add_argument("--executor", default="noop")
    p.add_argument(
        "--timer",
        choices=["cpu", "wall"],
        default="cpu",
        help="profile CPU time (default: waits on the database do not count) or wall time",
    )
    args = p.parse_args(argv)

    from planq.tasks.runtime import runtime_for

    plans = args.warmup + args.jobs
    with planq_on_throwaway(
        args.redis_url, args.pg_admin_url, plans, PLANQ_DEFAULT_EXECUTOR=args.executor
    ) as (app, plan_ids):
        task = app.tasks["planq.execute_plan"]
        runtime = runtime_for(app)
        counter = SqlCounter(runtime.db.engine)

        for pid in plan_ids[: args.warmup]:
            runtime.worker.run_job(task.delay(pid).id)
        counter.take()

        measured = plan_ids[args.warmup :]
        timer = time.process_time if args.timer == "cpu" else time.perf_counter
        prod_prof, work_prof = cProfile.Profile(timer), cProfile.Profile(timer)
        prod_t: list[float] = []
        work_t: list[float] = []
        prod_sql: Counter[str] = Counter()
        work_sql: Counter[str] = Counter()
        for pid in measured:
            t = time.perf_counter()
            if args.profile:
                prod_prof.enable()
            job_id = task.delay(pid).id
            if args.profile:
                prod_prof.disable()
            prod_t.append(time.perf_counter() - t)
            prod_sql += counter.take()
            t = time.perf_counter()
            if args.profile:
                work_prof.enable()
            runtime.worker.run_job(job_id)
            if args.profile:
                work_prof.disable()
            work_t.append(time.perf_counter() - t)
            work_sql += counter.take()

        n = len(measured)
        print(summarise("producer", prod_t))
        print(summarise("worker", work_t))
        for label, c in (("producer", prod_sql), ("worker", work_sql)):
            per = ", ".join(f"{k}={v / n:g}" for k, v in sorted(c.items()))
            print(f"{label} SQL per job: {per}")
        if args.profile:
            print("\n==== producer: execute_plan.delay ====")
            print(profile_report(prod_prof, args.sort, args.top))
            print("\n==== worker: AsyncWorker.run_job ====")
            print(profile_report(work_prof, args.sort, args.top))
            for label, prof in (("producer", prod_prof), ("worker", work_prof)):
                print(f"\n==== {label}: self time by layer ====")
                for key, share in by_package(prof):
                    print(f"  {share * 100:5.1f}%  {key}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
