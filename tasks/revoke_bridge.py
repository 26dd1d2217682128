"""Celery's revoke lands on planq's cancellation token (Flower's button, `control revoke`).

Celery's own revoke only stops a task that has not started, and its revoked set lives in
the worker's parent process. planq wraps the `revoke` remote-control command. A revoke
reaches every node, but a cancel is written once and counted once in the fleet:

* planq's own cancel (`cancel_job`: CLI, API) has written the ledger already; its broadcast
  says so (`RECORDED`, with the outcome). The node that has the job's delivery counts the
  cancel and wakes the job; every other node only adds the id to Celery's revoked set.
* a revoke nobody recorded (Flower's button, `celery control revoke`): the node that has
  the delivery records it (`ledger.cancel`) and counts it; the others end the row only if
  it is still queued (one compare-and-set, one winner, counted by it), so a job whose
  message no worker took yet is still cancelled at once.

Waking: trip the token if the job runs in this process (threads/solo pools), or poke the
prefork child that runs it (SIGUSR2: "look at the ledger now"). With terminate=True the
node whose child runs the job kills it and ends the row `cancelled` as that child's claim,
counted like any job that ended; on a pool that cannot terminate, the request is handled
cooperatively instead of raising NotImplementedError.
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal as signals
from typing import Any

from celery.utils.functional import maybe_list
from celery.worker import control
from celery.worker import state as worker_state

from planq.domain.jobs import AsyncJobStatus
from planq.domain.ports import CancelOutcome
from planq.tasks import metrics, tracing
from planq.tasks.engine import observe_end
from planq.tasks.runtime import RECORDED, Runtime, runtime_for

logger = logging.getLogger("planq.revoke")
POKE_SIGNAL = signals.SIGUSR2
_ORIGINAL = "_planq_original_revoke"


def _pool_can_terminate(state: Any) -> bool:
    pool = getattr(getattr(state, "consumer", None), "pool", None)
    return pool is not None and "prefork" in type(pool).__module__


def _child_pids(job_id: str) -> list[int]:
    return [
        req.worker_pid
        for req in list(worker_state.active_requests)
        if req.id.upper() == job_id and req.worker_pid and req.worker_pid != os.getpid()
    ]


def holds(runtime: Runtime, job_id: str) -> bool:
    """Whether this node has a delivery of job_id (reserved or running) or runs it here.

    Only a node with the delivery can claim the job, and Celery handles the revoke and the
    delivery in one consumer loop: if no node holds it when the revoke lands, none will run it.
    """
    if runtime.worker.tracker.token(job_id) is not None:
        return True
    return any(req.id.upper() == job_id for req in list(worker_state.reserved_requests))


#: Who a revoke nobody recorded came from, in a pipeline's trail (Flower, `celery control`).
REVOKE_ACTOR = "celery:revoke"


def wake(runtime: Runtime, job_id: str) -> None:
    """Trip the job's token here, or poke the prefork child that runs it."""
    tracing.job_event(job_id, tracing.EVENT_CANCEL_REQUESTED, {tracing.CANCEL_VIA: "revoke"})
    if runtime.worker.tracker.cancel_local(job_id):
        return
    for pid in _child_pids(job_id):
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, POKE_SIGNAL)


def record(runtime: Runtime, job_id: str, held: bool) -> None:
    """A revoke nobody recorded: the holder records and counts it; others end it if queued."""
    if held:
        outcome = runtime.ledger.cancel(job_id, REVOKE_ACTOR)
        logger.info("revoke %s: ledger says %s", job_id, outcome.value)
        metrics.cancel_requested(outcome.value)
    elif runtime.ledger.cancel_queued(job_id, REVOKE_ACTOR):
        logger.info("revoke %s: was queued, now cancelled", job_id)
        metrics.cancel_requested(CancelOutcome.cancelled.value)


def bridge_revoke(
    state: Any,
    job_ids: list[str],
    recorded: str | None = None,
    terminating: frozenset[str] = frozenset(),
) -> None:
    """Record each cancel once in the fleet (unless the requester did), then wake the holder.

    A job in `terminating` is not woken: its child is about to be terminated and this node
    ends its row. A poked child would race the signal to end the row itself, and a child
    killed between its finish and its count leaves the cancel uncounted.
    """
    runtime = runtime_for(state.app)
    for job_id in job_ids:
        held = holds(runtime, job_id)
        if recorded is None:
            try:
                record(runtime, job_id, held)
            except Exception:
                logger.exception("revoke %s: ledger cancel failed", job_id)
                continue
        elif held:
            metrics.cancel_requested(recorded)  # written by the requester, counted here
        if held and job_id not in terminating:
            wake(runtime, job_id)


def planq_revoke(
    state: Any, task_id: Any, terminate: bool = False, signal: Any = None, **kwargs: Any
) -> Any:
    """The wrapped `revoke` command: cooperative cancel first, Celery's revoke after."""
    recorded = kwargs.pop(RECORDED, None)
    task_ids = list(maybe_list(task_id) or [])
    job_ids = [str(i).upper() for i in task_ids]
    can_terminate = terminate and _pool_can_terminate(state)
    # Only the node whose child runs the job terminates it, so only that node may end the
    # row, and only as that child's claim: every other node leaves it to the job's owner.
    hosted = {job_id: _child_pids(job_id) for job_id in job_ids} if can_terminate else {}
    terminating = frozenset(job_id for job_id, pids in hosted.items() if pids)
    bridge_revoke(state, job_ids, None if recorded is None else str(recorded), terminating)
    if not any(hosted.values()):
        # Celery's revoke would also ask the result backend (a ledger read) about every id
        # this node does not run; the revoked set is all a delivery still to come needs.
        worker_state.revoked.update(task_ids)
        logger.info("Tasks flagged as revoked: %s", ", ".join(map(str, task_ids)))
        return control.ok(f"tasks {set(task_ids)} flagged as revoked")
    original = getattr(planq_revoke, _ORIGINAL)
    reply = original(state, task_id, terminate=can_terminate, signal=signal, **kwargs)
    runtime = runtime_for(state.app)
    ledger = runtime.ledger
    for job_id, pids in hosted.items():
        job = ledger.jobs.get(job_id) if pids else None
        for pid in pids if job is not None else []:
            assert job is not None
            claim = runtime.worker_id_for(pid)  # the child's claim: `<this node>/<its pid>`
            if ledger.finish(job, AsyncJobStatus.cancelled, worker_id=claim):
                logger.info("revoke %s: terminated in child %d; row cancelled", job_id, pid)
                observe_end(job, AsyncJobStatus.cancelled, runtime.jobs)
    return reply


class _NoResultBackendNoise(logging.Filter):
    """Drop Celery's 'cannot mark as revoked' warning: planq has no result backend by design."""

    def filter(self, record: logging.LogRecord) -> bool:
        return not (
            record.getMessage().startswith("Failed to mark task")
            and "No result backend" in record.getMessage()
        )


def install_revoke_bridge() -> None:
    """Replace the `revoke` control command in Celery's registry (idempotent)."""
    current = control.Panel.data.get("revoke")
    if current is planq_revoke:
        return
    logging.getLogger("celery.worker.control").addFilter(_NoResultBackendNoise())
    setattr(planq_revoke, _ORIGINAL, current)
    control.Panel.data["revoke"] = planq_revoke
