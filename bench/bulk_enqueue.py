#!/usr/bin/env python
"""Bulk enqueue rates: planq's create_plans and delay_many against RQ and Procrastinate.

A script, not a test. Enqueue only: no worker consumes, so the producer is measured alone
(the broker db and the throw-away databases are emptied and dropped at the end). For each
batch size N (default 1,000 and 4,000), after one uncounted warm-up batch, every row times
one call that makes N jobs (or plans), `--rounds` times, and reports the median rate by
wall clock and by the producer's own CPU time (less sensitive to a loaded machine):

  planq create_plans     `client.create_plans(steps, names)`: N plans, one INSERT
  planq create_plan x N  the same plans one `create_plan` at a time (the old way)
  planq delay_many       `strategize_plan.delay_many(ids)`: N rows in one statement, then
                         the messages over one producer in pipelined chunks
                         (tasks/publisher.py); the dispatch stamps follow on their thread
  planq publish 1-by-1   the same N messages again through `send_task` one at a time
                         (the publish path before the pipeline), for comparison
  planq publish batch    the same N messages again through the pipelined path alone
  rq enqueue_many        RQ's `Queue.enqueue_many([Queue.prepare_data(...)] * N)` on
                         the same Redis (one pipeline)
  procrastinate batch_defer
                         Procrastinate's `task.batch_defer(*[{}] * N)` (one INSERT) on its
                         own throw-away database, through its sync connector

Usage:
  .venv/bin/pip install -e '.[bench]'   # Procrastinate and RQ
  .venv/bin/python bench/bulk_enqueue.py [--sizes 1000 4000] [--rounds 3] [--out FILE]
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.util
import json
import os
import statistics
import sys
import time
from collections.abc import Callable
from datetime import UTC, datetime
from functools import partial
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from bench.throughput import (  # noqa: E402  (ROOT on sys.path first)
    create_pg_database,
    drop_pg_database,
    log,
    machine_busy,
    machine_info,
    source_info,
)

DEFAULT_OUT = ROOT / "bench" / "results" / "bulk_enqueue.json"
RQ_QUEUE = "bench.rq"


def rq_noop() -> None:
    """RQ's job function (never run here: no RQ worker)."""


def timed(call: Callable[..., Any], *args: Any) -> tuple[float, float, Any]:
    """(wall seconds, this process's CPU seconds, result) of call(*args)."""
    wall, cpu = time.perf_counter(), time.process_time()
    result = call(*args)
    return time.perf_counter() - wall, time.process_time() - cpu, result


class Rows:
    """Rates per (row, size): the median of the rounds, by wall clock and by producer CPU."""

    def __init__(self) -> None:
        self.samples: dict[tuple[str, int], list[tuple[float, float]]] = {}

    def add(self, row: str, size: int, wall: float, cpu: float) -> None:
        self.samples.setdefault((row, size), []).append((wall, cpu))
        log(f"{row} N={size}: {size / wall:,.0f}/s wall, {size / max(cpu, 1e-9):,.0f}/s CPU")

    def skip(self, row: str, size: int, wall: float, cpu: float) -> None:
        """A warm-up sample: not kept."""

    def summary(self) -> list[dict[str, Any]]:
        out = []
        for (row, size), samples in self.samples.items():
            out.append(
                {
                    "row": row,
                    "n": size,
                    "per_s_wall": round(statistics.median(size / w for w, _ in samples), 1),
                    "per_s_cpu": round(statistics.median(size / max(c, 1e-9) for _, c in samples)),
                    "rounds": len(samples),
                    "wall_s": [round(w, 4) for w, _ in samples],
                }
            )
        return out


def create_one_by_one(app: Any, steps: list[Any], names: list[str]) -> None:
    """The plans one create_plan call at a time (the way before create_plans)."""
    from planq.worker_config import client

    for step, name in zip(steps, names, strict=False):
        client.create_plan(step, name, app=app)


def publish_one_by_one(rt: Any, jobs: list[Any]) -> None:
    """Each message through send_task (the publish path before the pipeline)."""
    for job in jobs:
        rt.publisher.send_one(job)


def bench_planq(args: Any, rows: Rows) -> None:
    """The planq rows, on a fresh migrated database and the bench's Redis db."""
    from planq.store.migrate import upgrade

    db_name, url = create_pg_database(args.pg_admin_url, "planq_bulk")
    try:
        upgrade(url)
        os.environ.update(PLANQ_BROKER_URL=args.redis_url, PLANQ_DATABASE_URL=url)
        from planq.tasks.runtime import reset_runtime, runtime_for
        from planq.worker_config import client
        from planq.worker_config.bootstrap import bootstrap
        from planq.worker_config.settings import load_settings

        app = bootstrap(load_settings())
        rt = runtime_for(app)
        task = app.tasks["planq.strategize_plan"]
        try:
            for size in [10, *args.sizes]:  # 10: the warm-up, not recorded
                for _ in range(1 if size == 10 else args.rounds):
                    record = rows.add if size != 10 else rows.skip
                    steps, names = [["scan", "score"]] * size, [f"bulk-{i}" for i in range(size)]
                    wall, cpu, made = timed(partial(client.create_plans, app=app), steps, names)
                    record("planq create_plans", size, wall, cpu)
                    one = min(size, args.one_by_one_max)
                    wall, cpu, _ = timed(create_one_by_one, app, steps[:one], names)
                    record("planq create_plan x N", one, wall, cpu)
                    wall, cpu, ids = timed(task.delay_many, [p.plan_id for p in made])
                    record("planq delay_many", size, wall, cpu)
                    rt.publisher.stamps.flush()
                    jobs = [job for job in map(rt.jobs.get, ids) if job is not None]
                    wall, cpu, _ = timed(publish_one_by_one, rt, jobs)
                    record("planq publish 1-by-1", size, wall, cpu)
                    wall, cpu, _ = timed(lambda jobs: list(rt.publisher.send(jobs)), jobs)
                    record("planq publish batch", size, wall, cpu)
                    flush_broker(args)
        finally:
            reset_runtime(app)
    finally:
        drop_pg_database(args.pg_admin_url, db_name)


