"""Recoverable runs across real worker processes: kill -9 mid-scan, restart, resume.

The ledger is a throw-away PostgreSQL database seeded with ~30k job rows (COPY), known bad
rows spread through it. Workers are real `celery -A worker_config worker` prefork processes.
"""

from __future__ import annotations

import itertools
import json
import os
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import psycopg
import pytest
import redis
from celery import Celery
from celery.utils.nodenames import gethostname

from planq.domain.clock import utcnow
from planq.domain.ids import new_id
from planq.domain.jobs import serialize_job_payload
from planq.domain.runs import RunStatus
from planq.domain.runs.checks import SWEEP_ERROR
from planq.store.migrate import upgrade
from planq.tasks.ledger_consistency import CORRUPT_PAYLOAD, PLAN_JOB_MISMATCH, STALE_HEARTBEAT
from planq.tasks.runtime import reset_runtime, runtime_for
from tests.celery_support import WorkerProcess, make_app, stop_together, worker_env
from tests.runs_support import JOB, findings, newest, wait_run
from tests.support import create_pg_database, drop_pg_database, flush_redis

pytestmark = [pytest.mark.processes, pytest.mark.postgres, pytest.mark.redis]

TASK = f"planq.runs.{JOB}"
GOOD_PLANS = 10_000  # x 3 jobs, plus the bad and tricky plans
EVERY = 1_000  # one of each bad kind after every 1,000 good plans
BATCH = 500
DELAY = 0.25  # seconds between batches: ~60 batches, a ~15 s scan
SLOW = {"batch_size": BATCH, "checkpoint_rows": BATCH, "batch_delay": DELAY}

JOB_COLUMNS = (
    "job_id, plan_id, phase, status, schema_version, payload_json, worker_id, created_at, "
    "started_at, finished_at, last_heartbeat, attempt, dispatch_count, dispatched_at"
)
PLAN_COLUMNS = "plan_id, name, phase, status, spec_json, created_at, updated_at, version"


@dataclass
class BulkLedger:
    """Tuples for COPY, and the (kind, severity, resource_id) findings they must give."""

    now: datetime = field(default_factory=utcnow)
    jobs: list[tuple[Any, ...]] = field(default_factory=list)
    plans: list[tuple[Any, ...]] = field(default_factory=list)
    expected: set[tuple[str, str, str]] = field(default_factory=set)
    _tick: Iterator[int] = field(default_factory=itertools.count)

    def _at(self) -> datetime:
        return self.now - timedelta(hours=3) + timedelta(milliseconds=next(self._tick))

    def plan(self, phase: str, status: str) -> str:
        plan_id, at = new_id(), self._at()
        self.plans.append((plan_id, "bulk", phase, status, '{"steps": []}', at, at, 1))
        return plan_id

    def job(
        self,
        plan_id: str,
        phase: str,
        status: str = "succeeded",
        payload: str | None = None,
        beat: datetime | None = None,
        attempt: int = 1,
    ) -> str:
        job_id, at = new_id(), self._at()
        payload = serialize_job_payload(plan_id, phase) if payload is None else payload
        finished = None if status == "running" else at
        worker, schema, dispatches = "worker-bulk-1", 1, 1
        row = (job_id, plan_id, phase, status, schema, payload, worker, at, at, finished)
        self.jobs.append((*row, beat or at, attempt, dispatches, at))
        return job_id

    def build(self) -> BulkLedger:
        for i in range(GOOD_PLANS):
            plan_id = self.plan("apply", "complete")
            for phase in ("strategize", "execute", "apply"):
                self.job(plan_id, phase)
            if i % EVERY == EVERY // 2:
                self.bad_and_tricky()
        return self

    def bad_and_tricky(self) -> None:
        hour = timedelta(hours=1)
        stale = self.plan("execute", "running")
        self.job(stale, "strategize")
        job_id = self.job(stale, "execute", "running", beat=self.now - hour)
        self.expected.add((STALE_HEARTBEAT, "inconsistent", job_id))
        mismatch = self.plan("execute", "running")
        self.job(mismatch, "strategize")
        self.job(mismatch, "execute")
        self.expected.add((PLAN_JOB_MISMATCH, "inconsistent", mismatch))
        corrupt = self.plan("strategize", "complete")
        job_id = self.job(corrupt, "strategize", payload='{"plan_id": "trunc')
        self.expected.add((CORRUPT_PAYLOAD, "data_loss", job_id))
        foreign = self.plan("strategize", "complete")
        job_id = self.job(foreign, "strategize", payload=serialize_job_payload(new_id(), "x"))
        self.expected.add((CORRUPT_PAYLOAD, "data_loss", job_id))
        live = self.plan("execute", "running")  # fine: the heartbeat is fresh
        self.job(live, "strategize")
        self.job(live, "execute", "running", beat=self.now + hour)
        retried = self.plan("execute", "complete")  # fine: the failure is not the latest job
        self.job(retried, "strategize")
        self.job(retried, "execute", "failed", attempt=1)
        self.job(retried, "execute", attempt=2)

    def copy_into(self, url: str) -> int:
        dsn = url.replace("postgresql+psycopg://", "postgresql://")
        with psycopg.connect(dsn) as conn, conn.cursor() as cur:
            with cur.copy(f"COPY plans ({PLAN_COLUMNS}) FROM STDIN") as copy:
                for row in self.plans:
                    copy.write_row(row)
            with cur.copy(f"COPY async_jobs ({JOB_COLUMNS}) FROM STDIN") as copy:
                for row in self.jobs:
                    copy.write_row(row)
        return len(self.jobs)

    def rows_up_to(self, cursor_hex: str) -> int:
        last = bytes.fromhex(cursor_hex).decode()
        return sum(1 for row in self.jobs if row[0] <= last)


