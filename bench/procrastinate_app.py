"""The peer: a Procrastinate app with the same no-op job, for `bench/throughput.py`.

Procrastinate keeps every job as a PostgreSQL row (insert on defer, claim, finish), the
same durable work per job as planq's ledger, so it shows what that work can cost.

`python -m procrastinate --app bench.procrastinate_app.app worker --queues bench.procrastinate`
runs it. The producer (the bench process) imports the same app, opens it synchronously
(`app.open()`: PsycopgConnector hands sync calls to a SyncPsycopgConnector with its own
psycopg pool) and calls `noop.defer()` one job at a time.

Environment:
  BENCH_PROCRASTINATE_DSN  libpq URL of the throw-away database
  BENCH_JOB_SECONDS        sleep this long in each job (default 0: a true no-op)
"""

from __future__ import annotations

import os
import time

from procrastinate import App, PsycopgConnector

DSN = os.environ.get("BENCH_PROCRASTINATE_DSN", "postgresql://postgres@127.0.0.1:5432/postgres")
QUEUE = "bench.procrastinate"
JOB_SECONDS = float(os.environ.get("BENCH_JOB_SECONDS", "0") or 0)

app = App(connector=PsycopgConnector(conninfo=DSN))


@app.task(name="bench.noop", queue=QUEUE)
def noop() -> None:
    """Do nothing (or sleep BENCH_JOB_SECONDS); a sync task, like the Celery ones."""
    if JOB_SECONDS > 0:
        time.sleep(JOB_SECONDS)
