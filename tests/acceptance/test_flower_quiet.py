"""Flower lists the work, not the sweeps: beat's maintenance tasks send no events (issue #13).

Beat publishes detect_stuck_jobs and relay_dispatch every second here; the worker runs
them (its log says so), yet Flower's task list holds only the phase job.
"""

from __future__ import annotations

from typing import Any

import pytest
from celery import Celery

from planq.domain.jobs import AsyncJobStatus
from planq.domain.plans import Plan
from planq.tasks.runtime import Runtime
from tests.acceptance.conftest import StartBeat, StartWorker
from tests.acceptance.flower_support import StartFlower
from tests.celery_support import wait_for_status
from tests.support import wait_for

pytestmark = pytest.mark.processes

SWEEPS = ("planq.maintenance.detect_stuck_jobs", "planq.maintenance.relay_dispatch")


def test_maintenance_sweeps_never_crowd_flowers_task_list(
    producer: Celery,
    runtime: Runtime,
    start_worker: StartWorker,
    start_beat: StartBeat,
    start_flower: StartFlower,
) -> None:
    flower = start_flower()
    worker = start_worker("w1")
    start_beat()

    def swept_three_times() -> bool:
        log = worker.log_tail(lines=2000)
        return all(log.count(f"Task {name}[") >= 3 for name in SWEEPS)

    wait_for(swept_three_times, timeout=90, interval=0.5, what="the worker to run the sweeps")

    plan = Plan.with_steps(["survey"])
    runtime.plans.add(plan)
    job_id = producer.tasks["planq.strategize_plan"].delay(plan.plan_id).id
    wait_for_status(runtime.jobs, job_id, AsyncJobStatus.succeeded, timeout=60)

    def listed() -> dict[str, Any]:
        tasks: dict[str, Any] = flower.api("/api/tasks")
        return tasks if job_id in tasks else {}

    tasks = wait_for(listed, timeout=60, interval=0.5, what="Flower to list the phase job")
    names = {task["name"] for task in tasks.values()}
    assert "planq.strategize_plan" in names
    assert not [n for n in names if n and n.startswith("planq.maintenance.")], names
