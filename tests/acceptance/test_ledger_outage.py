"""A ledger outage longer than job_timeout, without a server restart (issue 22, findings 3, 5).

The ledger database refuses connections (`ALLOW_CONNECTIONS false`) and every backend on it
is terminated; the server itself keeps running, so its start time says nothing. Two real
`celery worker` processes run 100 short jobs with job_timeout 4 s (heartbeat 1 s); a beat
sends the stuck sweep every second to a third worker that serves only the maintenance queue,
so a sweep runs the moment the ledger is back (as on a fleet with an idle node). The outage
(10 s by default) is longer than job_timeout: every heartbeat in flight goes stale during
it, which is the point. After the outage:

- no job is lost and none runs twice: the stuck sweep holds off until the holders had a
  job_timeout of ledger availability to renew (domain/availability.py), and each holder's
  heartbeat renews within a second of the ledger's return;
- each worker process logs a handful of planq lines for the whole outage (one warning at
  its start, one line on recovery; a reminder every 30 s, `domain.outage.REMINDER_EVERY`,
  for an outage longer than that), with no SQL and no parameters.

PLANQ_TEST_OUTAGE_SECONDS sets the outage's length (10 s by default; the 20-in-a-row record
in docs/reliability.md ran it at 30 and 60 s, with job_timeout 10 s, heartbeat 3 s and 200
jobs then; at 60 s the reminders show, 3 or 4 lines per process). The reminder's own timing
is tested in tests/unit/test_outage.py.
"""

from __future__ import annotations

import os
import re
import time
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import psycopg
import pytest
from celery import Celery

from planq.domain.jobs import AsyncJobStatus
from planq.domain.ledger import STUCK_ERROR
from planq.tasks.runtime import Runtime
from planq.worker_config.celery_config import MAINTENANCE_QUEUE
from tests.acceptance.conftest import StartBeat, StartWorker
from tests.acceptance.faults_support import queue_jobs, runs
from tests.support import PG_ADMIN_DSN, record_reliability, wait_for

pytestmark = [pytest.mark.processes, pytest.mark.postgres, pytest.mark.redis, pytest.mark.heavy]

JOBS = 100
JOB_TIMEOUT = 4.0
OUTAGE_S = float(os.environ.get("PLANQ_TEST_OUTAGE_SECONDS", "10"))
SETTINGS = {
    "job_timeout": JOB_TIMEOUT,
    "heartbeat_interval": 1.0,
    "max_attempts": 2,  # an expired job is retried: a second run would show
    "test_seconds": 0.3,
    # The default grace: a relay re-publish of rows queued through the outage would only add
    # duplicate deliveries (dropped by the claim) and their log lines; this is about the sweep.
    "dispatch_grace": 600.0,
}
#: Celery's own line for each task received or done (the work, not the outage).
TASK_LINE = re.compile(r"\] Task \S+\[[^]]+\] (received|succeeded)")
PROCESS = re.compile(r"^\[[^]]*: \w+/([\w-]+)\]")
#: Lines a process may log over a 10-60 s outage: a warning, a reminder or two, a recovery
#: and a few job lines fit; a traceback per beat (the old flood: one a second) does not.
MAX_LINES_PER_PROCESS = 10


@contextmanager
def connections_refused(database: str) -> Iterator[None]:
    """Refuse new connections to `database` and cut every open one; restore on exit.

    The server keeps running (no restart): only this test's own database is touched.
    """
    with psycopg.connect(PG_ADMIN_DSN, autocommit=True, connect_timeout=5) as admin:
        admin.execute(f'ALTER DATABASE "{database}" ALLOW_CONNECTIONS false')
        try:
            admin.execute(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                "WHERE datname = %s AND pid <> pg_backend_pid()",
                (database,),
            )
            yield
        finally:
            admin.execute(f'ALTER DATABASE "{database}" ALLOW_CONNECTIONS true')


def log_lines_since(path: Path, offset: int) -> list[str]:
    with path.open("rb") as fh:
        fh.seek(offset)
        return fh.read().decode(errors="replace").splitlines()


