"""Flower's task table in headless Chromium, with the jobs of one plan's three phases in it.

A prefork worker runs one plan through strategize, execute and apply, and two more plans'
strategize; Flower (no basic auth, so the page loads without a prompt) lists them. The tab
is driven over the DevTools pipe: it waits until the table its script fills lists every job,
then takes the screenshot (into the test's temporary directory).
"""

from __future__ import annotations

import socket
from pathlib import Path

import pytest
from celery import Celery

from planq.domain.plans import Plan, PlanPhase, PlanStatus
from planq.tasks.runtime import Runtime
from tests.acceptance.conftest import StartWorker
from tests.acceptance.flower_support import (
    StartFlower,
    strategize,
    succeeded,
    wait_for_tasks,
    wait_for_worker,
)
from tests.browser_support import PNG_SIGNATURE, Browser
from tests.support import wait_for

pytestmark = pytest.mark.processes


@pytest.mark.timeout(1200)  # the first run may install Chromium
def test_flower_dashboard_screenshot(
    browser: Browser,
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

    browser.open(f"{flower.url}/tasks")
    listed = " && ".join(f"document.body.innerText.includes({i!r})" for i in job_ids)
    wait_for(  # the table the screenshot shows really lists the jobs
        lambda: browser.evaluate(f"!!document.body && {listed}"),
        timeout=30,
        interval=0.2,
        what="Flower's task table to list every job",
    )
    data = browser.screenshot(tmp_path / "flower-dashboard.png")
    assert data.startswith(PNG_SIGNATURE)
    assert len(data) > 10_000, f"a {len(data)}-byte screenshot is blank"
