"""Hard boundaries of the job path with real `celery worker` processes (issue 9, items 4-6).

- A poison message (a crafted task message with a bad job id or bad arguments) is dropped
  at once: it never holds a pool slot for the outage budget, and a good job behind it on
  the same one-slot worker runs straight away.
- Producers cannot reach the internal publish: `<phase>_plan.delay(job_id=…)` and
  `apply_async(kwargs={"job_id": …})` are refused with nothing written and nothing sent; a
  crafted message for a job id with no ledger row runs nothing.
- An executor error with a NUL byte ends the job `failed` at once on PostgreSQL, with its
  redacted error stored printable; an exception whose `__str__` raises a secret never
  shows it, in the ledger or in the worker's log.
"""

from __future__ import annotations

import time

import pytest
import redis
from celery import Celery

from planq.domain.ids import new_id
from planq.domain.jobs import AsyncJobStatus
from planq.domain.plans import Plan
from planq.domain.redaction import REDACTED
from planq.tasks.runtime import Runtime
from planq.worker_config.celery_config import ALL_QUEUES
from tests.acceptance.conftest import StartWorker
from tests.celery_support import WorkerProcess, wait_for_status
from tests.fencing_executors import events
from tests.support import wait_for

pytestmark = [pytest.mark.processes, pytest.mark.postgres, pytest.mark.redis]
HARD = "tests.fencing_executors:hard_errors"
TASK = "planq.strategize_plan"
#: Well under the 120 s outage budget a retried poison message or finish would take.
PROMPT = 30.0


def queued_messages(app: Celery) -> int:
    client = redis.Redis.from_url(app.conf.broker_url)
    return sum(int(client.llen(queue)) for queue in ALL_QUEUES)


def log_text(worker: WorkerProcess) -> str:
    assert worker.log_path is not None
    return worker.log_path.read_text(errors="replace")


def test_poison_messages_hold_no_slot_and_producers_cannot_publish_jobs(
    producer: Celery, runtime: Runtime, start_worker: StartWorker
) -> None:
    worker = start_worker("bound-a", pool="prefork", concurrency=1, default_executor=HARD)
    plan = Plan.with_steps(["one"], name="good")
    runtime.plans.add(plan)

    # Producers: every way of naming a job id is refused before anything is written or sent.
    task = producer.tasks[TASK]
    for call in (
        lambda: task.delay(job_id=new_id()),
        lambda: task.delay(plan.plan_id, job_id=new_id()),
        lambda: task.apply_async(kwargs={"job_id": new_id()}),
        lambda: task.apply_async((plan.plan_id,), {"job_id": new_id(), "plan_id": plan.plan_id}),
        lambda: task.apply_async(kwargs={"job_id": 123}),
    ):
        with pytest.raises(TypeError, match="takes one argument, plan_id"):
            call()
    assert runtime.jobs.count() == 0 and queued_messages(producer) == 0

    # Crafted messages straight onto the queue (what a rogue producer could send).
    t0 = time.monotonic()
    no_row = new_id()
    for kwargs in (
        {"job_id": 123},  # the poison message: not a string
        {"job_id": "x" * 10_000},
        {"job_id": "password=hunter2-secret"},  # a crafted id never reaches the log as is
        {"job_id": None, "plan_id": plan.plan_id},
        {"job_id": no_row, "plan_id": plan.plan_id},  # a valid id with no ledger row
    ):
        producer.send_task(TASK, kwargs=kwargs)
    producer.send_task(TASK, args=[1, 2, 3, 4])  # bad arity
    good = task.delay(plan.plan_id).id  # behind six poison messages, on a one-slot worker
    done = wait_for_status(runtime.jobs, good, AsyncJobStatus.succeeded, timeout=PROMPT)
    assert time.monotonic() - t0 < PROMPT and done.progress == 1.0
    wait_for(lambda: queued_messages(producer) == 0, timeout=PROMPT, what="all consumed")
    # Nothing ran but the good job, and nothing but its row was written.
    assert [e["job"] for e in events(plan.plan_id)] == [good]
    assert [j.job_id for j in runtime.jobs.list_all()] == [good]
    log = log_text(worker)
    assert log.count("message without a valid job id") >= 5  # the arity one too
    assert "hunter2" not in log and "x" * 100 not in log  # redacted, then cut short
    assert "Traceback" not in log  # expected outcomes: one line each
    assert f"job {no_row}: not claimable" in log


def test_unstorable_and_unprintable_errors_fail_the_job_at_once_redacted(
    producer: Celery, runtime: Runtime, start_worker: StartWorker
) -> None:
    worker = start_worker("bound-b", pool="prefork", concurrency=1, default_executor=HARD)
    nul, unprintable = (
        Plan.with_steps(["x"], name="nul"),
        Plan.with_steps(["x"], name="unprintable"),
    )
    t0 = time.monotonic()
    ids = {}
    for plan in (nul, unprintable):
        runtime.plans.add(plan)
        ids[plan.name] = producer.tasks[TASK].delay(plan.plan_id).id
    failed = {
        name: wait_for_status(runtime.jobs, job_id, AsyncJobStatus.failed, timeout=PROMPT)
        for name, job_id in ids.items()
    }
    assert time.monotonic() - t0 < PROMPT  # no outage retries for an error that is not one

    stored = failed["nul"].error_message
    assert stored is not None and stored.startswith("ValueError: bad")
    assert "\x00" not in stored and "hunter2" not in stored and REDACTED in stored
    assert failed["unprintable"].error_message == "_Unprintable: <unprintable message>"
    for name in ids:
        plan_row = runtime.plans.get((nul if name == "nul" else unprintable).plan_id)
        assert plan_row is not None and plan_row.label == "Strategize/FAILED"

    # The worker's log (what Flower's traceback shows too) never carries the secrets.
    wait_for(
        lambda: (
            log_text(worker).count("PhaseJobFailed") >= 2
            or log_text(worker).count(" failed: ") >= 2
        ),
        timeout=PROMPT,
        what="the worker to log both failures",
    )
    log = log_text(worker)
    assert "hunter2" not in log and "\x00" not in log
    assert "DataError" not in log
    # The only stacks logged are the executors' own, once each, under their one line
    # (issue 19, item 2): no store error and no outage retry logs one.
    assert log.count("Traceback (most recent call last)") == 2, log[-3000:]
    for job_id in ids.values():
        assert log.count(f"job {job_id} failed:") == 1, log[-3000:]
