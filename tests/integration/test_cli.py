"""The `planq` CLI against real ledgers (PostgreSQL and SQLite) and the test Redis broker.

Commands run in-process through typer's CliRunner with PLANQ_* set by monkeypatch; a few run
as real processes, where a traceback or a slow import would show.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
import redis
from celery.signals import after_task_publish
from sqlalchemy import inspect, select
from typer.testing import CliRunner, Result

from planq.cli.main import app
from planq.domain.clock import utcnow
from planq.domain.jobs import AsyncJob, AsyncJobStatus
from planq.domain.ledger import JobLedger
from planq.domain.lifecycle import PlanLifecycleService
from planq.domain.plans import Plan
from planq.domain.runs import Fresh, RunStatus, Severity
from planq.store import Database, sql_ledger
from planq.store.migrate import upgrade
from planq.store.models import RecoverableRunModel
from planq.store.runs_sql import SqlRunStoreProvider
from planq.tasks.trigger_slot import slot_key
from tests.resources import free_port
from tests.support import REDIS_TEST_URL, flush_redis, wait_for

ROOT = Path(__file__).resolve().parents[2]
UNKNOWN_ULID = "01ARZ3NDEKTSV4RRFFQ69G5FAV"
MAINTENANCE = {
    "planq.maintenance.detect_stuck_jobs",
    "planq.maintenance.cleanup_expired_jobs",
    "planq.maintenance.prepare_partitions",
    "planq.maintenance.relay_dispatch",
}


# -- the ledger under the CLI, and what the tests seed into it -----------------------------
@dataclass
class Ledger:
    """A migrated ledger the CLI is pointed at, with seeding helpers that bypass the CLI."""

    url: str
    db: Database

    def __post_init__(self) -> None:
        self.jobs, self.plans = sql_ledger(self.db)
        self.ledger = JobLedger(self.jobs, self.plans)
        self.lifecycle = PlanLifecycleService(self.plans, self.jobs)  # no publisher: rows only
        self.runs = SqlRunStoreProvider(self.db)

    def plan(self, *steps: str, name: str = "seeded") -> Plan:
        return self.lifecycle.create_plan(list(steps or ("a", "b")), name=name)

    def queued(self, plan: Plan | None = None) -> AsyncJob:
        """A queued strategize job (never published)."""
        queued = self.lifecycle.strategize_plan((plan or self.plan()).plan_id)
        assert queued.job is not None
        return queued.job

    def running(self, heartbeat_age: float = 0.0) -> AsyncJob:
        job = self.queued()
        claimed = self.ledger.claim(job.job_id, "worker-test-1")
        assert claimed is not None
        if heartbeat_age:
            self.jobs.heartbeat([job.job_id], utcnow() - timedelta(seconds=heartbeat_age))
        return claimed.job

    def ended(self, status: AsyncJobStatus, finished_ago: float = 0.0) -> AsyncJob:
        job = self.running()
        assert self.ledger.finish(job, status, "boom" if status is AsyncJobStatus.failed else None)
        row = self.get(job.job_id)
        if finished_ago:
            row.finished_at = utcnow() - timedelta(seconds=finished_ago)
            self.jobs.update(row)
        return row

    def get(self, job_id: str) -> AsyncJob:
        row = self.jobs.get(job_id)
        assert row is not None
        return row

    def run(
        self,
        name: str,
        findings: int = 0,
        end: RunStatus | None = RunStatus.Completed,
        ago: timedelta = timedelta(0),
    ) -> str:
        """A recoverable run of name that started `ago`, with findings, ended as `end`."""
        provider = SqlRunStoreProvider(self.db, clock=lambda: utcnow() - ago)
        opened = provider.open_or_start(name, owner="node-a@host")
        assert isinstance(opened, Fresh)
        store = opened.store
        severities = list(Severity)
        for i in range(findings):
            store.record_finding(f"kind-{i}", severities[i % 3], f"res-{i}", {"i": i})
        if end is RunStatus.Completed:
            assert store.mark_completed()
        elif end is RunStatus.Failed:
            assert store.mark_failed("scan broke")
        return store.run_id

    def run_status(self, run_id: str) -> str | None:
        with self.db.session() as s:
            return s.scalar(
                select(RecoverableRunModel.status).where(RecoverableRunModel.id == run_id)
            )


@pytest.fixture(params=["postgres", "sqlite"])
def ledger(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Ledger]:
    """The CLI's ledger on each backend (PostgreSQL emptied per test, a fresh SQLite file)."""
    if request.param == "postgres":
        db: Database = request.getfixturevalue("pg_database")
        yield Ledger(request.getfixturevalue("pg_url"), db)
        return
    url = f"sqlite:///{tmp_path / 'cli-ledger.db'}"
    upgrade(url)
    db = Database(url)
    yield Ledger(url, db)
    db.close()


@pytest.fixture
def env(ledger: Ledger, monkeypatch: pytest.MonkeyPatch) -> dict[str, str]:
    """PLANQ_* for the CLI: this ledger, the test Redis; nothing else from the outer env.

    Redis is not flushed (nothing here reads a queue: `published` records what the broker
    accepted), so overlapping test runs on the same database are left alone.
    """
    for key in list(os.environ):
        if key.startswith("PLANQ_"):
            monkeypatch.delenv(key)
    values = {"PLANQ_DATABASE_URL": ledger.url, "PLANQ_BROKER_URL": REDIS_TEST_URL}
    for key, value in values.items():
        monkeypatch.setenv(key, value)
    return values


# -- running commands ------------------------------------------------------------------------
def planq(*args: object) -> Result:
    return CliRunner().invoke(app, [str(a) for a in args])


def ok(*args: object) -> Result:
    result = planq(*args)
    assert result.exit_code == 0, (
        f"planq {args} exited {result.exit_code}\nstdout: {result.stdout}\n"
        f"stderr: {result.stderr}\nexception: {result.exception!r}"
    )
    return result


def ok_json(*args: object) -> Any:
    return json.loads(ok(*args, "--json").stdout)


def fails(code: int, *args: object) -> str:
    """Run, expect exit `code` with ONE stderr line and no traceback; return that line."""
    result = planq(*args)
    assert result.exit_code == code, (
        f"planq {args}: expected exit {code}, got {result.exit_code}\n"
        f"stdout: {result.stdout}\nstderr: {result.stderr}\nexception: {result.exception!r}"
    )
    assert isinstance(result.exception, SystemExit), repr(result.exception)
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert "Traceback" not in result.output
    return lines[0]


