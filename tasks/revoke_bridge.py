"""Celery's revoke lands on planq's cancellation token (Flower's button, `control revoke`).

Celery's own revoke only stops a task that has not started, and its revoked set lives in
the worker's parent process. planq wraps the `revoke` remote-control command: the parent
records the cancel in the ledger (durable), trips the token if the job runs in this
process (threads/solo pools), or pokes the prefork child that runs it (SIGUSR2: "look at
the ledger now"). With terminate=True on a pool that cannot terminate, the request is
handled cooperatively instead of raising NotImplementedError.
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

from domain.jobs import AsyncJobStatus
from tasks import metrics
from tasks.runtime import runtime_for

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
        if req.id == job_id and req.worker_pid and req.worker_pid != os.getpid()
    ]


def bridge_revoke(state: Any, job_ids: list[str]) -> None:
    """Record each cancel in the ledger, then wake whoever runs the job."""
    runtime = runtime_for(state.app)
    for job_id in job_ids:
        try:
            outcome = runtime.ledger.cancel(job_id)
        except Exception:
            logger.exception("revoke %s: ledger cancel failed", job_id)
            continue
        logger.info("revoke %s: ledger says %s", job_id, outcome.value)
        metrics.cancel_requested(outcome.value)
        if runtime.worker.tracker.cancel_local(job_id):
            continue
        for pid in _child_pids(job_id):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, POKE_SIGNAL)


def planq_revoke(
    state: Any, task_id: Any, terminate: bool = False, signal: Any = None, **kwargs: Any
) -> Any:
    """The wrapped `revoke` command: cooperative cancel first, Celery's revoke after."""
    job_ids = [str(i).upper() for i in (maybe_list(task_id) or [])]
    bridge_revoke(state, job_ids)
    can_terminate = terminate and _pool_can_terminate(state)
    # Only the node whose child runs the job terminates it, so only that node may end the
    # row, and only as that child's claim: every other node leaves it to the job's owner.
    hosted = {job_id: _child_pids(job_id) for job_id in job_ids} if can_terminate else {}
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
