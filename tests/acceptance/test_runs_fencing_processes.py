"""Fencing with real worker processes: a frozen worker loses its run and writes nothing.

A frozen worker's run is swept and resumed elsewhere; after it thaws, it stops.

Two real `celery -A worker_config worker` prefork processes, A and B, on Redis and a
throw-away PostgreSQL ledger, with the smallest stale bound planq accepts
(PLANQ_RUN_STALE_AFTER=5: a heartbeat every 0.83 s). The scan checkpoints only every ~10 s,
longer than that bound:

1. A runs ledger_consistency; 6 s after its start (no checkpoint yet) the stale sweep
   spares it: its heartbeat is fresh. The sweep runs every 0.5 s meanwhile (beat's pace is
   2.5 s) and spares it each time, B's boot sweep too; the last one found the ledger
   available for the whole bound, so nothing but the heartbeat held it off.
2. Right after A's first checkpoint, A's whole process group is stopped (SIGSTOP). Once its
   heartbeat is older than 5 s, the real sweep task on B pauses the run; a trigger on B
   resumes it from A's checkpoint.
3. A is continued (SIGCONT) while B scans. A's next touch of the run is refused: it stops
   and writes nothing. B completes with every row counted once and every finding once.

The triggers and the sweep for B go to a queue only B consumes: a stopped worker may still
hold a pending BRPOP on the shared queues, and Redis would hand it the message.
"""

from __future__ import annotations

import json
import os
import signal
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from celery import Celery
from celery.utils.nodenames import gethostname
from sqlalchemy import select

from planq.domain.availability import RUN_SWEEP
from planq.domain.clock import utcnow
from planq.domain.runs import RunStatus
from planq.domain.runs.checks import SWEEP_ERROR
from planq.store.migrate import upgrade
from planq.store.models import LedgerAvailabilityModel as Availability
from planq.tasks.recoverable import STALE_SWEEP_TASK, boot_recovery_sweep
from planq.tasks.runtime import reset_runtime, runtime_for
from planq.worker_config.celery_config import ALL_QUEUES
from tests.acceptance.test_runs_e2e import BulkLedger
from tests.celery_support import WorkerProcess, make_app, worker_env
from tests.runs_support import JOB, findings, newest, wait_run
from tests.support import create_pg_database, drop_pg_database, flush_redis, wait_for

pytestmark = [pytest.mark.processes, pytest.mark.postgres, pytest.mark.redis]

TASK = f"planq.runs.{JOB}"
STALE = 5.0  # PLANQ_RUN_STALE_AFTER: the floor settings accept
PLANS = 600  # x 3 jobs, plus 6 x 13 bad and tricky rows: ~1,900 rows
BATCH = 50
#: 12 batches of 50 rows 0.8 s apart per checkpoint: one every ~10 s, twice STALE
A_PACE = {
    "batch_size": BATCH,
    "checkpoint_rows": 600,
    "checkpoint_seconds": 3600,
    "batch_delay": 0.8,
}
SWEEP_EVERY = 0.5  # the test's stale sweeps while A is live (beat's entry: STALE / 2)
#: B keeps the run's stored batch_size (50): ~26 batches, 0.1 s apart, past A's checkpoint
B_PACE = {"batch_delay": 0.1, "checkpoint_rows": 200}
ONLY_B = "planq.test.fence-b"
RUNS_REDIS_URL = os.environ.get("PLANQ_TEST_RUNS_REDIS_URL", "redis://127.0.0.1:6379/11")


def small_ledger() -> BulkLedger:
    ledger = BulkLedger()
    for i in range(PLANS):
        plan_id = ledger.plan("apply", "complete")
        for phase in ("strategize", "execute", "apply"):
            ledger.job(plan_id, phase)
        if i % 100 == 50:
            ledger.bad_and_tricky()
    return ledger


