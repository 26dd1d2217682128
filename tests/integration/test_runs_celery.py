"""Recoverable runs on real Celery, in-process: threads-pool worker on Redis, PostgreSQL ledger."""

from __future__ import annotations

import itertools
import os
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from celery import Celery
from celery.contrib.testing.worker import start_worker
from celery.result import AsyncResult
from sqlalchemy import insert, update

from planq.domain.clock import utcnow
from planq.domain.ids import new_id
from planq.domain.jobs import serialize_job_payload
from planq.domain.runs import Completed, Fresh, RunOutcome, RunStatus, RunStore
from planq.domain.runs.checks import SERVER_RESTART_ERROR, SWEEP_ERROR
from planq.store import Database
from planq.store.models import AsyncJobModel, PlanModel, RecoverableRunModel
from planq.tasks.ledger_consistency import CORRUPT_PAYLOAD, PLAN_JOB_MISMATCH, STALE_HEARTBEAT
from planq.tasks.recoverable import (
    RunFailed,
    boot_recovery_sweep,
    register_recoverable_job,
    request_cancel,
)
from planq.tasks.runtime import Runtime, reset_runtime, runtime_for
from planq.worker_config.bootstrap import bootstrap
from planq.worker_config.settings import load_settings
from tests.celery_support import embedded_runtime, make_app
from tests.runs_support import JOB, findings, wait_run
from tests.support import flush_redis, wait_for

TASK = f"planq.runs.{JOB}"
Expected = set[tuple[str, str, str]]  # (kind, severity, resource_id)


# -- a seeded ledger: good plans, with known bad rows spread through them ------------------------
@dataclass
class LedgerSeed:
    """Rows for async_jobs and plans, built in job_id order, and the findings they must give."""

    now: datetime = field(default_factory=utcnow)
    jobs: list[dict[str, Any]] = field(default_factory=list)
    plans: list[dict[str, Any]] = field(default_factory=list)
    expected: Expected = field(default_factory=set)
    _tick: Iterator[int] = field(default_factory=itertools.count)

    def _at(self) -> datetime:
        return self.now - timedelta(hours=2) + timedelta(milliseconds=next(self._tick))

    def plan(self, phase: str, status: str) -> str:
        plan_id, at = new_id(), self._at()
        self.plans.append(
            {
                "plan_id": plan_id,
                "name": "seeded",
                "phase": phase,
                "status": status,
                "spec_json": '{"steps": []}',
                "created_at": at,
                "updated_at": at,
                "version": 1,
            }
        )
        return plan_id

    def job(
        self,
        plan_id: str,
        phase: str,
        status: str = "succeeded",
        payload: str | None = None,
        heartbeat: datetime | None = None,
        attempt: int = 1,
    ) -> str:
        job_id, at = new_id(), self._at()
        self.jobs.append(
            {
                "job_id": job_id,
                "plan_id": plan_id,
                "phase": phase,
                "status": status,
                "schema_version": 1,
                "payload_json": serialize_job_payload(plan_id, phase)
                if payload is None
                else payload,
                "worker_id": "worker-seed-1",
                "created_at": at,
                "started_at": at,
                "finished_at": None if status == "running" else at,
                "last_heartbeat": heartbeat or at,
                "attempt": attempt,
                "dispatch_count": 1,
                "dispatched_at": at,
            }
        )
        return job_id

    # Each kind adds one plan and its jobs.
    def good(self) -> None:
        plan_id = self.plan("apply", "complete")
        for phase in ("strategize", "execute", "apply"):
            self.job(plan_id, phase)

    def retried(self) -> None:  # an older failed attempt is not its plan's latest job: fine
        plan_id = self.plan("execute", "complete")
        self.job(plan_id, "strategize")
        self.job(plan_id, "execute", "failed", attempt=1)
        self.job(plan_id, "execute", "succeeded", attempt=2)

    def live(self) -> None:  # running with a fresh heartbeat: fine
        plan_id = self.plan("execute", "running")
        self.job(plan_id, "strategize")
        self.job(plan_id, "execute", "running", heartbeat=self.now + timedelta(hours=1))

    def stale(self) -> None:
        plan_id = self.plan("execute", "running")
        self.job(plan_id, "strategize")
        job_id = self.job(plan_id, "execute", "running", heartbeat=self.now - timedelta(hours=1))
        self.expected.add((STALE_HEARTBEAT, "inconsistent", job_id))

    def mismatch(self) -> None:  # the job succeeded, the plan still says running
        plan_id = self.plan("execute", "running")
        self.job(plan_id, "strategize")
        self.job(plan_id, "execute", "succeeded")
        self.expected.add((PLAN_JOB_MISMATCH, "inconsistent", plan_id))

    def corrupt(self) -> None:  # not JSON: the domain model refuses it, raw SQL does not
        plan_id = self.plan("strategize", "complete")
        job_id = self.job(plan_id, "strategize", payload='{"plan_id": "trunc')
        self.expected.add((CORRUPT_PAYLOAD, "data_loss", job_id))

    def foreign(self) -> None:  # valid JSON naming another plan
        plan_id = self.plan("strategize", "complete")
        job_id = self.job(plan_id, "strategize", payload=serialize_job_payload(new_id(), "x"))
        self.expected.add((CORRUPT_PAYLOAD, "data_loss", job_id))

    def build(self, good_plans: int, every: int) -> LedgerSeed:
        """good_plans good plans; after every `every` of them, one of each other kind."""
        kinds = [self.stale, self.mismatch, self.corrupt, self.foreign, self.live, self.retried]
        for i in range(good_plans):
            self.good()
            if i % every == every // 2:
                for kind in kinds:
                    kind()
        return self

    def insert(self, db: Database) -> int:
        with db.engine.begin() as conn:
            conn.execute(insert(PlanModel.__table__), self.plans)
            conn.execute(insert(AsyncJobModel.__table__), self.jobs)
        return len(self.jobs)


