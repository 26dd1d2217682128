"""Flower watches a real fleet: `celery -A worker_config flower` beside a prefork worker.

Flower runs as docker-compose.yml runs it (basic auth from FLOWER_BASIC_AUTH), and the
compose file's worker and Flower healthchecks are run here against the real processes.
"""

from __future__ import annotations

import os
import re
import shutil
import socket
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from celery import Celery

from planq.domain.jobs import AsyncJobStatus
from planq.domain.plans import Plan, PlanPhase, PlanStatus
from planq.tasks.runtime import Runtime, reset_runtime, runtime_for
from tests.acceptance.conftest import EXEC, StartWorker
from tests.acceptance.flower_support import (
    FlowerServer,
    StartFlower,
)
from tests.celery_support import (
    WorkerProcess,
    make_app,
    wait_for_status,
    worker_env,
)
from tests.support import wait_for

pytestmark = pytest.mark.processes

CHROMIUM = Path("/usr/bin/chromium")
PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
STRATEGIZE = "planq.strategize_plan"


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


@pytest.fixture(scope="session")
def chromium() -> Path:
    """Debian's Chromium, installed with apt-get when missing (a failed install fails)."""
    if CHROMIUM.exists():
        return CHROMIUM
    apt = shutil.which("apt-get")
    if apt is None:
        pytest.fail(f"{CHROMIUM} is missing and there is no apt-get to install it")
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    install = [apt, "install", "-y", "-q", "chromium"]
    done = subprocess.run(install, env=env, capture_output=True, text=True, timeout=900)
    if done.returncode != 0:  # a stale or missing package list: update once and retry
        subprocess.run([apt, "update", "-q"], env=env, capture_output=True, timeout=600)
        done = subprocess.run(install, env=env, capture_output=True, text=True, timeout=900)
    if done.returncode != 0 or not CHROMIUM.exists():
        pytest.fail(f"apt-get install chromium failed ({done.returncode}):\n{done.stderr[-3000:]}")
    return CHROMIUM


def headless(chromium: Path, profile: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """Run headless Chromium with no network beyond the page asked for."""
    command = [
        str(chromium),
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-quic",
        "--no-first-run",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        "--hide-scrollbars",
        f"--user-data-dir={profile}",
        "--window-size=1400,900",
        "--virtual-time-budget=10000",  # let the page's AJAX fill the table first
        *args,
    ]
    return subprocess.run(command, capture_output=True, text=True, timeout=120)


@pytest.mark.timeout(1200)  # the first run may install Chromium
def test_flower_dashboard_screenshot(
    chromium: Path,
    producer: Celery,
    runtime: Runtime,
    start_worker: StartWorker,
    start_flower: StartFlower,
    tmp_path: Path,
) -> None:
    flower = start_flower(basic_auth=False)
    worker = start_worker("worker")
    wait_for_worker(flower, f"worker@{socket.gethostname()}")
    plan = Plan.with_steps(["survey", "score", "write"], name="nightly-rebalance")
    runtime.plans.add(plan)
    job_ids = []
    for phase in PlanPhase:  # one plan through all three phases, then two more strategize
        job_id = producer.tasks[f"planq.{phase.value}_plan"].delay(plan.plan_id).id
        succeeded(runtime, job_id, worker)
        job_ids.append(job_id)
    stored = runtime.plans.get(plan.plan_id)
    assert stored is not None and (stored.phase, stored.status) == (
        PlanPhase.apply,
        PlanStatus.complete,
    )
    job_ids += [job for job, _ in strategize(producer, runtime, 2)]
    wait_for_tasks(flower, job_ids)

    page = f"{flower.url}/tasks"
    dom = headless(chromium, tmp_path / "profile-dom", "--dump-dom", page)
    assert dom.returncode == 0, dom.stderr[-2000:]
    for job_id in job_ids:  # the table the screenshot shows really lists the jobs
        assert job_id in dom.stdout

    shot = tmp_path / "flower-dashboard.png"
    taken = headless(chromium, tmp_path / "profile-shot", f"--screenshot={shot}", page)
    assert taken.returncode == 0, taken.stderr[-2000:]
    data = shot.read_bytes()
    assert data.startswith(PNG_SIGNATURE)
    assert len(data) > 10_000, f"a {len(data)}-byte screenshot is blank"


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
