#!/usr/bin/env python
"""The group commit's own cost: one runner, many threads, no Celery.

Jobs are queued on a throw-away PostgreSQL ledger, then `--threads` threads run them
straight through one `AsyncWorker` (no-op executor) with the group commit's window at
`--window` ms and at 0 (every claim and finish alone), alternating, `--rounds` each. Per
row: jobs/s, the process's CPU per job (this process is the whole client: the job
threads and the group commit), and what the committer sent (batches, the largest).
Celery's consumer is left out on purpose: it hands a threads pool one message at a time,
which decides how many jobs meet in a window (docs/group_commit.md).

    .venv/bin/python bench/group_commit_cost.py [--jobs 2000] [--threads 16] [--window 2]
"""

from __future__ import annotations

import argparse
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from bench.throughput import create_pg_database, drop_pg_database, seed_plans  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--jobs", type=int, default=2000, help="jobs per row (2000)")
    p.add_argument("--threads", type=int, default=16, help="job threads (16)")
    p.add_argument("--window", type=float, default=2.0, help="group commit window, ms (2)")
    p.add_argument("--rounds", type=int, default=2, help="rows per window, alternating (2)")
    p.add_argument("--pg-admin-url", default="postgresql://postgres@127.0.0.1:5432/postgres")
    args = p.parse_args(argv)

    from planq.domain.clock import utcnow
    from planq.domain.config import AsyncWorkerConfig
    from planq.domain.jobs import AsyncJob
    from planq.domain.plans import PlanPhase
    from planq.store import Database, sql_ledger
    from planq.store.migrate import upgrade
    from planq.tasks.engine import AsyncWorker

    windows = [args.window, 0.0] * args.rounds
    name, url = create_pg_database(args.pg_admin_url)
    try:
        upgrade(url)
        plan_ids = iter(seed_plans(url, args.jobs * len(windows)))
        db = Database(url)
        jobs, plans = sql_ledger(db)
        for window in windows:
            worker = AsyncWorker(
                AsyncWorkerConfig(max_workers=args.threads),
                jobs,
                lambda _ctx: None,
                plans,
                group_commit_ms=window,
            )
            queued = []
            for _ in range(args.jobs):
                job = AsyncJob(plan_id=next(plan_ids), phase=PlanPhase.execute)
                jobs.queue([job], utcnow())
                queued.append(job.job_id)
            cpu, wall = time.process_time(), time.perf_counter()
            with ThreadPoolExecutor(args.threads) as pool:
                list(pool.map(worker.run_job, queued))
            cpu_ms = (time.process_time() - cpu) / args.jobs * 1e3
            rate = args.jobs / (time.perf_counter() - wall)
            s = worker.commits.stats
            print(
                f"window {window:g} ms, {args.threads} threads: {rate:5.0f} jobs/s, "
                f"client CPU {cpu_ms:.3f} ms/job; batches {s.claim_batches} claim / "
                f"{s.finish_batches} finish (largest {s.largest})"
            )
            worker.close()
        db.close()
    finally:
        drop_pg_database(args.pg_admin_url, name)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