# Not the shared test DB 13: any worker on it (other tests' too) consumes planq.runs, and a
# trigger taken by a worker of another test would scan that test's ledger instead.
RUNS_REDIS_URL = os.environ["PLANQ_TEST_RUNS_REDIS_URL"]  # tests/resources.py


@pytest.fixture
def runs_redis_url() -> str:
    """A Redis database for recoverable-run tests alone, emptied before each test."""
    flush_redis(RUNS_REDIS_URL)
    return RUNS_REDIS_URL


@pytest.fixture
def ledger_url() -> Iterator[str]:
    """A throw-away, migrated PostgreSQL database for this test alone."""
    url = create_pg_database("planq_runs_e2e")
    upgrade(url)
    yield url
    drop_pg_database(url)


@pytest.fixture
def producer(runs_redis_url: str, ledger_url: str) -> Iterator[Celery]:
    app = make_app(runs_redis_url, ledger_url)
    yield app
    reset_runtime(app)


@pytest.fixture
def workers(
    runs_redis_url: str, ledger_url: str, producer: Celery, tmp_path: Path
) -> Iterator[Any]:
    started: list[WorkerProcess] = []

    def start(name: str) -> WorkerProcess:
        log = tmp_path / f"{name}-{len(started)}.log"
        worker = WorkerProcess(worker_env(runs_redis_url, ledger_url), name, log_path=log)
        started.append(worker)
        worker.wait_ready(producer)
        return worker

    yield start
    stop_together(started)