# -- fixtures and helpers ---------------------------------------------------------------------
# Not the shared test DB 13: any worker on it (other tests' too) consumes planq.runs, and a
# trigger taken by a worker of another test would scan that test's ledger instead.
RUNS_REDIS_URL = os.environ["PLANQ_TEST_RUNS_REDIS_URL"]  # tests/resources.py


@pytest.fixture
def runs_redis_url() -> str:
    """A Redis database for recoverable-run tests alone, emptied before each test."""
    flush_redis(RUNS_REDIS_URL)
    return RUNS_REDIS_URL


@pytest.fixture
def app(runs_redis_url: str, pg_database: Database, pg_url: str) -> Celery:
    app = make_app(runs_redis_url, pg_url, max_workers=4, job_timeout=120.0)
    app.conf.result_backend = runs_redis_url  # these tests read each trigger's JobOutcome
    return app


@pytest.fixture
def restart_free_app(runs_redis_url: str, tmp_path: Path) -> Celery:
    """An app on a SQLite ledger, for the stale sweeps: no server whose restart holds them off.

    On PostgreSQL a stale sweep waits until the server has been up for stale_after (300 s
    here; domain/availability.py), so these would depend on when another test restarted it.
    That rule has its own tests (tests/integration/test_fair_expiry.py).
    """
    ledger = f"sqlite:///{tmp_path / 'runs.db'}"  # a new file: the app migrates it itself
    return make_app(runs_redis_url, ledger, max_workers=4, job_timeout=120.0)


@pytest.fixture
def runtime(app: Celery) -> Iterator[Runtime]:
    with embedded_runtime(app) as rt:
        yield rt
        # A scan left running would hold the worker's stop: ask it to pause first.
        request_cancel(app, JOB)
        wait_for(lambda: not _active(rt), timeout=30, what="no active run at teardown")


def _active(rt: Runtime) -> bool:
    return any(r.status.is_active for r in rt.runs.list_runs(JOB, limit=5))


def trigger(app: Celery, **args: object) -> AsyncResult:
    """Send the job's task (through Redis to the worker), its result kept for this test."""
    kwargs = {"args": {k: str(v) for k, v in args.items()}} if args else {}
    return app.tasks[TASK].apply_async(kwargs=kwargs, ignore_result=False)


# -- the job on the worker --------------------------------------------------------------------
def test_trigger_completes_with_exactly_the_seeded_findings(app: Celery, runtime: Runtime) -> None:
    seed = LedgerSeed().build(good_plans=60, every=20)
    total = seed.insert(runtime.db)

    outcome = trigger(app, batch_size=25).get(timeout=60)

    assert outcome["completed"] is True and outcome["ok"] is True, outcome
    run = runtime.runs.get_run_by_id(outcome["run_id"])
    assert run is not None and run.status is RunStatus.Completed
    assert run.scanned_count == total == outcome["scanned_count"]
    assert run.progress is not None and run.progress.total == total
    assert run.params["batch_size"] == "25"
    assert run.owner is not None and run.owner.startswith("planq-embedded-")
    found = findings(runtime, run.id)
    assert sorted(found) == sorted(seed.expected)  # no duplicate, none missed
    assert outcome["severity_counts"] == {"data_loss": 6, "inconsistent": 6}  # those present
    assert outcome["extra"] == {
        "completed": True,
        "run_id": run.id,
        "finding_count": 12,
        "scanned_count": total,
        "severity_counts": {"data_loss": 6, "inconsistent": 6},
    }
    stale = [f for f in runtime.runs.list_findings(run.id) if f.kind == STALE_HEARTBEAT]
    assert stale[0].detail["age_seconds"] >= 3600 and stale[0].detail["job_timeout"] == 120.0