def outage_window(logs: list[Path], offsets: list[int]) -> list[list[str]] | None:
    """Each log since the outage began, once every process that met it said it recovered."""
    chunks = [log_lines_since(p, off) for p, off in zip(logs, offsets, strict=True)]
    met: Counter[str] = Counter()
    for name, chunk in enumerate(chunks):
        for line in chunk:
            m = PROCESS.search(line)
            who = f"{name}:{m.group(1) if m else ''}"
            if "ledger unavailable (" in line:
                met[who] += 1
            elif "ledger available again after" in line:
                met[who] -= 1
    return chunks if met and not any(met.values()) else None


def test_no_restart_outage_longer_than_job_timeout(
    producer: Celery,
    runtime: Runtime,
    pg_url: str,
    start_worker: StartWorker,
    start_beat: StartBeat,
) -> None:
    assert 2 * JOB_TIMEOUT < OUTAGE_S, "the outage must outlast job_timeout (twice)"
    # started together, then awaited: one start-up's wait, not three in a row
    workers = [start_worker(name, wait=False, **SETTINGS) for name in ("w1", "w2")]
    workers.append(
        start_worker("sweeper", concurrency=1, queues=[MAINTENANCE_QUEUE], wait=False, **SETTINGS)
    )
    start_beat(**SETTINGS)
    for worker in workers:
        worker.wait_ready(producer)
    t0 = time.monotonic()
    ids = queue_jobs(producer, runtime, JOBS)
    wait_for(
        lambda: (
            runtime.jobs.count(AsyncJobStatus.succeeded) >= JOBS // 5
            and runtime.jobs.count(AsyncJobStatus.running) >= 2
        ),
        timeout=120,
        what="jobs to be under way",
    )
    logs = [w.log_path for w in workers if w.log_path is not None]
    offsets = [p.stat().st_size for p in logs]
    in_flight = {j.job_id for j in runtime.jobs.list_by_status(AsyncJobStatus.running)}
    with connections_refused(pg_url.rsplit("/", 1)[1]):
        time.sleep(OUTAGE_S)  # the fault itself: the ledger stays away this long
    runtime.db.close()  # the producer's own pool holds connections the outage cut
    wait_for(
        lambda: (
            runtime.jobs.count(AsyncJobStatus.queued) + runtime.jobs.count(AsyncJobStatus.running)
            == 0
        ),
        timeout=240,
        what="every job to end",
    )
    recovered = time.monotonic() - t0

    rows = runtime.jobs.list_all()
    originals = [r for r in rows if r.retry_of is None]
    assert len(originals) == JOBS
    expired = [r.job_id for r in rows if r.error_message == STUCK_ERROR]
    retries = [r.job_id for r in rows if r.retry_of is not None]
    assert (expired, retries) == ([], []), f"in flight at the outage: {sorted(in_flight)}"
    statuses = Counter(r.status for r in rows)
    lost = JOBS - statuses[AsyncJobStatus.succeeded]
    ran_twice = sum(1 for job_id in ids if runs(job_id) != 1)
    assert (lost, ran_twice) == (0, 0), statuses

    # quiet outages: a few lines per process from the outage's start to the last job's end
    window = wait_for(
        lambda: outage_window(logs, offsets), timeout=30, what="every process to recover"
    )
    lines = [ln for chunk in window for ln in chunk]
    leaked = [ln for ln in lines if "[parameters" in ln or "SELECT" in ln or "UPDATE" in ln]
    assert leaked == [], leaked[:5]
    per_process = Counter(
        f"{name}:{m.group(1) if (m := PROCESS.search(ln)) else 'unprefixed'}"
        for name, chunk in zip(("w1", "w2", "sweeper"), window, strict=True)
        for ln in chunk
        if not TASK_LINE.search(ln)
    )
    assert max(per_process.values()) < MAX_LINES_PER_PROCESS, per_process
    record_reliability(
        f"no-restart outage of {OUTAGE_S:.0f}s at job_timeout {JOB_TIMEOUT:.0f} s, 2 workers",
        JOBS,
        lost,
        ran_twice,
        recovered,
    )
    print(f"log lines per process over the outage: {dict(per_process)}")
