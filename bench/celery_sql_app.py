"""Plain Celery keeping job states in SQL: its database result backend, for `bench/throughput.py`.

The setup a Celery user reaches for to keep every task's state in PostgreSQL: the same
broker settings and no-op task as bench/raw_app.py, plus `result_backend =
db+postgresql://...` (its own throw-away database; Celery creates `celery_taskmeta`),
`task_track_started` (a STARTED row when a task begins), `result_extended` (name, args,
worker and queue stored with the result) and task events on (worker and sent events).
Each task writes STARTED, then SUCCESS; the benchmark counts SUCCESS rows.

`celery -A bench.celery_sql_app worker -P prefork -c 2 -Q bench.celery_sql ...` runs it.

Environment:
  BENCH_BROKER_URL      the broker (the same Redis db the other rows use)
  BENCH_CELERY_SQL_URL  SQLAlchemy URL of the throw-away database (postgresql+psycopg://...)
  BENCH_JOB_SECONDS     sleep this long in each task (default 0: a true no-op)
"""

from __future__ import annotations

import os
import time

from celery import Celery

from bench.raw_app import BROKER_SIDE

DATABASE_URL = os.environ.get(
    "BENCH_CELERY_SQL_URL", "postgresql+psycopg://postgres@127.0.0.1:5432/postgres"
)
QUEUE = "bench.celery_sql"
JOB_SECONDS = float(os.environ.get("BENCH_JOB_SECONDS", "0") or 0)

app = Celery("bench_celery_sql", set_as_current=False)
app.conf.update(
    BROKER_SIDE,  # the same serializer and delivery guarantees as bench/raw_app.py (and planq)
    task_default_queue=QUEUE,
    # Job states in SQL, as the Celery docs suggest.
    result_backend=f"db+{DATABASE_URL}",
    task_ignore_result=False,
    task_track_started=True,
    result_extended=True,
    worker_send_task_events=True,
    task_send_sent_event=True,
)


@app.task(name="bench.noop_sql", acks_late=True)
def noop() -> None:
    """Do nothing (or sleep BENCH_JOB_SECONDS); the backend records STARTED and SUCCESS."""
    if JOB_SECONDS > 0:
        time.sleep(JOB_SECONDS)