def test_trigger_while_active_is_skipped(app: Celery, runtime: Runtime) -> None:
    seed = LedgerSeed().build(good_plans=150, every=50)
    total = seed.insert(runtime.db)
    first = trigger(app, batch_size=20, checkpoint_rows=20, batch_delay=0.05)
    active = wait_run(runtime, "a first checkpoint", lambda r: r.scanned_count > 0)

    second = trigger(app).get(timeout=30)

    assert second["skipped"] == "already_running" and second["ok"] is True, second
    assert second["run_id"] == active.id and second["status"] == "Running"
    assert second["extra"] == {
        "skipped": "already_running",
        "run_id": active.id,
        "status": "Running",
    }
    done = first.get(timeout=60)
    assert done["completed"] is True and done["scanned_count"] == total
    assert [r.id for r in runtime.runs.list_runs(JOB)] == [active.id]  # no twin was started
    assert sorted(findings(runtime, active.id)) == sorted(seed.expected)


def test_cancel_pauses_at_the_cursor_and_a_trigger_resumes_there(
    app: Celery, runtime: Runtime
) -> None:
    seed = LedgerSeed().build(good_plans=200, every=40)
    total = seed.insert(runtime.db)
    first = trigger(app, batch_size=20, checkpoint_rows=20, batch_delay=0.05)
    wait_run(runtime, "100 rows checkpointed", lambda r: r.scanned_count >= 100)

    assert request_cancel(app, JOB) is not None
    paused = first.get(timeout=30)

    assert paused["paused"] is True and paused["ok"] is True, paused
    run = runtime.runs.get_run_by_id(paused["run_id"])
    assert run is not None and run.status is RunStatus.Paused and run.error_message is None
    assert run.cursor_hex is not None and run.cursor_hex == paused["cursor_hex"]
    assert paused["extra"]["paused"] is True and paused["extra"]["cursor_hex"] == run.cursor_hex
    cursor_job_id = bytes.fromhex(run.cursor_hex).decode()
    assert run.scanned_count == sum(1 for j in seed.jobs if j["job_id"] <= cursor_job_id)
    assert 100 <= run.scanned_count < total
    before = findings(runtime, run.id)
    assert set(before) < seed.expected and len(before) == len(set(before))

    resumed = trigger(app, batch_delay=0).get(timeout=60)

    assert resumed["completed"] is True and resumed["run_id"] == run.id, resumed
    assert resumed["scanned_count"] == total  # resumed at the cursor: nothing counted twice
    assert sorted(findings(runtime, run.id)) == sorted(seed.expected)
    final = runtime.runs.get_run_by_id(run.id)
    assert final is not None and final.params["batch_delay"] == "0"
    assert final.params["batch_size"] == "20"  # kept from the first trigger


def test_a_bad_param_fails_the_run_with_a_clear_message(app: Celery, runtime: Runtime) -> None:
    sent = trigger(app, batch_size=0)
    failure = sent.get(timeout=30, propagate=False)

    assert sent.state == "FAILURE" and isinstance(failure, RunFailed), failure  # Flower's truth
    message = str(failure)
    assert message.startswith("ledger_consistency param batch_size must be in"), message
    run = runtime.runs.list_runs(JOB, limit=1)[0]
    assert message.endswith(f"(run_id={run.id})") and run.status is RunStatus.Failed
    assert run.error_message is not None
    assert "batch_size must be in [1, 10000]" in run.error_message
    assert "batch_size" not in run.params  # a bad value is never stored for a resume


class Flaky:
    """Raises after its first checkpoint (the spec's panic), completes when resumed."""

    name = "flaky"

    def __init__(self) -> None:
        self.cursors: list[bytes | None] = []

    def run_resumable(
        self, store: RunStore, args: Mapping[str, Any], resume_cursor: bytes | None
    ) -> RunOutcome:
        self.cursors.append(resume_cursor)
        if resume_cursor is None:
            store.checkpoint(b"row-3", 3)
            raise RuntimeError("lost the source: password=hunter2-secret")
        store.checkpoint(b"row-8", 5)
        return Completed()