@dataclass
class Sent:
    """One message the broker accepted (Celery's after_task_publish)."""

    task_id: str
    task: str
    routing_key: str
    kwargs: dict[str, Any]


@pytest.fixture
def published() -> Iterator[list[Sent]]:
    """Messages published to the broker during the test (recorded after the broker took them).

    The queue itself is not inspected: other test runs' workers may share the test Redis.
    """
    sent: list[Sent] = []

    def record(sender: Any = None, headers: Any = None, body: Any = None, **kw: Any) -> None:
        kwargs = body[1] if isinstance(body, list | tuple) and len(body) > 1 else {}
        sent.append(Sent(headers["id"], headers["task"], kw.get("routing_key", ""), kwargs))

    after_task_publish.connect(record, weak=False)
    yield sent
    after_task_publish.disconnect(record)


# -- plans ---------------------------------------------------------------------------------
def test_plans_create_list_and_show_as_table_and_json(env: dict[str, str], ledger: Ledger) -> None:
    created = ok_json("plans", "create", "--steps", "fetch,score:0.5,apply", "--name", "nightly")
    assert created["state"] == "New"
    assert created["steps"] == 3
    stored = ledger.plans.get(created["plan_id"])
    assert stored is not None and stored.name == "nightly"
    assert stored.steps[1] == {"name": "score", "seconds": 0.5}

    listed = ok_json("plans", "list")
    assert [p["plan_id"] for p in listed["plans"]] == [created["plan_id"]]
    assert listed["plans"][0] == stored.as_cli_dict()
    assert (listed["total"], listed["limit"], listed["offset"]) == (1, 50, 0)
    table = ok("plans", "list").stdout
    assert created["plan_id"] in table and "nightly" in table and "New" in table

    shown = ok_json("plans", "show", created["plan_id"].lower())
    assert shown["plan_id"] == created["plan_id"] and shown["jobs"] == []
    assert "fetch, score, apply" in ok("plans", "show", created["plan_id"]).stdout


def test_plans_list_is_newest_first_and_says_how_many(env: dict[str, str], ledger: Ledger) -> None:
    first, second, third = (ledger.plan(name=n) for n in ("one", "two", "three"))
    page = ok_json("plans", "list", "--limit", 2)
    assert [p["plan_id"] for p in page["plans"]] == [third.plan_id, second.plan_id]
    assert page["total"] == 3
    rest = ok_json("plans", "list", "--limit", 2, "--offset", 2)
    assert [p["plan_id"] for p in rest["plans"]] == [first.plan_id] and rest["total"] == 3
    table = ok("plans", "list", "--limit", 2).stdout
    assert table.index(third.plan_id) < table.index(second.plan_id)
    assert first.plan_id not in table and "showing 2 of 3 (newest first; next page" in table
    assert "showing 3-3 of 3" in ok("plans", "list", "--limit", 2, "--offset", 2).stdout
    assert page["next_after"] == second.plan_id and "--after" in table  # the keyset cursor
    newer = ledger.plan(name="four")  # added meanwhile: the next page by key is unchanged
    keyed = ok_json("plans", "list", "--limit", 2, "--after", page["next_after"])
    assert [p["plan_id"] for p in keyed["plans"]] == [first.plan_id]
    assert (keyed["next_after"], keyed["total"]) == (None, 4) and newer.plan_id
    gone = ok_json("plans", "list", "--after", page["next_after"].lower())  # ids fold case
    assert [p["plan_id"] for p in gone["plans"]] == [first.plan_id]


def test_plans_create_refuses_an_empty_step(env: dict[str, str], ledger: Ledger) -> None:
    assert "empty step name" in fails(2, "plans", "create", "--steps", "a,,b")
    assert ledger.plans.list_all() == []


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (("--name", "x" * 201), "at most 200 characters"),
        (("--name", "bad\x00name"), "NUL"),
        (("--steps", "ok,bad\x00step"), "NUL"),
    ],
)
def test_plans_create_refuses_what_the_ledger_cannot_hold(
    env: dict[str, str], ledger: Ledger, args: tuple[str, str], expected: str
) -> None:
    full = (
        ["plans", "create", "--steps", "a", *args]
        if args[0] == "--name"
        else ["plans", "create", *args]
    )
    assert expected in fails(2, *full)
    assert ledger.plans.list_all() == []  # PostgreSQL would have said DataError: nothing written


def test_strategize_commits_the_row_then_publishes_it(
    env: dict[str, str], ledger: Ledger, published: list[Sent]
) -> None:
    plan = ledger.plan("a")
    out = ok_json("plans", "strategize", plan.plan_id)
    job = out["job"]
    assert out["plan"]["state"] == "Strategize/QUEUED"
    assert (job["phase"], job["status"], job["dispatched"]) == ("strategize", "queued", True)
    row = ledger.get(job["job_id"])
    assert row.status is AsyncJobStatus.queued
    assert row.dispatched_at is not None and row.dispatch_count == 1
    assert [(m.task_id, m.task, m.routing_key) for m in published] == [
        (job["job_id"], "planq.strategize_plan", "planq.strategize")  # task id = job id
    ]


def test_a_job_that_failed_before_its_stamp_is_not_reported_unsent(
    env: dict[str, str], ledger: Ledger
) -> None:
    """A fast worker ends the job between the publish and the stamp: no false warning.

    The worker here is the ledger's own claim and finish, run the moment the broker took the
    message (Celery's after_task_publish), so the job has failed before the CLI stamps it.
    """
    plan = ledger.plan("a")

    def fast_worker(headers: Any = None, **_: Any) -> None:
        claimed = ledger.ledger.claim(headers["id"], "fast-worker")
        assert claimed is not None
        assert ledger.ledger.finish(claimed.job, AsyncJobStatus.failed, "ValueError: bad step")

    after_task_publish.connect(fast_worker, weak=False)
    try:
        result = ok("plans", "strategize", plan.plan_id, "--json")
    finally:
        after_task_publish.disconnect(fast_worker)
    job = json.loads(result.stdout)["job"]
    assert (job["status"], job["dispatched"]) == ("failed", True)
    assert "not sent" not in result.stderr and "warning" not in result.stderr
    shown = ok_json("jobs", "show", job["job_id"])
    assert (shown["dispatched"], shown["dispatch_count"]) == (True, 1)
    assert shown["dispatched_at"] is not None


