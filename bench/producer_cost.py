#!/usr/bin/env python
"""The producer's CPU per call: planq's `delay()` against raw Celery's `apply_async()`.

No worker runs. In one process, on the same Redis broker (a dedicated db, flushed before
and after) and the same PostgreSQL server, blocks of raw `bench.noop.apply_async()` and
of planq's `execute_plan.delay(plan_id)` (plans seeded in Strategize/COMPLETE on a
throw-away database) alternate, so drift on the machine falls on both alike. Each call's
CPU is `time.process_time()` around it (the database's own CPU is not the producer's);
the median over the blocks is reported, and the ratio planq/raw.

Then one cProfile of `delay()` (CPU timer) says where the rest goes, by stage (the
arguments' checks, the ledger row, the publish, the dispatched stamp, tracing) and by
library layer.

    .venv/bin/python bench/producer_cost.py [--calls 2000] [--blocks 10]
"""

from __future__ import annotations

import argparse
import cProfile
import pstats
import statistics
import sys
import time
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from bench.profile_job import by_package, planq_on_throwaway  # noqa: E402

#: The nested steps of `delay()`, outermost first: (what, file, function). Each line's
#: cumulative CPU includes the lines below it that it calls; the report subtracts.
STAGES: tuple[tuple[str, str, str], ...] = (
    ("delay() in all", "tasks/phase_tasks.py", "apply_async"),
    ("inside the producer span", "domain/lifecycle.py", "queue_phases"),
    ("the ledger row: queue statement and its models", "store/sql_jobs.py", "_queue"),
    ("the publish: message, kombu, redis", "tasks/publisher.py", "publish"),
)


def cpu_per_call(calls: list[Callable[[], Any]]) -> float:
    """Process CPU seconds per call over the list."""
    start = time.process_time()
    for call in calls:
        call()
    return (time.process_time() - start) / len(calls)


def stage_ms(prof: cProfile.Profile, calls: int) -> dict[str, float]:
    """Cumulative CPU ms per call of each stage's function."""
    stats: Any = pstats.Stats(prof)
    out: dict[str, float] = {}
    for what, path, function in STAGES:
        seconds = 0.0
        for (filename, _line, name), (_cc, _nc, _tt, cumulative, _c) in stats.stats.items():
            if filename.endswith(path) and name == function:
                seconds = max(seconds, cumulative)
        out[what] = seconds * 1e3 / calls
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--calls", type=int, default=2000, help="calls per system (2000)")
    p.add_argument("--blocks", type=int, default=10, help="alternating blocks (10)")
    p.add_argument("--redis-url", default="redis://127.0.0.1:6379/14")
    p.add_argument("--pg-admin-url", default="postgresql://postgres@127.0.0.1:5432/postgres")
    args = p.parse_args(argv)
    per_block = args.calls // args.blocks
    plans = per_block * (args.blocks + 2) + 50
    with planq_on_throwaway(
        args.redis_url, args.pg_admin_url, plans, BENCH_BROKER_URL=args.redis_url
    ) as (app, seeded):
        import bench.raw_app as raw_app

        plan_ids = iter(seeded)
        delay = app.tasks["planq.execute_plan"].delay
        apply_async = raw_app.app.tasks["bench.noop"].apply_async

        def planq_calls(n: int) -> list[Callable[[], Any]]:
            return [partial(delay, next(plan_ids)) for _ in range(n)]

        cpu_per_call([apply_async] * 50)  # warm both: connections, caches, prepared statements
        cpu_per_call(planq_calls(50))
        raw: list[float] = []
        planq: list[float] = []
        for _ in range(args.blocks):
            raw.append(cpu_per_call([apply_async] * per_block))
            planq.append(cpu_per_call(planq_calls(per_block)))
        raw_ms, planq_ms = statistics.median(raw) * 1e3, statistics.median(planq) * 1e3
        print(f"raw apply_async(): {raw_ms:.3f} ms CPU per call (median of {args.blocks} blocks)")
        print(f"planq delay():     {planq_ms:.3f} ms CPU per call")
        print(f"ratio planq/raw:   {planq_ms / raw_ms:.2f}  (target <= 1.5)")

        prof = cProfile.Profile(time.process_time)
        calls = planq_calls(per_block)
        prof.enable()
        for call in calls:
            call()
        prof.disable()
        stages = stage_ms(prof, len(calls))
        whole, span, row, publish = stages.values()
        print("\ndelay(), CPU ms per call under cProfile (which adds its own cost):")
        for what, ms in stages.items():
            print(f"  {ms:6.3f}  {what}")
        print(f"  {whole - span:6.3f}  = outside the span: the argument checks, runtime_for, span")
        print(f"  {span - row - publish:6.3f}  = the rest inside: plan checks, stamps, results")
        print("\ndelay(), self CPU by layer:")
        for key, share in by_package(prof):
            print(f"  {share * 100:5.1f}%  {key}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