def test_a_raising_handler_pauses_its_run_and_the_next_trigger_resumes_it(app: Celery) -> None:
    flaky = Flaky()
    register_recoverable_job(app, flaky)  # before the worker starts, so it knows the task
    with embedded_runtime(app) as rt:
        first = app.tasks["planq.runs.flaky"].apply_async(ignore_result=False).get(timeout=30)

        assert first["ok"] is False and first["paused"] is True, first  # the task did not raise
        assert first["status"] == "Paused" and first["cursor_hex"] == b"row-3".hex()
        assert "hunter2" not in str(first) and first["error"].startswith("RuntimeError: ")
        run = rt.runs.get_run_by_id(first["run_id"])
        assert run is not None and run.status is RunStatus.Paused
        assert run.error_message == first["error"] and run.cursor_hex == b"row-3".hex()

        second = app.tasks["planq.runs.flaky"].apply_async(ignore_result=False).get(timeout=30)

        assert second["ok"] is True and second["completed"] is True, second
        assert second["run_id"] == run.id and second["scanned_count"] == 8
        assert flaky.cursors == [None, b"row-3"]


# -- the boot recovery sweep ------------------------------------------------------------------
def test_the_specs_sweep_without_arguments_pauses_every_active_run(app: Celery) -> None:
    runs = runtime_for(app).runs
    try:
        opened = [runs.open_or_start(name, owner=f"{name}@host") for name in ("a", "b", "c")]
        assert all(isinstance(o, Fresh) for o in opened)
        runs.request_cancel("c")

        swept = boot_recovery_sweep(app)  # one node, embedded, or after a full-fleet restart

        assert swept == 3 and len(swept.run_ids) == 3
        for run in runs.list_runs():
            assert run.status is RunStatus.Paused and run.error_message == SERVER_RESTART_ERROR
        assert boot_recovery_sweep(app) == 0
    finally:
        reset_runtime(app)


def test_worker_start_sweeps_its_own_and_stale_runs_never_a_live_one(
    restart_free_app: Celery,
) -> None:
    app = restart_free_app
    node = "sweeper@planq-test"
    runs = runtime_for(app).runs
    try:
        ids = {}
        for name, owner in [
            ("own", node),
            ("own_cancelling", node),
            ("live_elsewhere", "alive@other-host"),
            ("stale_elsewhere", "gone@other-host"),
        ]:
            opened = runs.open_or_start(name, owner=owner)
            assert isinstance(opened, Fresh)
            ids[name] = opened.store.run_id
            if name == "own":
                opened.store.checkpoint(b"job-0042", 42)
        runs.request_cancel("own_cancelling")
        with runtime_for(app).db.session() as s:
            s.execute(
                update(RecoverableRunModel)
                .where(RecoverableRunModel.id == ids["stale_elsewhere"])
                # its worker is gone: no progress and no heartbeat for an hour
                .values(
                    last_progress_at=utcnow() - timedelta(hours=1),
                    heartbeat_at=utcnow() - timedelta(hours=1),
                )
            )

        with start_worker(app, pool="threads", hostname=node, perform_ping_check=False):
            status = {name: runs.get_run_by_id(run_id) for name, run_id in ids.items()}

        for name in ("own", "own_cancelling", "stale_elsewhere"):
            swept = status[name]
            assert swept is not None and swept.status is RunStatus.Paused, name
            assert swept.error_message == SWEEP_ERROR
        own = status["own"]
        assert own is not None and own.cursor_hex == b"job-0042".hex() and own.scanned_count == 42
        live = status["live_elsewhere"]
        assert live is not None and live.status is RunStatus.Running  # a live owner keeps it
    finally:
        reset_runtime(app)


