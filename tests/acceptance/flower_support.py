"""Flower as the fleet runs it: the command line, an HTTP client, and waits on what it shows."""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import Any

import pytest
import requests
from celery import Celery

from planq.domain.jobs import AsyncJobStatus
from planq.domain.plans import Plan
from planq.tasks.runtime import Runtime
from tests.celery_support import CeleryProcess, WorkerProcess, wait_for_status
from tests.support import wait_for

STRATEGIZE = "planq.strategize_plan"

#: Test-only credentials for a Flower bound to 127.0.0.1 for one test.
FLOWER_USER, FLOWER_PASSWORD = "operator", "flower-test-only"


def flower_args(port: int) -> list[str]:
    """`celery -A worker_config` arguments that start Flower (tornado wants --name=value)."""
    return ["flower", f"--port={port}", "--address=127.0.0.1"]


def flower_command(port: int) -> list[str]:
    """The whole Flower command line this test runs."""
    return [sys.executable, "-m", "celery", "-A", "planq.worker_config", *flower_args(port)]


class FlowerServer:
    """A running Flower process and an HTTP client for it."""

    def __init__(self, process: CeleryProcess, port: int, basic_auth: bool) -> None:
        self.process = process
        self.port = port
        self.url = f"http://127.0.0.1:{port}"
        self.auth = (FLOWER_USER, FLOWER_PASSWORD) if basic_auth else None

    def get(self, path: str, auth: bool = True, **params: Any) -> requests.Response:
        """GET path (with the basic-auth credentials unless auth=False)."""
        if self.process.proc.poll() is not None:
            pytest.fail(f"Flower exited with {self.process.proc.returncode}:\n{self.log()}")
        return requests.get(
            self.url + path, params=params, auth=self.auth if auth else None, timeout=10
        )

    def api(self, path: str, **params: Any) -> Any:
        """GET an /api/ path and return its JSON."""
        response = self.get(path, **params)
        response.raise_for_status()
        return response.json()

    def log(self) -> str:
        """The end of Flower's log, for failure messages."""
        return self.process.log_tail(60)

    def answers(self) -> bool:
        """Whether /healthcheck says OK yet."""
        try:
            return self.get("/healthcheck", auth=False).text == "OK"
        except requests.ConnectionError:
            return False


StartFlower = Callable[..., FlowerServer]


def strategize(app: Celery, runtime: Runtime, count: int) -> list[tuple[str, str]]:
    """Queue count new plans' strategize jobs through app; (job id, plan id) pairs."""
    queued = []
    for i in range(count):
        plan = Plan.with_steps(["survey", "score"], name=f"flower-{i}")
        runtime.plans.add(plan)
        result = app.tasks[STRATEGIZE].delay(plan.plan_id)
        queued.append((result.id, plan.plan_id))
    return queued


def wait_for_worker(flower: FlowerServer, hostname: str) -> None:
    """Poll /api/workers (asking Flower to inspect) until hostname is listed."""
    wait_for(
        lambda: hostname in flower.api("/api/workers", refresh="1"),
        timeout=60,
        interval=0.5,
        what=f"Flower to list {hostname}",
    )


def wait_for_tasks(flower: FlowerServer, job_ids: list[str]) -> dict[str, Any]:
    """Poll /api/tasks until every job shows as SUCCESS with a runtime; return them."""

    def done() -> dict[str, Any] | None:
        tasks = flower.api("/api/tasks")
        shown = {i: tasks[i] for i in job_ids if i in tasks}
        finished = all(t["state"] == "SUCCESS" and t.get("runtime") for t in shown.values())
        return shown if len(shown) == len(job_ids) and finished else None

    return wait_for(done, timeout=60, interval=0.5, what=f"Flower to show {job_ids} succeeded")


def succeeded(runtime: Runtime, job_id: str, worker: WorkerProcess) -> None:
    """Wait for the job's ledger row to succeed; say where it stands if it does not."""
    try:
        wait_for_status(runtime.jobs, job_id, AsyncJobStatus.succeeded, timeout=60)
    except pytest.fail.Exception:
        job = runtime.jobs.get(job_id)
        status = None if job is None else job.status
        pytest.fail(f"job {job_id} is {status}, not succeeded; worker log:\n{worker.log_tail()}")
