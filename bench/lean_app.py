"""A PROTOTYPE worker for `bench/throughput.py --attribution`: planq's Celery config, lean ledger.

The app is built from planq's own settings and `celery_config` (same queues, JSON only,
late acks, prefetch 1, task events on), so the only difference from planq's worker is
the task body: bench/lean_ledger.py's Core statements instead of planq's ORM path. It
runs the happy path only (claim succeeds, `noop` executor, finish), which is all the
benchmark exercises. Not used by planq.

  celery -A bench.lean_app worker -P prefork -c 2 -Q planq.execute
  env: PLANQ_BROKER_URL, PLANQ_DATABASE_URL (as for planq's worker);
       BENCH_EVENTS=0 turns planq's task-event settings off
"""

from __future__ import annotations

import os
from typing import Any

from celery import Celery

from bench.executors import JOB_SECONDS, sleep
from bench.lean_ledger import LeanLedger
from domain.cancellation import CancellationToken
from domain.jobs import AsyncJob
from domain.plans import Plan, PlanPhase
from tasks.engine import default_worker_id
from tasks.executors import JobContext, noop
from tasks.tracker import JobTracker
from worker_config.celery_config import celery_config
from worker_config.settings import load_settings

settings = load_settings()
app = Celery("planq_lean", set_as_current=False)
app.conf.update(celery_config(settings))
if os.environ.get("BENCH_EVENTS", "1") == "0":  # the attribution row without task events
    app.conf.update(
        worker_send_task_events=False, task_send_sent_event=False, task_track_started=False
    )

executor = sleep if JOB_SECONDS > 0 else noop  # as planq's worker with --job-seconds
_state: dict[str, Any] = {}


def _ledger() -> tuple[LeanLedger, JobTracker, str]:
    """Per process and ledger (a prefork child builds its own engine after the fork)."""
    url = os.environ.get("PLANQ_DATABASE_URL", settings.database_url)
    if _state.get("key") != (os.getpid(), url):
        close()
        ledger = LeanLedger(url)
        _state.update(
            key=(os.getpid(), url),
            ledger=ledger,
            tracker=JobTracker(ledger.heartbeat, settings.heartbeat_interval),
            worker_id=default_worker_id(),
        )
    return _state["ledger"], _state["tracker"], _state["worker_id"]


def close() -> None:
    """Release this process's engine and heartbeat thread (the benchmark's producer)."""
    if _state.get("key", (None,))[0] == os.getpid():
        _state["tracker"].close()
        _state["ledger"].engine.dispose()
    _state.clear()


@app.task(name="planq.execute_plan", acks_late=True, reject_on_worker_lost=True, ignore_result=True)
def execute_plan(job_id: str, plan_id: str | None = None) -> str:
    """Claim (1 txn), run the executor with a tracked token, finish (1 txn)."""
    ledger, tracker, worker_id = _ledger()
    job_row, plan_row = ledger.claim_core(job_id, worker_id)
    job = AsyncJob.model_validate(dict(job_row))
    plan = Plan.model_validate(dict(plan_row))
    token = tracker.track(job.job_id)
    try:
        executor(JobContext(job=job, token=token or CancellationToken(), plan=plan))
    finally:
        tracker.untrack(job.job_id)
    ledger.finish_core(job.job_id, job.plan_id, job.phase.value)
    return "succeeded"


def lean_delay(plan_id: str) -> str:
    """Producer: queue the phase and insert the row (1 statement), publish, stamp dispatched."""
    ledger, _, _ = _ledger()
    job = AsyncJob(plan_id=plan_id, phase=PlanPhase.execute)
    if not ledger.queue_cte(plan_id, job):
        raise RuntimeError(f"plan {plan_id} could not be queued")
    kwargs = {"job_id": job.job_id, "plan_id": job.plan_id}
    execute_plan.apply_async((), kwargs, task_id=job.job_id, argsrepr="()", kwargsrepr=repr(kwargs))
    ledger.mark_dispatched(job.job_id)
    return job.job_id
