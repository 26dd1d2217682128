"""The worker serves planq's Prometheus metrics, summed over its prefork children."""

from __future__ import annotations

from datetime import timedelta

import pytest
import requests
from celery import Celery
from prometheus_client.parser import text_string_to_metric_families

from planq.domain.clock import utcnow
from planq.domain.jobs import AsyncJobStatus
from planq.domain.plans import PipelineState, Plan, PlanPhase, PlanStatus
from planq.tasks.runtime import Runtime
from tests.acceptance.conftest import EXEC, StartWorker
from tests.celery_support import wait_for_status
from tests.resources import free_port
from tests.support import wait_for

pytestmark = pytest.mark.processes


def samples(port: int) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    text = requests.get(f"http://127.0.0.1:{port}/metrics", timeout=5).text
    out = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            out[(sample.name, tuple(sorted(sample.labels.items())))] = sample.value
    return out


def test_worker_metrics_count_jobs_from_every_child(
    producer: Celery, runtime: Runtime, start_worker: StartWorker
) -> None:
    port = free_port()
    start_worker("w1", concurrency=2, metrics_port=port, default_executor=f"{EXEC}:counted")
    ids = []
    for _ in range(6):
        plan = Plan.with_steps(["x"])
        runtime.plans.add(plan)
        ids.append(producer.tasks["planq.strategize_plan"].delay(plan.plan_id).id)
    for job_id in ids:
        wait_for_status(runtime.jobs, job_id, AsyncJobStatus.succeeded, timeout=60)
    workers = {runtime.jobs.get(i).worker_id for i in ids}  # type: ignore[union-attr]
    assert len(workers) == 2  # both prefork children ran jobs; the scrape must sum them

    key = ("planq_jobs_total", (("phase", "strategize"), ("status", "succeeded")))
    got = wait_for(lambda: samples(port).get(key) == 6.0, timeout=15, what="6 jobs counted")
    assert got
    scraped = samples(port)
    count = ("planq_job_duration_seconds_count", (("phase", "strategize"),))
    assert scraped[count] == 6.0
    assert ("planq_stuck_jobs_detected_total", ()) in scraped

    # The gate gauges come from the ledger at each scrape, whoever decides: a plan that
    # waits at its approval gate shows in the worker's endpoint without passing through it.
    assert scraped[("planq_plans_awaiting_approval", ())] == 0.0
    waiting = Plan.with_steps(["x"])
    runtime.plans.add(waiting)
    waiting.phase, waiting.status = PlanPhase.execute, PlanStatus.complete
    waiting.pipeline_through = waiting.pipeline_gate = PlanPhase.apply
    waiting.pipeline_state = PipelineState.awaiting_approval
    waiting.updated_at = utcnow() - timedelta(minutes=5)
    runtime.plans.update(waiting)
    gauges = samples(port)
    assert gauges[("planq_plans_awaiting_approval", ())] == 1.0
    assert 300 <= gauges[("planq_plan_approval_oldest_wait_seconds", ())] < 400
