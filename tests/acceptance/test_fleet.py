"""A fleet on this machine: 3 worker processes + beat + Flower, a producer in its own process.

The same commands docker-compose.yml runs (`celery -A worker_config worker|beat|flower`).
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest
from celery import Celery

from planq.domain.jobs import AsyncJobStatus
from planq.tasks.runtime import Runtime
from tests.acceptance.conftest import EXEC, StartBeat, StartFlower, StartWorker
from tests.celery_support import ROOT, worker_env
from tests.executors_for_tests import REDIS, runs_key
from tests.support import record_reliability, wait_for

pytestmark = [pytest.mark.processes, pytest.mark.heavy]
JOBS = 300


def test_three_workers_share_300_jobs_from_a_separate_producer(
    producer: Celery,
    runtime: Runtime,
    start_worker: StartWorker,
    start_beat: StartBeat,
    start_flower: StartFlower,
    redis_url: str,
    pg_url: str,
) -> None:
    settings = {"default_executor": f"{EXEC}:counted", "test_seconds": 0.05}
    workers = [start_worker(f"fleet{i}", concurrency=1, **settings) for i in (1, 2, 3)]
    start_beat()
    flower = start_flower(basic_auth=True)
    env = worker_env(redis_url, pg_url, **settings)
    t0 = time.monotonic()
    produced = subprocess.run(
        [sys.executable, "-m", "tests.acceptance.fleet_producer", str(JOBS)],
        env=env,
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
        check=True,
    )
    job_ids: list[str] = json.loads(produced.stdout.strip().splitlines()[-1])
    assert len(set(job_ids)) == JOBS

    def all_done() -> bool:
        return runtime.jobs.count(AsyncJobStatus.succeeded) == JOBS

    wait_for(all_done, timeout=240, interval=0.5, what=f"{JOBS} jobs to succeed")
    elapsed = time.monotonic() - t0
    rows = {j.job_id: j for j in runtime.jobs.list_all()}
    assert set(rows) == set(job_ids)
    assert all(r.status is AsyncJobStatus.succeeded for r in rows.values())
    assert all(int(REDIS.get(runs_key(i)) or 0) == 1 for i in job_ids)  # none ran twice

    # work spread over all three workers: each job names the prefork child that ran it
    pids_by_worker = {w.name: set(w.child_pids()) for w in workers}
    ran_on = {int(r.worker_id.rsplit("/", 1)[1]) for r in rows.values() if r.worker_id}
    for name, pids in pids_by_worker.items():
        assert pids & ran_on, f"{name} ran no job"

    # `planq jobs list` agrees with the ledger
    planq = str(Path(sys.executable).with_name("planq"))
    listed = subprocess.run(
        [planq, "jobs", "list", "--json", "--limit", "1000"],
        env=env,
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    page = json.loads(listed.stdout)
    assert page["total"] == len(job_ids)
    cli_rows = {row["job_id"]: row for row in page["jobs"]}
    assert set(cli_rows) == set(job_ids)
    assert {row["status"] for row in cli_rows.values()} == {"succeeded"}

    # Flower agrees too: every job is a SUCCESS task there, on one of the three nodes
    def flower_sees_all() -> dict[str, object] | None:
        tasks = flower.api("/api/tasks", limit=JOBS * 2, taskname="planq.strategize_plan")
        ok = {i for i, t in tasks.items() if t.get("state") == "SUCCESS"}
        return tasks if set(job_ids) <= ok else None

    tasks = wait_for(flower_sees_all, timeout=60, interval=1.0, what="Flower to see every job")
    nodes = {str(tasks[i]["worker"]).split("@")[0] for i in job_ids}  # type: ignore[index]
    assert nodes == {w.name for w in workers}
    # Beat ran its sweeps all along (every 1 s here), and none of them crowds Flower's list.
    shown = {str(t.get("name")) for t in flower.api("/api/tasks", limit=10_000).values()}
    assert shown == {"planq.strategize_plan"}, shown
    record_reliability("fleet: 3 workers, 300 jobs, separate producer", JOBS, 0, 0, elapsed)