@pytest.fixture
def ledger_url() -> Iterator[str]:
    url = create_pg_database("planq_runs_fence")
    upgrade(url)
    yield url
    drop_pg_database(url)


@pytest.fixture
def producer(ledger_url: str) -> Iterator[Celery]:
    flush_redis(RUNS_REDIS_URL)
    app = make_app(RUNS_REDIS_URL, ledger_url, run_stale_after=STALE)
    yield app
    reset_runtime(app)


def sweep_armed(producer: Celery) -> bool:
    """Whether the last run sweep found the ledger available for STALE: it pauses silent runs."""
    with runtime_for(producer).db.session() as s:
        row = s.execute(
            select(Availability.last_seen_at, Availability.available_since).where(
                Availability.sweep == RUN_SWEEP
            )
        ).one()
    assert row.last_seen_at is not None
    since, seen = row.available_since, row.last_seen_at
    return since is None or since <= seen - timedelta(seconds=STALE)


def _log_text(worker: WorkerProcess) -> str:
    assert worker.log_path is not None
    return worker.log_path.read_text(errors="replace") if worker.log_path.exists() else ""


def test_a_frozen_worker_loses_its_run_and_writes_nothing_after_it_thaws(
    producer: Celery, ledger_url: str, tmp_path: Path
) -> None:
    t0 = time.monotonic()
    ledger = small_ledger()
    total = ledger.copy_into(ledger_url)
    rt = runtime_for(producer)
    env = worker_env(RUNS_REDIS_URL, ledger_url, run_stale_after=STALE)
    a = WorkerProcess(env, "fence-a", log_path=tmp_path / "a.log")
    b: WorkerProcess | None = None
    stopped = False
    try:
        a.wait_ready(producer)
        node_a, node_b = f"fence-a@{gethostname()}", f"fence-b@{gethostname()}"

        # 1. A scans; no checkpoint for longer than the stale bound, yet it is never swept.
        producer.tasks[TASK].delay({k: str(v) for k, v in A_PACE.items()})
        opened = wait_run(rt, "A to open the run", lambda r: r.owner == node_a, timeout=60)
        # B boots meanwhile: its boot sweep (owner B, stale 5 s) spares A's run too
        b = WorkerProcess(env, "fence-b", queues=[*ALL_QUEUES, ONLY_B], log_path=tmp_path / "b.log")
        swept_meanwhile: list[tuple[str, ...]] = []

        def silent_and_spared() -> bool:
            silent = (utcnow() - opened.last_progress_at).total_seconds()
            result = boot_recovery_sweep(producer, owner=None, stale_after=STALE)  # beat's task
            swept_meanwhile.append(result.run_ids)
            return silent > STALE + 1 and sweep_armed(producer)

        wait_for(
            silent_and_spared,
            timeout=STALE + 30,
            interval=SWEEP_EVERY,
            what="a sweep, on a ledger available for stale_after, of A's run silent for longer",
        )
        live = newest(rt)
        assert not any(swept_meanwhile) and live is not None, swept_meanwhile
        assert live.status is RunStatus.Running and live.owner == node_a and live.heartbeat_at
        assert live.lease_epoch == opened.lease_epoch  # never swept
        assert live.scanned_count == 0  # no checkpoint yet: only the heartbeat kept it alive
        silent_by_progress = (utcnow() - live.last_progress_at).total_seconds()
        heartbeat_age = (utcnow() - live.heartbeat_at).total_seconds()
        assert silent_by_progress > STALE and heartbeat_age < STALE / 3

        # 2. Freeze A right after its first checkpoint; B's sweep takes the run from it.
        b.wait_ready(producer)
        first = wait_run(rt, "A's first checkpoint", lambda r: r.scanned_count > 0, timeout=60)
        assert first.owner == node_a and first.lease_epoch == opened.lease_epoch  # B spared it
        os.killpg(a.pid, signal.SIGSTOP)
        stopped, stopped_at = True, time.monotonic()
        a_checkpoint = newest(rt)
        assert a_checkpoint is not None and a_checkpoint.id == first.id
        a_found = len(findings(rt, first.id))
        assert a_checkpoint.scanned_count == ledger.rows_up_to(a_checkpoint.cursor_hex or "")

        def swept() -> Any:
            producer.tasks[STALE_SWEEP_TASK].apply_async(queue=ONLY_B)  # the real task, on B
            run = wait_run(rt, "the sweep on B", lambda r: True)
            return run if run.status is RunStatus.Paused else None

        paused = wait_for(swept, timeout=STALE + 60, interval=1.0, what="B to sweep A's run")
        stale_s = time.monotonic() - stopped_at
        assert paused.error_message == SWEEP_ERROR and paused.lease_epoch == first.lease_epoch + 1
        assert paused.cursor_hex == a_checkpoint.cursor_hex  # nothing lost, nothing advanced

        producer.tasks[TASK].apply_async(
            args=[{k: str(v) for k, v in B_PACE.items()}], queue=ONLY_B
        )
        resumed = wait_run(
            rt,
            "B to resume past A's checkpoint",
            lambda r: r.owner == node_b and r.scanned_count > a_checkpoint.scanned_count,
            timeout=60,
        )
        assert resumed.status is RunStatus.Running and resumed.lease_epoch == paused.lease_epoch + 1

        # 3. A thaws while B scans: A stops without writing anything.
        os.killpg(a.pid, signal.SIGCONT)
        stopped, thawed_at = False, time.monotonic()
        wait_for(
            lambda: "lost the run" in _log_text(a),
            timeout=60,
            interval=0.2,
            what="A to report that it lost the run",
        )
        lost_s = time.monotonic() - thawed_at
        done = wait_run(rt, "B to complete", lambda r: not r.status.is_non_terminal, timeout=120)
        wait_for(  # A's trigger has returned (IGNORED: it lost the run), so whatever it
            # would write is written by now
            lambda: f"{TASK}[" in _log_text(a) and "] ignored" in _log_text(a),
            timeout=30,
            interval=0.2,
            what="A's trigger to end IGNORED",
        )
        final = newest(rt)
        assert final is not None and final == done  # nothing changed after B completed

        assert done.id == first.id and done.status is RunStatus.Completed, done
        assert done.owner == node_b and done.error_message is None
        assert done.scanned_count == total  # every row once: A's and B's scans do not overlap
        recorded = findings(rt, done.id)
        assert sorted(recorded) == sorted(ledger.expected)  # every finding once
        assert len(recorded) == len(set(recorded)) == done.finding_count
        log_a = _log_text(a)
        assert "no longer held by this process" in log_a
        report = {
            "rows": total,
            "expected_findings": len(ledger.expected),
            "stale_after_s": STALE,
            "a_silent_by_checkpoints_at_spared_sweep_s": round(silent_by_progress, 1),
            "a_heartbeat_age_at_spared_sweep_s": round(heartbeat_age, 1),
            "sweeps_that_spared_a": len(swept_meanwhile),
            "a_checkpoint_rows": a_checkpoint.scanned_count,
            "a_findings_at_stop": a_found,
            "stop_to_sweep_s": round(stale_s, 1),
            "thaw_to_lost_s": round(lost_s, 2),
            "final_scanned": done.scanned_count,
            "final_findings": len(recorded),
            "lease_epochs": [first.lease_epoch, paused.lease_epoch, done.lease_epoch],
            "test_s": round(time.monotonic() - t0, 1),
        }
        print("runs-fencing", json.dumps(report))
    finally:
        if stopped:
            os.killpg(a.pid, signal.SIGCONT)
        workers = [w for w in (a, b) if w is not None]
        with ThreadPoolExecutor(len(workers)) as pool:  # both warm shutdowns at once
            list(pool.map(WorkerProcess.close, workers))
