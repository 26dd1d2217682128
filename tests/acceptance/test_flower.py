"""Flower watches a real fleet: `celery -A worker_config flower` beside a prefork worker.

Flower runs as docker-compose.yml runs it (basic auth from FLOWER_BASIC_AUTH), and the
compose file's worker and Flower healthchecks are run here against the real processes.
"""

from __future__ import annotations

import os
import re
import socket
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from celery import Celery

from planq.domain.jobs import AsyncJobStatus
from planq.domain.plans import Plan
from planq.tasks.runtime import Runtime, reset_runtime, runtime_for
from tests.acceptance.conftest import EXEC, StartWorker
from tests.acceptance.flower_support import (
    STRATEGIZE,
    FlowerServer,
    StartFlower,
    strategize,
    succeeded,
    wait_for_tasks,
    wait_for_worker,
)
from tests.celery_support import (
    make_app,
    wait_for_status,
    worker_env,
)
from tests.support import wait_for

pytestmark = pytest.mark.processes


def compose_healthcheck(service: str) -> list[str]:
    """The compose file's healthcheck for service, as compose hands it to the container."""
    from tests.unit.test_compose import interpolate, load_compose

    test = load_compose()["services"][service]["healthcheck"]["test"]
    args = [interpolate(a, {}) for a in test[1:]]
    return ["sh", "-c", *args] if test[0] == "CMD-SHELL" else args


def test_flower_shows_workers_jobs_and_metrics(
    producer: Celery,
    runtime: Runtime,
    start_worker: StartWorker,
    start_flower: StartFlower,
    redis_url: str,
    pg_url: str,
) -> None:
    flower = start_flower()
    worker = start_worker("worker")  # the compose worker's name: worker@%h
    hostname = f"worker@{socket.gethostname()}"
    wait_for_worker(flower, hostname)
    assert flower.get("/api/workers", auth=False).status_code == 401
    assert flower.get("/healthcheck", auth=False).text == "OK"

    # A producer with a site redaction pattern: Flower must show its kwargsrepr, not the id.
    secretive = make_app(
        redis_url,
        pg_url,
        default_executor=f"{EXEC}:counted",
        redaction_patterns=[r"'plan_id': '(?P<secret>[^']+)'"],
    )
    try:
        queued = {app: strategize(app, runtime, n) for app, n in ((producer, 2), (secretive, 1))}
        redactors = {
            job: runtime_for(app).redactor for app, jobs in queued.items() for job, _ in jobs
        }
    finally:
        reset_runtime(secretive)
    pairs = [pair for jobs in queued.values() for pair in jobs]
    job_ids = [job for job, _ in pairs]
    for job_id in job_ids:
        succeeded(runtime, job_id, worker)

    tasks = wait_for_tasks(flower, job_ids)
    for job_id, plan_id in pairs:
        task = tasks[job_id]
        assert task["name"] == STRATEGIZE
        assert task["worker"] == hostname
        assert task["runtime"] > 0
        expected = redactors[job_id](repr({"job_id": job_id, "plan_id": plan_id}))
        assert task["kwargs"] == expected
        assert task["args"] == "()"
    hidden = [job for job, _ in queued[secretive]]
    for job_id, plan_id in pairs:
        assert (plan_id in tasks[job_id]["kwargs"]) is (job_id not in hidden)

    line = re.compile(
        r'^flower_events_total\{task="planq\.strategize_plan",type="task-succeeded",'
        rf'worker="{re.escape(hostname)}"\}} (?P<count>[0-9.]+)$',
        re.MULTILINE,
    )

    def counted() -> bool:
        m = line.search(flower.get("/metrics", auth=False).text)
        return m is not None and float(m["count"]) >= len(job_ids)

    wait_for(counted, timeout=30, interval=0.5, what="flower_events_total task-succeeded")

    # docker-compose.yml's healthchecks, run against these real processes.
    env = {**worker_env(redis_url, pg_url), "HOSTNAME": socket.gethostname()}
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
    for service, replace in (("worker", {}), ("flower", {"5555": str(flower.port)})):
        args = compose_healthcheck(service)
        for old, new in replace.items():
            args = [a.replace(old, new) for a in args]
        check = subprocess.run(args, env=env, capture_output=True, text=True, timeout=60)
        assert check.returncode == 0, f"{service} healthcheck: {check.stdout}{check.stderr}"


def flower_state(flower: FlowerServer, job_id: str, state: str) -> dict[str, Any] | None:
    """The job's task in Flower's API once it shows `state`."""
    task = flower.api("/api/tasks").get(job_id)
    return task if task is not None and task["state"] == state else None


def test_flower_shows_the_ledgers_truth(
    producer: Celery,
    runtime: Runtime,
    start_worker: StartWorker,
    start_flower: StartFlower,
) -> None:
    flower = start_flower()
    worker = start_worker("truth", default_executor=f"{EXEC}:by_plan_name")
    wait_for_worker(flower, f"truth@{socket.gethostname()}")
    plans = {}
    for name in ("ok", "fail", "slow"):
        plan = Plan.with_steps(["one"], name=name)
        runtime.plans.add(plan)
        plans[name] = producer.tasks[STRATEGIZE].delay(plan.plan_id).id
    # A recoverable run that ends Failed (a bad param): FAILURE, as a failed job is.
    failed_run = producer.tasks["planq.runs.ledger_consistency"].delay({"batch_size": "0"}).id
    wait_for_status(runtime.jobs, plans["slow"], AsyncJobStatus.running, timeout=60)
    producer.control.revoke(plans["slow"])  # Flower's own button sends exactly this
    for name, status in (
        ("ok", AsyncJobStatus.succeeded),
        ("fail", AsyncJobStatus.failed),
        ("slow", AsyncJobStatus.cancelled),
    ):
        try:
            wait_for_status(runtime.jobs, plans[name], status, timeout=60)
        except pytest.fail.Exception:
            pytest.fail(f"{name}: not {status.value}; worker log:\n{worker.log_tail()}")

    def shown(name: str, state: str) -> dict[str, Any]:
        return wait_for(
            lambda: flower_state(flower, plans[name], state),
            timeout=30,
            interval=0.5,
            what=f"Flower to show the {name} job as {state}",
        )

    assert shown("ok", "SUCCESS")["result"] == "'succeeded'"
    failed = shown("fail", "FAILURE")
    assert failed["exception"].startswith("PhaseJobFailed(")
    assert "PermissionError" in failed["exception"] and "REDACTED" in failed["exception"]
    assert "SECRETVALUE123" not in str(failed)
    shown("slow", "REVOKED")
    plans["run"] = failed_run
    run = shown("run", "FAILURE")
    assert run["exception"].startswith('RunFailed("ledger_consistency param batch_size'), run
    assert "(run_id=" in run["exception"]
    everything = str(flower.api("/api/tasks"))
    assert "SECRETVALUE123" not in everything