def test_the_periodic_sweep_pauses_only_runs_whose_worker_is_gone(
    restart_free_app: Celery,
) -> None:
    app = restart_free_app
    runs = runtime_for(app).runs
    try:
        stale = runs.open_or_start("orphaned", owner="gone-for-good@other-host")
        live = runs.open_or_start("busy", owner="alive@other-host")
        assert isinstance(stale, Fresh) and isinstance(live, Fresh)
        stale.store.checkpoint(b"job-0007", 7)
        with runtime_for(app).db.session() as s:
            s.execute(
                update(RecoverableRunModel)
                .where(RecoverableRunModel.id == stale.store.run_id)
                # its worker is gone: no progress and no heartbeat for an hour
                .values(
                    last_progress_at=utcnow() - timedelta(hours=1),
                    heartbeat_at=utcnow() - timedelta(hours=1),
                )
            )
        assert "planq-sweep-stale-runs" in app.conf.beat_schedule
        swept = app.tasks["planq.maintenance.sweep_stale_runs"]()  # what beat sends
        assert swept == [stale.store.run_id]
        orphan = runs.get_run_by_id(stale.store.run_id)
        assert orphan is not None and orphan.status is RunStatus.Paused
        assert orphan.error_message == SWEEP_ERROR and orphan.cursor_hex == b"job-0007".hex()
        busy = runs.get_run_by_id(live.store.run_id)
        assert busy is not None and busy.status is RunStatus.Running
        assert app.tasks["planq.maintenance.sweep_stale_runs"]() == []  # idempotent
    finally:
        reset_runtime(app)


# -- registration -----------------------------------------------------------------------------
def offline_app(**settings: Any) -> Celery:
    """An app that never connects (these tests only inspect its configuration)."""
    return bootstrap(load_settings(database_url="sqlite:///unused.db", **settings))


def test_the_task_has_no_time_limit_and_is_acked_on_receipt() -> None:
    app = offline_app()
    task = app.tasks[TASK]
    assert task.time_limit is None and task.soft_time_limit is None
    assert app.conf.task_time_limit is None and app.conf.task_soft_time_limit is None
    assert task.acks_late is False and task.reject_on_worker_lost is False
    assert app.amqp.router.route({}, TASK)["queue"].name == "planq.runs"
    assert "planq.runs" in {q.name for q in app.conf.task_queues}
    other = offline_app()
    assert other.tasks[TASK] is not task  # not shared between apps


@pytest.mark.parametrize(("interval", "entry"), [(90.0, True), (0.0, False)])
def test_beat_entry_follows_the_interval_setting(interval: float, entry: bool) -> None:
    app = offline_app(ledger_consistency_interval=interval)
    schedule = app.conf.beat_schedule
    assert ("planq-runs-ledger_consistency" in schedule) is entry
    if entry:
        assert schedule["planq-runs-ledger_consistency"] == {"task": TASK, "schedule": 90.0}
    assert "planq-detect-stuck-jobs" in schedule  # maintenance entries untouched


class Handler:
    """A minimal valid handler; tests break one attribute at a time."""

    name = "probe"

    def run_resumable(
        self, store: RunStore, args: Mapping[str, Any], resume_cursor: bytes | None
    ) -> RunOutcome:
        return Completed()


def _broken(**attrs: Any) -> Handler:
    handler = Handler()
    for key, value in attrs.items():
        setattr(handler, key, value)
    return handler


@pytest.mark.parametrize(
    ("handler", "interval", "error", "message"),
    [
        (object(), None, TypeError, "needs a str attribute `name`"),
        (_broken(name=None), None, TypeError, "needs a str attribute `name`"),
        (_broken(name=""), None, ValueError, "must be 1-200 characters"),
        (_broken(name="two words"), None, ValueError, "must be 1-200 characters"),
        (_broken(run_resumable="nope"), None, TypeError, "callable run_resumable"),
        (_broken(count_total=3), None, TypeError, "count_total must be callable"),
        (Handler(), -1, ValueError, "interval must be >= 0"),
        (Handler(), "60", TypeError, "interval must be a number"),
        (_broken(name=JOB), None, ValueError, "already registered"),
    ],
)
def test_registration_refuses_bad_handlers(
    handler: object, interval: Any, error: type[Exception], message: str
) -> None:
    app = offline_app()
    with pytest.raises(error, match=message.replace("[", r"\[").replace("(", r"\(")):
        register_recoverable_job(app, handler, interval)  # type: ignore[arg-type]
    assert "planq.runs.probe" not in app.tasks


def test_registration_refuses_a_global_time_limit() -> None:
    app = offline_app()
    app.conf.task_time_limit = 3600
    with pytest.raises(ValueError, match="task_time_limit is set"):
        register_recoverable_job(app, Handler())


def test_a_registered_handler_gets_its_task_and_beat_entry() -> None:
    app = offline_app()
    task = register_recoverable_job(app, Handler(), interval=30)
    assert task.name == "planq.runs.probe" and app.tasks["planq.runs.probe"] is task
    assert app.conf.beat_schedule["planq-runs-probe"]["schedule"] == 30.0
