"""The baseline: a bare Celery app with planq's broker-side settings and one no-op task.

`celery -A bench.raw_app worker -P prefork -c 2 -Q bench.raw ...` runs it. Each task
INCRs a Redis counter, so the benchmark knows when all N are done without a result backend.

Environment:
  BENCH_BROKER_URL   the broker (the same Redis db the planq run uses)
  BENCH_RAW_EVENTS   "1" to also turn on planq's task-event settings (for attribution)
  BENCH_JOB_SECONDS  sleep this long in each task (default 0: a true no-op)
"""

from __future__ import annotations

import os
import time
from typing import Any

import redis
from celery import Celery

BROKER_URL = os.environ.get("BENCH_BROKER_URL", "redis://127.0.0.1:6379/14")
QUEUE = "bench.raw"
COUNTER_KEY = "bench:raw:done"
EVENTS = os.environ.get("BENCH_RAW_EVENTS", "0") == "1"
JOB_SECONDS = float(os.environ.get("BENCH_JOB_SECONDS", "0") or 0)

#: The same serializer and delivery guarantees as worker_config/celery_config.py: every
#: Celery row of the benchmark (raw, celery-sql) starts from these.
BROKER_SIDE: dict[str, Any] = {
    "broker_url": BROKER_URL,
    "task_serializer": "json",
    "result_serializer": "json",
    "accept_content": ["json"],
    "event_serializer": "json",
    "task_acks_late": True,
    "task_reject_on_worker_lost": True,
    "worker_prefetch_multiplier": 1,
    "broker_transport_options": {"visibility_timeout": 12 * 3600.0},
    "broker_connection_retry_on_startup": True,
    "worker_hijack_root_logger": False,
}

app = Celery("bench_raw", set_as_current=False)
app.conf.update(
    BROKER_SIDE,
    result_backend=None,
    task_ignore_result=True,
    task_default_queue=QUEUE,
    worker_send_task_events=EVENTS,
    task_send_sent_event=EVENTS,
    task_track_started=EVENTS,
)

_client: dict[int, Any] = {}


def _redis() -> Any:
    """One client per process (prefork children must not share the parent's socket)."""
    pid = os.getpid()
    client = _client.get(pid)
    if client is None:
        client = _client[pid] = redis.Redis.from_url(BROKER_URL)
    return client


@app.task(name="bench.noop", acks_late=True, ignore_result=True)
def noop() -> None:
    """Do nothing (or sleep BENCH_JOB_SECONDS) and count that it ran."""
    if JOB_SECONDS > 0:
        time.sleep(JOB_SECONDS)
    _redis().incr(COUNTER_KEY)
