"""kill -9 of a worker right after a phase's finish commits: the next phase still runs, once.

A real prefork `celery worker` and beat (the dispatch relay). The executor arms its own
process so that the pipeline's publish, which follows the finish's commit (the phase
succeeded and the next phase's row queued, in one transaction), kills the process with
SIGKILL instead. The redelivered message of the finished phase is dropped (its row ended);
the relay publishes the committed next phase, which runs exactly once.
"""

from __future__ import annotations

import pytest
from celery import Celery

from planq.domain.jobs import AsyncJobStatus
from planq.domain.plans import PipelineState, Plan, PlanPhase
from planq.tasks.runtime import Runtime
from tests.acceptance.conftest import StartBeat, StartWorker
from tests.executors_for_tests import REDIS
from tests.support import wait_for

pytestmark = [pytest.mark.processes, pytest.mark.postgres, pytest.mark.redis]
DIES = "tests.executors_for_tests:dies_after_first_finish"


def test_a_worker_killed_after_the_finish_commits_still_gets_the_next_phase_run_once(
    producer: Celery, runtime: Runtime, start_worker: StartWorker, start_beat: StartBeat
) -> None:
    start_worker("kill9", concurrency=1, default_executor=DIES)
    start_beat()
    plan = runtime.lifecycle.create_plan(["a"], name="kill9")
    REDIS.delete(f"planq-test:armed:{plan.plan_id}")
    first = producer.tasks["planq.run_plan"].delay(plan.plan_id, through="execute")

    died = wait_for(
        lambda: REDIS.get(f"planq-test:died:{first.id}"), timeout=60, what="the kill -9"
    )
    assert died

    def done() -> Plan | None:
        found = runtime.plans.get(plan.plan_id)
        return found if found and found.pipeline_state is PipelineState.done else None

    finished = wait_for(done, timeout=90, what="the pipeline to finish after the kill")
    assert finished.label == "Execute/COMPLETE"
    jobs = runtime.jobs.list_by_plan(plan.plan_id)
    assert [(j.phase, j.status) for j in jobs] == [
        (PlanPhase.strategize, AsyncJobStatus.succeeded),
        (PlanPhase.execute, AsyncJobStatus.succeeded),
    ]
    # Sent by the relay (the dead process never sent it); its stamp is batched and may land
    # after the job has already run, so it is polled for.
    execute_id = jobs[1].job_id
    wait_for(
        lambda: (row := runtime.jobs.get(execute_id)) is not None and row.dispatch_count >= 1,
        timeout=30,
        what="the relay's dispatch stamp on the execute job",
    )
    kinds = [(e.kind.value, e.phase) for e in runtime.lifecycle.plan_events(plan.plan_id)]
    assert kinds.count(("started", PlanPhase.execute)) == 1
    assert kinds.count(("queued", PlanPhase.execute)) == 1
    assert kinds[-1] == ("done", PlanPhase.execute)
