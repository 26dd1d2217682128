"""One queued trigger per recoverable job: a second trigger is coalesced into the first.

A run's row exists only once a worker takes its trigger, so with no worker up every
trigger used to find no active run and send its own message, and each of them later ran a
full scan, back to back. A trigger now holds a slot on the broker (Redis `SET NX`, the
queued task's id, with a TTL) from its send until a worker takes it (`release`, the first
thing the task does); a trigger that finds the slot held says so and sends nothing. Once
the worker has opened the run, the ledger says `already_running` as before.

Only a Redis broker holds slots; with any other transport every trigger is sent (the
worker still skips one while a run is active). The TTL frees a slot whose message was lost
some other way (a purged queue) instead of blocking triggers for good.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from celery import Celery

logger = logging.getLogger("planq.runs")

SLOT_TTL_SECONDS = 3600
_RELEASE = "if redis.call('get', KEYS[1]) == ARGV[1] then return redis.call('del', KEYS[1]) end"


def slot_key(job_name: str) -> str:
    """The broker key of job_name's queued trigger."""
    return f"planq:runs:queued:{job_name}"


@contextmanager
def _redis(app: Celery) -> Iterator[Any]:
    """The broker's Redis client, or None when the broker is not Redis."""
    with app.connection_for_write() as conn:
        yield conn.default_channel.client if conn.transport.driver_type == "redis" else None


def hold(app: Celery, job_name: str, task_id: str) -> str | None:
    """Take the slot for task_id; None if taken, else the id of the trigger already queued."""
    with _redis(app) as client:
        if client is None:
            return None
        for _ in range(2):  # a slot that expires between SET and GET is simply taken again
            if client.set(slot_key(job_name), task_id, nx=True, ex=SLOT_TTL_SECONDS):
                return None
            queued = client.get(slot_key(job_name))
            if queued is not None:
                return queued.decode() if isinstance(queued, bytes) else str(queued)
        return None


def release(app: Celery, job_name: str, task_id: str | None) -> None:
    """Free the slot if task_id holds it (the worker took it, or its send failed)."""
    if task_id is None:
        return
    try:
        with _redis(app) as client:
            if client is not None:
                client.eval(_RELEASE, 1, slot_key(job_name), task_id)
    except Exception as exc:  # the TTL frees it; a run must not fail for a slot
        logger.warning("trigger %s of %s: slot not released (%s)", task_id, job_name, exc)
