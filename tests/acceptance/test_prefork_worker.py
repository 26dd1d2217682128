"""A producer here, `celery -A worker_config worker -P prefork` there, the ledger on PostgreSQL."""

from __future__ import annotations

import pytest
from celery import Celery
from celery.utils.nodenames import gethostname

from planq.domain.jobs import AsyncJobStatus
from planq.domain.plans import Plan, PlanPhase, PlanStatus
from planq.tasks.runtime import Runtime
from tests.acceptance.conftest import StartWorker
from tests.celery_support import wait_for_status
from tests.executors_for_tests import REDIS, runs_key

pytestmark = pytest.mark.processes


def strategized_plan(rt: Runtime) -> Plan:
    plan = Plan.with_steps(["a", "b"])
    plan.__dict__.update(phase=PlanPhase.strategize, status=PlanStatus.complete)
    rt.plans.add(plan)
    return plan


def test_execute_plan_delay_runs_on_a_prefork_worker(
    producer: Celery, runtime: Runtime, start_worker: StartWorker
) -> None:
    worker = start_worker("w1", test_seconds=1.0)
    plan = strategized_plan(runtime)
    result = producer.tasks["planq.execute_plan"].delay(plan.plan_id)
    job = wait_for_status(runtime.jobs, result.id, AsyncJobStatus.succeeded, timeout=60)
    stored = runtime.plans.get(plan.plan_id)
    assert stored is not None and stored.label == "Execute/COMPLETE"
    assert job.worker_id is not None and job.worker_id.startswith(f"w1@{gethostname()}/")
    assert int(job.worker_id.rsplit("/", 1)[1]) in worker.child_pids()  # a child, not the parent
    assert job.last_heartbeat is not None and job.started_at is not None
    assert job.last_heartbeat > job.started_at  # the heartbeat advanced while it ran
    assert int(REDIS.get(runs_key(job.job_id)) or 0) == 1
