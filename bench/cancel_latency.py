"""Cancel latency: from `cancel_job()` in a producer to the token tripping in the worker.

Runs real `celery -A worker_config worker` processes on Redis with the ledger on
PostgreSQL, for the prefork and the threads pool, and prints p50/p95/p99/max.

    .venv/bin/python bench/cancel_latency.py --cancels 40
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

import psycopg

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.bench_executors import REDIS, started_key, tripped_key  # noqa: E402
from planq.domain.plans import Plan  # noqa: E402
from planq.store.migrate import upgrade  # noqa: E402
from planq.tasks.runtime import reset_runtime, runtime_for  # noqa: E402
from planq.worker_config.bootstrap import bootstrap  # noqa: E402
from planq.worker_config.settings import load_settings  # noqa: E402

BROKER = os.environ.get("PLANQ_BENCH_REDIS_URL", "redis://127.0.0.1:6379/12")
ADMIN = "postgresql://postgres@127.0.0.1:5432/postgres"


def wait(condition: Any, timeout: float, what: str) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = condition()
        if value:
            return value
        time.sleep(0.01)
    raise TimeoutError(what)


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def measure(pool: str, cancels: int, db_url: str, heartbeat: float) -> list[float]:
    env = dict(
        os.environ,
        PYTHONPATH=str(ROOT),
        PLANQ_BROKER_URL=BROKER,
        PLANQ_DATABASE_URL=db_url,
        PLANQ_HEARTBEAT_INTERVAL=str(heartbeat),
        PLANQ_JOB_TIMEOUT="60",
        PLANQ_DEFAULT_EXECUTOR="bench.bench_executors:cancellable",
    )
    log = open(Path(tempfile.gettempdir()) / f"planq-bench-cancel-{pool}.log", "wb")  # noqa: SIM115
    worker = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "celery",
            "-A",
            "planq.worker_config",
            "worker",
            "-P",
            pool,
            "-c",
            "2",
            "-n",
            f"bench-{pool}@%h",
            "--without-mingle",
            "--without-gossip",
            "-Q",
            "planq.strategize",
        ],
        env=env,
        cwd=ROOT,
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    app = bootstrap(
        load_settings(
            broker_url=BROKER, database_url=db_url, heartbeat_interval=heartbeat, job_timeout=60
        )
    )
    rt = runtime_for(app)
    latencies: list[float] = []
    try:
        wait(lambda: app.control.ping(timeout=0.5), 60, "worker ready")
        for _ in range(cancels):
            plan = Plan.with_steps(["wait"])
            rt.plans.add(plan)
            job_id = app.tasks["planq.strategize_plan"].delay(plan.plan_id).id
            wait(lambda j=job_id: REDIS.get(started_key(j)), 30, "job start")
            t0 = time.time()
            assert rt.worker.cancel_job(job_id)
            tripped = float(wait(lambda j=job_id: REDIS.get(tripped_key(j)), 30, "trip"))
            latencies.append(tripped - t0)
    finally:
        os.killpg(worker.pid, signal.SIGTERM)
        try:
            worker.wait(30)
        except subprocess.TimeoutExpired:
            os.killpg(worker.pid, signal.SIGKILL)
        reset_runtime(app)
        log.close()
    return latencies


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--cancels", type=int, default=40)
    parser.add_argument(
        "--heartbeat",
        type=float,
        default=5.0,
        help="heartbeat interval: latency well below it proves the fast path",
    )
    args = parser.parse_args()
    REDIS.flushdb()
    name = f"planq_bench_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(ADMIN, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    db_url = f"postgresql+psycopg://postgres@127.0.0.1:5432/{name}"
    results: dict[str, dict[str, float]] = {}
    try:
        upgrade(db_url)
        for pool in ("prefork", "threads"):
            lat = measure(pool, args.cancels, db_url, args.heartbeat)
            results[pool] = {
                "n": len(lat),
                "p50_ms": statistics.median(lat) * 1000,
                "p95_ms": percentile(lat, 0.95) * 1000,
                "p99_ms": percentile(lat, 0.99) * 1000,
                "max_ms": max(lat) * 1000,
            }
    finally:
        with psycopg.connect(ADMIN, autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
    print(f"{'pool':<8} {'n':>4} {'p50 ms':>8} {'p95 ms':>8} {'p99 ms':>8} {'max ms':>8}")
    for pool, r in results.items():
        print(
            f"{pool:<8} {r['n']:>4} {r['p50_ms']:>8.1f} {r['p95_ms']:>8.1f} "
            f"{r['p99_ms']:>8.1f} {r['max_ms']:>8.1f}"
        )
    out = ROOT / "bench" / "results"
    out.mkdir(exist_ok=True)
    (out / "cancel_latency.json").write_text(json.dumps(results, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