def bench_rq(args: Any, rows: Rows) -> None:
    """RQ's enqueue_many on the same Redis db."""
    import redis
    from rq import Queue

    queue = Queue(RQ_QUEUE, connection=redis.Redis.from_url(args.redis_url))
    for size in [10, *args.sizes]:
        for _ in range(1 if size == 10 else args.rounds):
            data = [Queue.prepare_data(rq_noop) for _ in range(size)]
            wall, cpu, _ = timed(queue.enqueue_many, data)
            (rows.add if size != 10 else rows.skip)("rq enqueue_many", size, wall, cpu)
            flush_broker(args)


def bench_procrastinate(args: Any, rows: Rows) -> None:
    """Procrastinate's batch_defer on its own throw-away database."""
    db_name, dsn = create_pg_database(args.pg_admin_url, "procrastinate_bulk")
    try:
        os.environ["BENCH_PROCRASTINATE_DSN"] = dsn
        import bench.procrastinate_app as peer

        peer.app.open()
        try:
            peer.app.schema_manager.apply_schema()
            for size in [10, *args.sizes]:
                for _ in range(1 if size == 10 else args.rounds):
                    kwargs: list[dict[str, Any]] = [{}] * size
                    wall, cpu, _ = timed(peer.noop.batch_defer, *kwargs)
                    record = rows.add if size != 10 else rows.skip
                    record("procrastinate batch_defer", size, wall, cpu)
        finally:
            peer.app.close()
    finally:
        drop_pg_database(args.pg_admin_url, db_name)


def flush_broker(args: Any) -> None:
    """Drop the messages no worker will take (the next round starts from an empty db)."""
    import redis

    redis.Redis.from_url(args.redis_url).flushdb()


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--sizes", type=int, nargs="+", default=[1000, 4000], help="N (1000 4000)")
    p.add_argument("--rounds", type=int, default=3, help="rounds per size; median (3)")
    p.add_argument(
        "--one-by-one-max",
        type=int,
        default=1000,
        help="create_plan x N makes at most this many plans per round (1000)",
    )
    p.add_argument("--redis-url", default="redis://127.0.0.1:6379/14", help="dedicated db")
    p.add_argument("--pg-admin-url", default="postgresql://postgres@127.0.0.1:5432/postgres")
    p.add_argument("--out", type=Path, default=DEFAULT_OUT, help=f"JSON result ({DEFAULT_OUT})")
    p.add_argument("--only", choices=["planq", "rq", "procrastinate"], help="one system only")
    args = p.parse_args(argv)
    if args.rounds < 1 or any(n < 1 for n in args.sizes):
        p.error("--rounds and --sizes must be >= 1")
    for system, module in (("rq", "rq"), ("procrastinate", "procrastinate")):
        if args.only in (None, system) and importlib.util.find_spec(module) is None:
            p.error(f"{module} is not installed: pip install -e '.[bench]' (or --only planq)")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    flush_broker(args)
    busy = machine_busy(2.0)
    if busy > 25:
        log(f"WARNING: the machine is {busy:.0f}% busy before the run: expect noise")
    rows = Rows()
    try:
        if args.only in (None, "planq"):
            bench_planq(args, rows)
        if args.only in (None, "rq"):
            bench_rq(args, rows)
        if args.only in (None, "procrastinate"):
            bench_procrastinate(args, rows)
    finally:
        flush_broker(args)
    summary = rows.summary()
    out = {
        "benchmark": "bulk enqueue: planq create_plans / delay_many vs RQ and Procrastinate",
        "when": datetime.now(UTC).isoformat(timespec="seconds"),
        "command": " ".join([Path(sys.executable).name, *sys.argv]),
        "settings": {"sizes": args.sizes, "rounds": args.rounds, "broker": args.redis_url},
        "machine": {**machine_info(args), "busy_before_pct": busy},
        "source": source_info(),
        "results": summary,
        "target_jobs_per_s": 5000,  # issue 23
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(out, indent=2) + "\n")
    header = f"{'row':<28} {'N':>6} {'per s (wall)':>13} {'per s (CPU)':>12}"
    print(header)
    print("-" * len(header))
    for r in summary:
        print(f"{r['row']:<28} {r['n']:>6} {r['per_s_wall']:>13,.0f} {r['per_s_cpu']:>12,}")
    print(f"results: {args.out}")
    with contextlib.suppress(Exception):
        sys.stdout.flush()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