def test_a_phase_out_of_order_is_refused_and_writes_nothing(
    env: dict[str, str], ledger: Ledger
) -> None:
    plan = ledger.plan()
    line = fails(1, "plans", "execute", plan.plan_id)
    assert line.startswith("planq: refused:") and "Execute/QUEUED" in line
    assert ledger.jobs.list_by_plan(plan.plan_id) == []
    assert ledger.plans.get(plan.plan_id).label == "New"  # type: ignore[union-attr]


def test_publishing_needs_the_broker_and_touches_nothing_without_it(
    env: dict[str, str], ledger: Ledger, monkeypatch: pytest.MonkeyPatch, published: list[Sent]
) -> None:
    monkeypatch.setenv("PLANQ_BROKER_URL", "redis://127.0.0.1:1/0")
    plan = ledger.plan()
    assert fails(3, "plans", "strategize", plan.plan_id).startswith("planq: unavailable: broker")
    assert ledger.jobs.list_by_plan(plan.plan_id) == [] and published == []
    assert ok_json("plans", "show", plan.plan_id)["state"] == "New"  # listing needs no broker


def test_publishing_refuses_the_in_process_memory_broker(
    env: dict[str, str], ledger: Ledger, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PLANQ_BROKER_URL", "memory://")
    failed = ledger.ended(AsyncJobStatus.failed)
    assert "memory://" in fails(2, "jobs", "retry", failed.job_id)
    assert len(ledger.jobs.list_by_plan(failed.plan_id)) == 1


def test_watch_exits_0_once_every_job_has_succeeded(env: dict[str, str], ledger: Ledger) -> None:
    job = ledger.ended(AsyncJobStatus.succeeded)
    out = ok("plans", "watch", job.plan_id, "--timeout", 5).stdout
    assert job.job_id in out and "succeeded" in out
    doc = ok_json("plans", "watch", job.plan_id, "--timeout", 5)
    assert doc["done"] is True and [j["status"] for j in doc["jobs"]] == ["succeeded"]


def test_watch_exits_1_with_the_error_when_the_job_failed(
    env: dict[str, str], ledger: Ledger
) -> None:
    """`execute && watch` must stop a script on a failure, and say what failed."""
    job = ledger.ended(AsyncJobStatus.failed)  # its error: "boom"
    line = fails(1, "plans", "watch", job.plan_id, "--timeout", 5)
    assert line.startswith("planq: failed:") and job.job_id in line and line.endswith(": boom")
    result = planq("plans", "watch", job.plan_id, "--timeout", 5, "--json")
    assert result.exit_code == 1 and "boom" in result.stderr
    doc = json.loads(result.stdout)  # the JSON document still comes, for scripts
    assert doc["done"] is True and doc["jobs"][0]["error_message"] == "boom"


def test_watch_exits_4_when_the_job_was_cancelled(env: dict[str, str], ledger: Ledger) -> None:
    job = ledger.queued()
    ledger.ledger.cancel(job.job_id)
    line = fails(4, "plans", "watch", job.plan_id, "--timeout", 5)
    assert line == f"planq: cancelled: job {job.job_id} (strategize, try 1) was cancelled"
    assert planq("plans", "watch", job.plan_id, "--json").exit_code == 4


def test_watch_follows_the_latest_try_not_a_failure_it_replaced(
    env: dict[str, str], ledger: Ledger
) -> None:
    failed = ledger.ended(AsyncJobStatus.failed)
    retry = ledger.ledger.retry(failed)
    assert retry is not None
    claimed = ledger.ledger.claim(retry.job_id, "worker-test-2")
    assert claimed is not None and ledger.ledger.finish(claimed.job, AsyncJobStatus.succeeded)
    doc = ok_json("plans", "watch", failed.plan_id, "--timeout", 5)
    assert [j["status"] for j in doc["jobs"]] == ["failed", "succeeded"]


def test_ctrl_c_in_watch_says_the_job_keeps_running_and_how_to_cancel_it(
    env: dict[str, str], ledger: Ledger
) -> None:
    """A person at a terminal: the bars are drawn, Ctrl-C stops the watching, not the job."""
    import pty
    import select

    job = ledger.running()
    main, child = pty.openpty()
    watch = subprocess.Popen(
        [_planq_script(), "plans", "watch", job.plan_id, "--interval", "0.1"],
        env=_process_env(**env, COLUMNS="200"),
        stdin=child,
        stdout=child,
        stderr=subprocess.PIPE,
        start_new_session=True,
        # A person's shell hands Ctrl-C to the program; a CI job started in the background
        # ignores SIGINT, and that SIG_IGN would be inherited: give the child the default.
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )
    os.close(child)
    drawn = bytearray()
    try:

        def bars_drawn() -> bool:
            assert watch.poll() is None, watch.stderr.read() if watch.stderr else b""
            if select.select([main], [], [], 0.2)[0]:
                drawn.extend(os.read(main, 65536))
            return job.job_id.encode() in drawn and b"running" in drawn

        wait_for(bars_drawn, timeout=60, interval=0, what="the watch to draw the running job")
        watch.send_signal(signal.SIGINT)  # what Ctrl-C sends to the foreground process
        # Keep reading the terminal until it exits: its last frame (and the bars drawn
        # while a loaded machine delivers the signal) must not block on a full pty.
        deadline = time.monotonic() + 30
        while watch.poll() is None and time.monotonic() < deadline:
            if select.select([main], [], [], 0.1)[0]:
                try:
                    drawn.extend(os.read(main, 65536))
                except OSError:  # EIO: the child closed the terminal
                    break
        _, err = watch.communicate(timeout=max(1.0, deadline - time.monotonic()))
    finally:
        if watch.poll() is None:
            os.killpg(watch.pid, signal.SIGKILL)
            watch.wait(10)
        os.close(main)
    lines = err.decode().strip().splitlines()
    assert watch.returncode == 130 and len(lines) == 1, err
    assert lines[0] == (
        f"planq: interrupted: stopped watching; job {job.job_id} keeps running "
        f"(cancel: `planq jobs cancel {job.job_id}`)"
    )
    assert ledger.get(job.job_id).status is AsyncJobStatus.running  # the job was not touched


def test_watch_times_out_with_exit_1(env: dict[str, str], ledger: Ledger) -> None:
    job = ledger.queued()
    line = fails(1, "plans", "watch", job.plan_id, "--timeout", 0.3, "--interval", 0.05)
    assert line.startswith("planq: timeout:") and job.job_id in line


def test_watch_honours_its_timeout_whatever_the_interval(
    env: dict[str, str], ledger: Ledger
) -> None:
    job = ledger.queued()
    start = time.monotonic()
    line = fails(1, "plans", "watch", job.plan_id, "--timeout", 1, "--interval", 1000)
    took = time.monotonic() - start
    assert line.startswith("planq: timeout: after 1s") and job.job_id in line
    assert 1.0 <= took < 30, took  # slept min(interval, remaining), not the 1000 s interval


def test_tables_show_the_readers_zone_and_json_stays_utc(
    env: dict[str, str], ledger: Ledger, monkeypatch: pytest.MonkeyPatch
) -> None:
    from zoneinfo import ZoneInfo

    plan = ledger.plan(name="zoned")
    stored = ledger.plans.get(plan.plan_id)
    assert stored is not None
    monkeypatch.setenv("TZ", "Asia/Tokyo")
    tokyo = stored.created_at.astimezone(ZoneInfo("Asia/Tokyo")).strftime("%Y-%m-%d %H:%M:%S")
    table = ok("plans", "list").stdout
    assert f"{tokyo} JST" in table
    doc = ok_json("plans", "list")["plans"][0]
    assert doc["created_at"] == stored.created_at.isoformat()
    assert doc["created_at"].endswith("+00:00")
    monkeypatch.setenv("TZ", "UTC")
    utc = stored.created_at.strftime("%Y-%m-%d %H:%M:%S")
    assert f"{utc} UTC" in ok("plans", "list").stdout
    monkeypatch.setenv("TZ", "Asia/Tokyo")
    assert f"{tokyo} JST" in ok("plans", "show", plan.plan_id).stdout


# -- jobs ----------------------------------------------------------------------------------
# -- jobs ----------------------------------------------------------------------------------
def test_jobs_list_filters_by_status_and_plan(env: dict[str, str], ledger: Ledger) -> None:
    queued = ledger.queued()
    failed = ledger.ended(AsyncJobStatus.failed)
    succeeded = ledger.ended(AsyncJobStatus.succeeded)

    everything = ok_json("jobs", "list")
    newest_first = [succeeded.job_id, failed.job_id, queued.job_id]
    assert [j["job_id"] for j in everything["jobs"]] == newest_first
    assert everything["total"] == 3
    assert everything["jobs"][2] == {**ledger.get(queued.job_id).as_cli_dict(), "dispatched": False}
    only_failed = ok_json("jobs", "list", "--status", "failed")
    assert [j["job_id"] for j in only_failed["jobs"]] == [failed.job_id]
    assert only_failed["total"] == 1
    by_plan = ok_json("jobs", "list", "--plan", succeeded.plan_id)
    assert [j["job_id"] for j in by_plan["jobs"]] == [succeeded.job_id]
    none = ok_json("jobs", "list", "--plan", succeeded.plan_id, "--status", "queued")
    assert (none["jobs"], none["total"]) == ([], 0)
    two = ok_json("jobs", "list", "--limit", 2)
    assert [j["job_id"] for j in two["jobs"]] == newest_first[:2] and two["total"] == 3
    assert (two["next_after"], two["total_is_lower_bound"]) == (failed.job_id, False)
    rest = ok_json("jobs", "list", "--limit", 2, "--after", two["next_after"])
    assert [j["job_id"] for j in rest["jobs"]] == newest_first[2:] and rest["next_after"] is None
    assert "--after" in ok("jobs", "list", "--limit", 2).stdout  # the table names the cursor
    table = ok("jobs", "list", "--status", "failed").stdout
    assert failed.job_id in table and queued.job_id not in table
    assert "showing 1 of 1 (newest first)" in table
    assert "showing 2 of 3" in ok("jobs", "list", "--limit", 2).stdout


def test_jobs_list_rejects_an_invalid_status(env: dict[str, str], ledger: Ledger) -> None:
    line = fails(2, "jobs", "list", "--status", "finished")
    assert "'finished'" in line and "queued, running, succeeded, failed, cancelled" in line


def test_jobs_show_gives_the_detail(env: dict[str, str], ledger: Ledger) -> None:
    job = ledger.ended(AsyncJobStatus.failed)
    shown = ok_json("jobs", "show", job.job_id)
    assert shown["status"] == "failed" and shown["error_message"] == "boom"
    assert shown["worker_id"] == "worker-test-1" and shown["dispatch_count"] == 0
    assert "boom" in ok("jobs", "show", job.job_id).stdout


@pytest.mark.parametrize(
    "args",
    [
        ("jobs", "show", "not-a-ulid"),
        ("jobs", "cancel", "123"),
        ("jobs", "retry", "x" * 26),
        ("plans", "show", "nope"),
        ("plans", "execute", "nope"),
        ("runs", "show", "nope"),
    ],
)
def test_a_bad_ulid_is_one_line_and_exit_2(
    env: dict[str, str], ledger: Ledger, args: tuple[str, ...]
) -> None:
    assert "must be a ULID string" in fails(2, *args)


@pytest.mark.parametrize(
    "args",
    [("jobs", "show"), ("jobs", "cancel"), ("jobs", "retry"), ("plans", "show"), ("runs", "show")],
)
def test_an_unknown_id_is_one_line_and_exit_2(
    env: dict[str, str], ledger: Ledger, args: tuple[str, ...]
) -> None:
    assert UNKNOWN_ULID in fails(2, *args, UNKNOWN_ULID)


def test_cancel_a_queued_job_then_again(env: dict[str, str], ledger: Ledger) -> None:
    job = ledger.queued()
    out = ok_json("jobs", "cancel", job.job_id)
    assert out["outcome"] == "cancelled" and out["job"]["status"] == "cancelled"
    assert ledger.get(job.job_id).status is AsyncJobStatus.cancelled
    assert ledger.plans.get(job.plan_id).label == "Strategize/CANCELLED"  # type: ignore[union-attr]

    line = fails(1, "jobs", "cancel", job.job_id)
    assert line.startswith("planq: refused:") and "cancelled" in line


def test_cancel_a_running_job_records_the_request(env: dict[str, str], ledger: Ledger) -> None:
    job = ledger.running()
    out = ok_json("jobs", "cancel", job.job_id)
    assert out["outcome"] == "cancel requested" and out["job"]["status"] == "running"
    assert ledger.get(job.job_id).cancel_requested_at is not None


def test_retry_a_failed_job_queues_and_publishes_a_new_attempt(
    env: dict[str, str], ledger: Ledger, published: list[Sent]
) -> None:
    failed = ledger.ended(AsyncJobStatus.failed)
    out = ok_json("jobs", "retry", failed.job_id)
    assert set(out) == {"plan", "job"}  # the shape `plans strategize --json` prints
    assert out["plan"]["state"] == "Strategize/QUEUED"
    new = out["job"]
    assert (new["attempt"], new["retry_of"], new["status"]) == (2, failed.job_id, "queued")
    assert new["dispatched"] is True
    rows = ledger.jobs.list_by_plan(failed.plan_id)
    assert [(r.attempt, r.status) for r in rows] == [
        (1, AsyncJobStatus.failed),
        (2, AsyncJobStatus.queued),
    ]
    assert [(m.task_id, m.kwargs) for m in published] == [
        (new["job_id"], {"job_id": new["job_id"], "plan_id": failed.plan_id})
    ]
    assert "already retried" in fails(1, "jobs", "retry", failed.job_id)
    assert len(published) == 1


def test_retry_of_a_job_whose_plan_is_gone_is_refused(
    env: dict[str, str], ledger: Ledger, published: list[Sent]
) -> None:
    failed = ledger.ended(AsyncJobStatus.failed)
    assert ledger.plans.remove(failed.plan_id)
    line = fails(1, "jobs", "retry", failed.job_id)
    assert line.startswith("planq: refused:") and "no longer exists" in line
    assert failed.plan_id in line
    assert [j.job_id for j in ledger.jobs.list_all()] == [failed.job_id] and published == []


def test_queueing_commands_print_one_json_shape(
    env: dict[str, str], ledger: Ledger, published: list[Sent]
) -> None:
    queued = ok_json("plans", "strategize", ledger.plan().plan_id)
    failed = ledger.ended(AsyncJobStatus.failed)
    retried = ok_json("jobs", "retry", failed.job_id)
    assert set(queued) == set(retried) == {"plan", "job"}
    assert set(queued["plan"]) == set(retried["plan"])
    assert set(queued["job"]) - {"retry_of"} == set(retried["job"]) - {"retry_of"}
    assert retried["plan"]["plan_id"] == failed.plan_id == retried["job"]["plan_id"]


@pytest.mark.parametrize("status", [AsyncJobStatus.succeeded, AsyncJobStatus.queued])
def test_retry_refuses_a_job_that_did_not_fail(
    env: dict[str, str], ledger: Ledger, status: AsyncJobStatus
) -> None:
    job = ledger.queued() if status is AsyncJobStatus.queued else ledger.ended(status)
    assert status.value in fails(1, "jobs", "retry", job.job_id)
    assert len(ledger.jobs.list_by_plan(job.plan_id)) == 1


def test_jobs_stuck_expires_silent_running_jobs(
    env: dict[str, str], ledger: Ledger, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A short job_timeout: detection waits until PostgreSQL has been up that long, and the
    # fault tests may have restarted it a minute ago.
    monkeypatch.setenv("PLANQ_JOB_TIMEOUT", "2")
    monkeypatch.setenv("PLANQ_HEARTBEAT_INTERVAL", "0.5")
    stuck = ledger.running(heartbeat_age=3600)
    alive = ledger.running()
    report = ok_json("jobs", "stuck")
    assert [j["job_id"] for j in report["expired"]] == [stuck.job_id]
    assert report["expired"][0]["status"] == "failed" and report["retried"] == {}
    assert ledger.get(stuck.job_id).error_message == "heartbeat expired"
    assert ledger.get(alive.job_id).status is AsyncJobStatus.running
    assert ok_json("jobs", "stuck")["expired"] == []
    assert "none" in ok("jobs", "stuck").stdout


def test_jobs_cleanup_deletes_only_rows_past_the_ttl(
    env: dict[str, str], ledger: Ledger, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PLANQ_JOB_TTL", "3600")
    old = ledger.ended(AsyncJobStatus.succeeded, finished_ago=7200)
    recent = ledger.ended(AsyncJobStatus.failed)
    assert ok_json("jobs", "cleanup") == {"deleted": 1, "job_ttl_seconds": 3600.0}
    assert ledger.jobs.get(old.job_id) is None
    assert ledger.jobs.get(recent.job_id) is not None
    assert "deleted 0" in ok("jobs", "cleanup").stdout


# -- runs ----------------------------------------------------------------------------------
def test_runs_list_show_and_findings(env: dict[str, str], ledger: Ledger) -> None:
    done = ledger.run("scan_a", findings=5, ago=timedelta(minutes=5))
    live = ledger.run("scan_b", end=None)

    listed = ok_json("runs", "list")
    assert [r["id"] for r in listed["runs"]] == [live, done]  # newest first
    assert listed["total"] == 2
    of_a = ok_json("runs", "list", "scan_a")
    assert ([r["id"] for r in of_a["runs"]], of_a["total"]) == ([done], 1)
    one = ok_json("runs", "list", "--limit", 1)
    assert ([r["id"] for r in one["runs"]], one["total"]) == ([live], 2)
    table = ok("runs", "list").stdout
    assert "scan_b" in table and "showing 2 of 2 (newest first)" in table

    shown = ok_json("runs", "show", done)
    assert shown["status"] == "Completed" and shown["stats"]["finding_count"] == 5
    assert shown["severity_counts"] == {"data_loss": 2, "inconsistent": 2, "anomaly": 1}
    assert "data_loss 2" in ok("runs", "show", done).stdout

    page = ok_json("runs", "findings", done, "--limit", 2, "--offset", 1)
    assert [f["kind"] for f in page["findings"]] == ["kind-1", "kind-2"]
    assert page["findings"][0]["detail"] == {"i": 1} and page["limit"] == 2
    assert "kind-4" in ok("runs", "findings", done).stdout
    first = ok_json("runs", "findings", done, "--limit", 2)
    assert first["total"] == 5 and first["next_after"] == first["findings"][-1]["id"]
    after = ok_json("runs", "findings", done, "--limit", 2, "--after", first["next_after"])
    assert [f["kind"] for f in after["findings"]] == ["kind-2", "kind-3"]
    table = ok("runs", "findings", done, "--limit", 2, "--after", after["next_after"]).stdout
    assert "kind-4" in table and "kind-3" not in table and "next page" not in table
    assert "next page: --after" in ok("runs", "findings", done, "--limit", 2).stdout


def test_runs_cancel_flags_the_running_run_once(env: dict[str, str], ledger: Ledger) -> None:
    live = ledger.run("scan_b", end=None)
    out = ok_json("runs", "cancel", "scan_b")
    assert out == {
        "job_name": "scan_b",
        "run_id": live,
        "status": "CancelRequested",
        "ends_as": "Paused",
    }
    assert ledger.run_status(live) == "CancelRequested"
    assert "no Running run" in fails(1, "runs", "cancel", "scan_b")


def test_runs_purge_deletes_old_ended_runs_only(env: dict[str, str], ledger: Ledger) -> None:
    old = ledger.run("scan_a", findings=2, ago=timedelta(days=10))
    recent = ledger.run("scan_a")
    live = ledger.run("scan_b", end=None, ago=timedelta(days=10))
    assert ok_json("runs", "purge", "--older-than-days", 5) == {"purged": 1, "older_than_days": 5.0}
    assert ledger.run_status(old) is None
    assert ledger.run_status(recent) == "Completed" and ledger.run_status(live) == "Running"
    assert "purged 0" in ok("runs", "purge", "--older-than-days", 5).stdout


def test_runs_trigger_sends_the_task(
    env: dict[str, str], ledger: Ledger, published: list[Sent]
) -> None:
    ledger.run("ledger_consistency")  # ended: a trigger starts a fresh run
    out = ok_json("runs", "trigger", "ledger_consistency", "--arg", "batch_size=50")
    assert out["task"] == "planq.runs.ledger_consistency" and out["decision"] == "fresh"
    assert out["run"] is None  # no worker here: nobody opened it (--wait 0)
    assert [(m.task_id, m.task, m.routing_key, m.kwargs) for m in published] == [
        (out["task_id"], out["task"], "planq.runs", {"args": {"batch_size": "50"}})
    ]
    # no worker took it: a second trigger is coalesced into the queued one, nothing sent
    line = fails(1, "runs", "trigger", "ledger_consistency")
    assert f"queued already (task id {out['task_id']})" in line and len(published) == 1
    redis.Redis.from_url(REDIS_TEST_URL).delete(slot_key("ledger_consistency"))
    assert "sent planq.runs." in ok("runs", "trigger", "ledger_consistency").stdout
    redis.Redis.from_url(REDIS_TEST_URL).delete(slot_key("ledger_consistency"))


def test_runs_trigger_refuses_a_misspelt_arg_naming_the_one_meant(
    env: dict[str, str], ledger: Ledger, published: list[Sent]
) -> None:
    line = fails(2, "runs", "trigger", "ledger_consistency", "--arg", "batch_sise=50")
    assert "'batch_sise' is not one ledger_consistency takes; did you mean batch_size?" in line
    assert "(it takes: batch_delay, batch_size, checkpoint_rows, checkpoint_seconds)" in line
    far = fails(2, "runs", "trigger", "ledger_consistency", "--arg", "colour=red")
    assert "'colour' is not one" in far and "did you mean" not in far  # nothing close
    assert published == [] and ledger.runs.list_runs("ledger_consistency", limit=5) == []


def test_runs_trigger_of_an_unknown_name_lists_the_known_ones(
    env: dict[str, str], ledger: Ledger, published: list[Sent]
) -> None:
    line = fails(2, "runs", "trigger", "no_such_scan")
    assert "'no_such_scan'" in line and "ledger_consistency" in line
    assert published == []


# -- schedule ------------------------------------------------------------------------------
def test_schedule_lists_maintenance_and_recoverable_jobs(
    env: dict[str, str], ledger: Ledger, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PLANQ_STUCK_CHECK_INTERVAL", "45")
    monkeypatch.setenv("PLANQ_LEDGER_CONSISTENCY_INTERVAL", "900")
    ledger.running(heartbeat_age=3600)
    run_id = ledger.run("ledger_consistency")

    before = {r["task"]: r for r in ok_json("schedule")}["planq.maintenance.detect_stuck_jobs"]
    assert (before["last_outcome"], before["last_run_at"]) == ("never run", None)
    swept = ledger.jobs.sight_ledger("jobs", 90.0)  # what each stuck sweep records first

    rows = {r["task"]: r for r in ok_json("schedule")}
    assert set(rows) >= MAINTENANCE
    stuck = rows["planq.maintenance.detect_stuck_jobs"]
    assert (stuck["every_seconds"], stuck["last_outcome"], stuck["waiting"]) == (45.0, "ran", 1)
    assert datetime.fromisoformat(stuck["last_run_at"]) == swept.now  # the sweep's own time
    cleanup = rows["planq.maintenance.cleanup_expired_jobs"]
    assert (cleanup["last_outcome"], cleanup["note"]) == (
        "not recorded",
        "its runs are not recorded",
    )
    assert "n/a" not in json.dumps(list(rows.values()))
    scan = rows["planq.runs.ledger_consistency"]
    assert (scan["kind"], scan["every_seconds"], scan["last_outcome"]) == (
        "recoverable",
        900.0,
        "Completed",
    )
    assert scan["run"]["id"] == run_id
    assert {tuple(sorted(r)) for r in rows.values()} == {tuple(sorted(stuck))}  # stable keys

    table = ok("schedule").stdout
    for task in MAINTENANCE:
        assert task in table
    assert "every 45s" in table and "Completed at" in table and "ran at" in table


# -- settings, services, db ------------------------------------------------------------------
def test_an_invalid_setting_is_one_line_and_exit_2(
    env: dict[str, str], ledger: Ledger, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PLANQ_JOB_TIMEOUT", "-5")
    assert "PLANQ_JOB_TIMEOUT" in fails(2, "jobs", "list")


def test_an_unreachable_ledger_is_one_line_and_exit_3(
    env: dict[str, str], ledger: Ledger, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PLANQ_DATABASE_URL", "postgresql+psycopg://postgres@127.0.0.1:1/none")
    assert fails(3, "jobs", "list").startswith("planq: unavailable: ledger")


def test_service_wrappers_exec_celery_with_planq_defaults(
    env: dict[str, str], ledger: Ledger, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PLANQ_MAX_WORKERS", "3")
    argv = ok("worker", "--dry-run").stdout.split()
    assert argv[1:4] == ["-A", "planq.worker_config", "worker"] and Path(argv[0]).name == "celery"
    assert "--pool=prefork" in argv and "--concurrency=3" in argv and "--loglevel=INFO" in argv
    assert not any(a.startswith("--queues") for a in argv)  # celery consumes every planq queue

    custom = ok(
        "worker", "--dry-run", "-P", "threads", "-c", 2, "-Q", "planq.runs", "-n", "w@%h",
        "--without-gossip",
    ).stdout.split()  # fmt: skip
    assert custom[4:] == [
        "--pool=threads",
        "--concurrency=2",
        "--queues=planq.runs",
        "--hostname=w@%h",
        "--loglevel=INFO",
        "--without-gossip",
    ]
    assert ok("beat", "--dry-run", "-s", "/tmp/sched", "--max-interval=5").stdout.split()[3:] == [
        "beat",
        "--schedule=/tmp/sched",
        "--loglevel=INFO",
        "--max-interval=5",
    ]
    assert ok("flower", "--dry-run", "--port", 5599).stdout.split()[3:] == ["flower", "--port=5599"]


def test_flower_basic_auth_goes_to_flower_by_its_environment(
    env: dict[str, str], ledger: Ledger, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("FLOWER_BASIC_AUTH", "x:y")  # recorded, so the test's value is undone
    monkeypatch.delenv("FLOWER_BASIC_AUTH")
    out = ok("flower", "--dry-run", "--basic-auth", "ops:s3cret,viewer:pw").stdout
    assert "FLOWER_BASIC_AUTH=ops,viewer:*** (in the environment)" in out
    assert "s3cret" not in out and "--basic-auth" not in out  # never in argv (`ps` shows argv)
    assert os.environ["FLOWER_BASIC_AUTH"] == "ops:s3cret,viewer:pw"  # what exec'd Flower reads
    monkeypatch.setenv("FLOWER_BASIC_AUTH", "from:env")
    assert "FLOWER_BASIC_AUTH=from:***" in ok("flower", "--dry-run").stdout
    for bad in ("nocolon", ":nouser", "user:", "a:b,,c:d"):
        assert "USER:PASSWORD" in fails(2, "flower", "--dry-run", "--basic-auth", bad)


def test_beat_keeps_its_schedule_file_out_of_the_work_tree(
    env: dict[str, str], ledger: Ledger, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    argv = ok("beat", "--dry-run").stdout.split()
    assert f"--schedule={tmp_path / 'state' / 'planq' / 'celerybeat-schedule'}" in argv
    assert (tmp_path / "state" / "planq").is_dir()
    monkeypatch.delenv("XDG_STATE_HOME")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    argv = ok("beat", "--dry-run").stdout.split()
    assert (
        f"--schedule={tmp_path / 'home' / '.local' / 'state' / 'planq' / 'celerybeat-schedule'}"
        in argv
    )
    assert "XDG_STATE_HOME" in ok("beat", "--help").stdout


@pytest.mark.processes
def test_a_running_beat_writes_its_schedule_in_the_state_dir_not_the_cwd(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    flush_redis(WORKER_REDIS_URL)
    work_tree, state = tmp_path / "work", tmp_path / "state"
    work_tree.mkdir()
    values = {
        "PLANQ_DATABASE_URL": f"sqlite:///{tmp_path / 'b.db'}",
        "PLANQ_BROKER_URL": WORKER_REDIS_URL,
    }
    env = _process_env(**values, XDG_STATE_HOME=str(state))
    beat = subprocess.Popen(
        [_planq_script(), "beat", "--loglevel", "WARNING"], env=env, cwd=work_tree,
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, start_new_session=True,
    )  # fmt: skip
    try:
        wait_for(
            lambda: beat.poll() is None and list((state / "planq").glob("celerybeat-schedule*")),
            timeout=60,
            what="beat to write its schedule file in the state dir",
        )
    finally:
        beat.send_signal(signal.SIGTERM)
        try:
            beat.wait(30)
        except subprocess.TimeoutExpired:
            os.killpg(beat.pid, signal.SIGKILL)
            beat.wait(10)
        flush_redis(WORKER_REDIS_URL)
    assert list(work_tree.iterdir()) == []  # nothing left where it was started


def test_flower_broker_api_goes_to_flower_by_its_environment(
    env: dict[str, str], ledger: Ledger, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("FLOWER_BROKER_API", "x")  # recorded, so the test's value is undone
    monkeypatch.delenv("FLOWER_BROKER_API")
    api = "http://guest:s3cret@rabbit:15672/api/"
    out = ok("flower", "--dry-run", "--broker-api", api).stdout
    assert (
        "FLOWER_BROKER_API=http://guest:***REDACTED***@rabbit:15672/api/ (in the environment)"
        in out
    )
    assert "s3cret" not in out and "broker" not in out.splitlines()[-1]  # never in argv
    assert os.environ["FLOWER_BROKER_API"] == api  # what exec'd Flower reads
    for bad in ("rabbit:15672", "amqp://guest@rabbit//", "http://"):
        assert "management API" in fails(2, "flower", "--dry-run", "--broker-api", bad)
    helped = " ".join(ok("flower", "--help").stdout.split())
    assert "RabbitMQ" in helped and "--broker-api" in helped and "needs the Redis" not in helped


def test_db_upgrade_creates_the_schema(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'fresh.db'}"
    assert "latest revision" in ok("db", "upgrade", "--url", url).stdout
    db = Database(url)
    try:
        tables = set(inspect(db.engine).get_table_names())
    finally:
        db.close()
    assert {"async_jobs", "plans", "recoverable_runs"} <= tables


# -- real processes ----------------------------------------------------------------------------
def _planq_script() -> str:
    script = Path(sys.executable).with_name("planq")
    assert script.exists(), "the planq console script is not installed (pip install -e .)"
    return str(script)


def _process_env(**values: str) -> dict[str, str]:
    base = {k: v for k, v in os.environ.items() if not k.startswith("PLANQ_")}
    return {**base, **values}


def test_help_needs_no_settings_and_no_services() -> None:
    env = _process_env(PLANQ_DATABASE_URL="postgresql://nobody@127.0.0.1:1/x", PLANQ_JOB_TTL="-1")
    start = time.monotonic()
    done = subprocess.run(
        [_planq_script(), "--help"], env=env, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0 and "plans" in done.stdout and "jobs" in done.stdout
    assert time.monotonic() - start < 10
    probe = "import sys, cli.main; print(sorted(m for m in ('celery', 'sqlalchemy', " \
        "'planq.worker_config', 'kombu') if m in sys.modules))"  # fmt: skip
    imported = subprocess.run(
        [sys.executable, "-c", probe], env=env, cwd=ROOT, capture_output=True, text=True
    )
    assert imported.stdout.strip() == "[]", imported.stderr


@pytest.mark.parametrize(
    ("args", "env_extra", "expected"),
    [
        (["jobs", "show", "nope"], {}, "must be a ULID string"),
        (["jobs", "list"], {"PLANQ_JOB_TIMEOUT": "-5"}, "PLANQ_JOB_TIMEOUT"),
        (["jobs", "list", "--status", "done"], {}, "not a job status"),
    ],
)
def test_user_errors_in_a_real_process_are_one_line(
    tmp_path: Path, args: list[str], env_extra: dict[str, str], expected: str
) -> None:
    env = _process_env(PLANQ_DATABASE_URL=f"sqlite:///{tmp_path / 'p.db'}", **env_extra)
    done = subprocess.run(
        [_planq_script(), *args], env=env, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 2, done.stderr
    assert done.stderr.count("\n") == 1 and expected in done.stderr, done.stderr
    assert "Traceback" not in done.stderr and done.stdout == ""


#: A Redis database of its own: a worker process on the shared test database would take other
#: tests' messages (and theirs would take this test's) whenever test runs overlap.
WORKER_REDIS_URL = os.environ["PLANQ_TEST_CLI_REDIS_URL"]  # tests/resources.py


@pytest.mark.processes
def test_planq_worker_runs_a_phase_that_watch_follows_to_the_end(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    flush_redis(WORKER_REDIS_URL)
    url = f"sqlite:///{tmp_path / 'e2e.db'}"
    values = {"PLANQ_DATABASE_URL": url, "PLANQ_BROKER_URL": WORKER_REDIS_URL}
    for key in [k for k in os.environ if k.startswith("PLANQ_")]:
        monkeypatch.delenv(key)
    for key, value in values.items():
        monkeypatch.setenv(key, value)
    log = (tmp_path / "worker.log").open("wb")
    worker = subprocess.Popen(
        [_planq_script(), "worker", "-P", "threads", "-c", "2", "-n", "cli-e2e@%h",
         "--loglevel", "WARNING", "--without-mingle", "--without-gossip"],
        env=_process_env(**values), cwd=tmp_path, stdout=log, stderr=subprocess.STDOUT,
        start_new_session=True,
    )  # fmt: skip
    try:
        plan = ok_json("plans", "create", "--steps", "a:0.2,b:0.2")
        job = ok_json("plans", "strategize", plan["plan_id"])["job"]
        result = planq("plans", "watch", plan["plan_id"], "--timeout", 60, "--interval", 0.1)
        assert result.exit_code == 0, (tmp_path / "worker.log").read_text(errors="replace")
        assert "succeeded" in result.stdout and "100%" in result.stdout
        shown = ok_json("jobs", "show", job["job_id"])
        assert shown["status"] == "succeeded" and shown["worker_id"]
        assert ok_json("plans", "show", plan["plan_id"])["state"] == "Strategize/COMPLETE"
    finally:
        worker.send_signal(signal.SIGTERM)
        try:
            worker.wait(30)
        except subprocess.TimeoutExpired:
            os.killpg(worker.pid, signal.SIGKILL)
            worker.wait(10)
        log.close()
        flush_redis(WORKER_REDIS_URL)


def _status(url: str, auth: tuple[str, str] | None = None) -> int | None:
    """The HTTP status of GET url, or None while nothing listens."""
    import base64
    import urllib.error
    import urllib.request

    request = urllib.request.Request(url)
    if auth is not None:
        token = base64.b64encode(f"{auth[0]}:{auth[1]}".encode()).decode()
        request.add_header("Authorization", f"Basic {token}")
    try:
        with urllib.request.urlopen(request, timeout=5) as response:
            return int(response.status)
    except urllib.error.HTTPError as exc:
        return int(exc.code)
    except OSError:
        return None


@pytest.mark.processes
def test_planq_flower_asks_for_the_basic_auth_it_was_given(tmp_path: Path) -> None:
    port = free_port()
    env = _process_env(
        PLANQ_DATABASE_URL=f"sqlite:///{tmp_path / 'f.db'}", PLANQ_BROKER_URL=REDIS_TEST_URL
    )
    env.pop("FLOWER_BASIC_AUTH", None)
    log = (tmp_path / "flower.log").open("wb")
    flower = subprocess.Popen(
        [_planq_script(), "flower", "--port", str(port), "--basic-auth", "ops:s3cret",
         "--address=127.0.0.1"],
        env=env, cwd=tmp_path, stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
    )  # fmt: skip
    url = f"http://127.0.0.1:{port}/"
    try:
        first = wait_for(lambda: _status(url), timeout=60, interval=0.2, what="Flower to listen")
        assert first == 401  # no credentials, no page
        assert _status(url, ("ops", "wrong")) == 401
        assert _status(url, ("ops", "s3cret")) == 200
        argv = Path(f"/proc/{flower.pid}/cmdline").read_bytes().split(b"\0")
        assert not any(b"s3cret" in a for a in argv)  # the password is not in the process list
    finally:
        flower.send_signal(signal.SIGTERM)
        try:
            flower.wait(30)
        except subprocess.TimeoutExpired:
            os.killpg(flower.pid, signal.SIGKILL)
            flower.wait(10)
        log.close()