def test_kill_9_mid_scan_then_restart_pauses_and_a_trigger_resumes_at_the_checkpoint(
    producer: Celery, workers: Any, ledger_url: str, runs_redis_url: str
) -> None:
    t0 = time.monotonic()
    ledger = BulkLedger().build()
    total = ledger.copy_into(ledger_url)
    seeded_s = time.monotonic() - t0
    rt = runtime_for(producer)
    worker_a = workers("runs-a")
    node_a = f"runs-a@{gethostname()}"  # `-n runs-a@%h`

    started = time.monotonic()
    sent = producer.tasks[TASK].delay({k: str(v) for k, v in SLOW.items()})
    first = wait_run(rt, "a first checkpoint", lambda r: r.scanned_count > 0, timeout=60.0)
    first_checkpoint_s = time.monotonic() - started
    assert first.status is RunStatus.Running and first.owner == node_a

    # Another node boots while A scans: its sweep must leave A's live run alone.
    workers("runs-b")
    live = newest(rt)
    assert live is not None and live.status is RunStatus.Running and live.owner == node_a

    seen = wait_run(
        rt, "a third of the ledger", lambda r: r.scanned_count >= total // 3, timeout=60.0
    )
    worker_a.kill()
    killed_at, killed_wall = time.monotonic(), utcnow()
    orphan = newest(rt)
    assert orphan is not None and orphan.status is RunStatus.Running  # nobody owns it now

    restarted = workers("runs-a")  # the same node name: its boot sweep reclaims the run
    restart_s = time.monotonic() - killed_at
    swept = newest(rt)
    assert swept is not None and swept.id == first.id
    assert swept.status is RunStatus.Paused and swept.error_message == SWEEP_ERROR
    assert swept.cursor_hex is not None
    assert seen.scanned_count <= swept.scanned_count <= seen.scanned_count + BATCH
    assert swept.scanned_count == ledger.rows_up_to(swept.cursor_hex)  # cursor and count agree
    assert 0 < swept.scanned_count < total
    broker = redis.Redis.from_url(runs_redis_url)
    unacked = [json.loads(v) for v in broker.hvals("unacked")]
    assert not any(sent.id in json.dumps(v) for v in unacked)  # nothing to redeliver
    assert broker.llen("planq.runs") == 0
    assert restarted.proc.poll() is None
    paused = newest(rt)
    assert paused is not None and paused.status is RunStatus.Paused  # no auto-resume

    resumed_at = time.monotonic()
    producer.tasks[TASK].delay({"batch_delay": "0"})
    done = wait_run(
        rt, "the resumed run to complete", lambda r: not r.status.is_non_terminal, timeout=60.0
    )
    resume_s = time.monotonic() - resumed_at

    assert done.id == first.id and done.status is RunStatus.Completed, done
    assert done.scanned_count <= total + BATCH
    assert done.scanned_count == total  # every row counted once over both workers
    assert sorted(findings(rt, done.id)) == sorted(ledger.expected)
    assert rt.runs.finding_severity_counts(done.id) == {"data_loss": 20, "inconsistent": 20}
    assert done.params["batch_size"] == str(BATCH)  # the first trigger's params survived
    # A worker sleeps DELAY after each checkpoint before it reads the next batch: a kill
    # sooner than that after the last checkpoint left no row read past it.
    since_checkpoint = (killed_wall - swept.last_progress_at).total_seconds()
    report = {
        "rows": total,
        "seed_s": round(seeded_s, 2),
        "first_checkpoint_s": round(first_checkpoint_s, 2),
        "checkpoint_seen_before_kill": seen.scanned_count,
        "checkpoint_at_sweep": swept.scanned_count,
        "cursor_at_sweep": bytes.fromhex(swept.cursor_hex).decode(),
        "rows_left_for_resume": total - swept.scanned_count,
        "kill_after_checkpoint_s": round(since_checkpoint, 3),
        "rows_rescanned": 0 if since_checkpoint < DELAY else f"<= {BATCH}",
        "kill_to_sweep_s": round(restart_s, 2),
        "resume_s": round(resume_s, 2),
        "test_s": round(time.monotonic() - t0, 2),
    }
    print("runs-e2e", json.dumps(report))


def test_warm_shutdown_pauses_a_running_scan_instead_of_waiting_for_it(
    producer: Celery, workers: Any, ledger_url: str
) -> None:
    ledger = BulkLedger().build()
    total = ledger.copy_into(ledger_url)
    rt = runtime_for(producer)
    worker = workers("runs-c")
    producer.tasks[TASK].delay({k: str(v) for k, v in SLOW.items()})
    wait_run(rt, "a first checkpoint", lambda r: r.scanned_count > 0, timeout=60.0)

    stopping = time.monotonic()
    code = worker.terminate(timeout=20)
    stop_s = time.monotonic() - stopping

    assert code == 0, worker.log_tail()
    assert stop_s < 10, stop_s  # the whole scan would take ~15 s more
    paused = newest(rt)
    assert paused is not None and paused.status is RunStatus.Paused, paused
    assert paused.error_message is None and paused.cursor_hex is not None
    assert 0 < paused.scanned_count == ledger.rows_up_to(paused.cursor_hex) < total

    workers("runs-d")
    producer.tasks[TASK].delay({"batch_delay": "0"})
    done = wait_run(
        rt, "the resumed run to complete", lambda r: not r.status.is_non_terminal, timeout=60.0
    )
    assert done.id == paused.id and done.status is RunStatus.Completed
    assert done.scanned_count == total
    assert sorted(findings(rt, done.id)) == sorted(ledger.expected)
    print("runs-e2e-warm", json.dumps({"rows": total, "stop_s": round(stop_s, 2)}))
