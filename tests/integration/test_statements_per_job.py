"""The hot path's cost guard: SQL statements and round trips one job costs, counted exactly.

Not a timed test: it counts what planq sends to the database through SQLAlchemy's events,
so it is deterministic. On PostgreSQL a job costs one round trip to queue (`delay()`), one
to claim and one to finish; the dispatch stamp is one statement for a whole batch. SQLite
has no round trips to save; it runs each transition as two statements in one
BEGIN IMMEDIATE, and the guard holds it there. A change that adds a statement fails here.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from celery import Celery
from sqlalchemy import Engine, event

from planq.domain.jobs import AsyncJobStatus
from planq.domain.plans import Plan, PlanPhase, PlanStatus
from planq.tasks.runtime import Runtime
from tests.celery_support import embedded_runtime, make_app


@dataclass
class Counter:
    """Statements and transactions on every engine of a Database, per thread-safe list."""

    statements: list[str] = field(default_factory=list)
    transactions: int = 0  #: BEGIN/COMMIT pairs on connections not in autocommit
    pings: int = 0  #: checkouts of a pre-pinged pool (each a round trip)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def round_trips(self, dialect: str) -> int:
        """Statements, plus BEGIN and COMMIT and pings where they cross the wire."""
        if dialect != "postgresql":
            return len(self.statements)  # in-process: no wire
        return len(self.statements) + 2 * self.transactions + self.pings

    def reset(self) -> None:
        with self.lock:
            self.statements.clear()
            self.transactions = self.pings = 0


@pytest.fixture
def counted(runtime: Runtime) -> Iterator[Counter]:
    counter = Counter()
    listeners: list[tuple[Engine, str, Any]] = []

    def on_statement(_conn: Any, _cursor: Any, statement: str, *_: Any) -> None:
        with counter.lock:
            counter.statements.append(" ".join(statement.split())[:60])

    def on_commit(conn: Any) -> None:
        if not getattr(conn.connection.dbapi_connection, "autocommit", False):
            with counter.lock:
                counter.transactions += 1

    for engine in runtime.db.engines:
        pre_ping = bool(getattr(engine.pool, "_pre_ping", False))

        def on_checkout(*_: Any, _ping: bool = pre_ping) -> None:
            if _ping:
                with counter.lock:
                    counter.pings += 1

        for name, fn in (
            ("before_cursor_execute", on_statement),
            ("commit", on_commit),
        ):
            event.listen(engine, name, fn)
            listeners.append((engine, name, fn))
        event.listen(engine.pool, "checkout", on_checkout)
        listeners.append((engine.pool, "checkout", on_checkout))  # type: ignore[arg-type]
    yield counter
    for target, name, fn in listeners:
        event.remove(target, name, fn)


@pytest.fixture(params=["postgres", "sqlite"])
def app(request: pytest.FixtureRequest, redis_url: str, tmp_path: Path) -> Celery:
    if request.param == "postgres":
        request.getfixturevalue("pg_database")  # emptied
        database_url: str = request.getfixturevalue("pg_url")
    else:
        database_url = f"sqlite:///{tmp_path / 'counted.db'}"  # migrated by the runtime
    return make_app(redis_url, database_url, default_executor="noop")


@pytest.fixture
def runtime(app: Celery) -> Iterator[Runtime]:
    with embedded_runtime(app, start=False) as rt:  # no consumer: the test runs the body
        yield rt


def strategized_plans(rt: Runtime, count: int) -> list[Plan]:
    """Plans ready for execute, with nothing left to stamp (so only the test's work counts)."""
    plans = []
    for _ in range(count):
        plan = Plan.with_steps(["a"], name="counted")
        plan.__dict__.update(phase=PlanPhase.strategize, status=PlanStatus.complete)
        rt.plans.add(plan)
        plans.append(plan)
    rt.publisher.stamps.flush()
    return plans


#: (dialect) -> the most a job may cost: (producer statements, worker statements)
BUDGET = {"postgresql": (1, 2), "sqlite": (3, 6)}  # SQLite: BEGIN IMMEDIATE + 2 each
ROUND_TRIPS = {"postgresql": (1, 2)}


def test_one_job_costs_its_budget_of_statements(
    app: Celery, runtime: Runtime, counted: Counter
) -> None:
    dialect = runtime.db.dialect
    plans = strategized_plans(runtime, 3)
    task = app.tasks["planq.execute_plan"]
    producer, worker = BUDGET[dialect]
    # The dispatched stamp is batched apart from the job (one UPDATE per ~100 ms for every
    # publish): hold it, so a slow run_job on a loaded machine does not count it.
    runtime.publisher.stamps.interval = 3600.0
    # A process's first claim on PostgreSQL reads the partition map (once per ten minutes):
    # not a job's cost. Its own test is below.
    runtime.worker.run_job(task.delay(plans[2].plan_id).id)

    counted.reset()
    result = task.delay(plans[0].plan_id)
    assert result is not None
    assert len(counted.statements) == producer, counted.statements
    if dialect == "postgresql":
        assert counted.round_trips(dialect) == ROUND_TRIPS[dialect][0], counted

    counted.reset()
    outcome = runtime.worker.run_job(result.id)  # the task body, as the worker runs it
    assert outcome.value == "succeeded"
    assert len(counted.statements) == worker, counted.statements
    if dialect == "postgresql":
        assert counted.round_trips(dialect) == ROUND_TRIPS[dialect][1], counted
    job = runtime.jobs.get(result.id)
    assert job is not None and job.status is AsyncJobStatus.succeeded
    if dialect == "postgresql":  # straight to the job's partition, not through the parent
        named = [s for s in counted.statements if s.startswith("WITH job AS ( UPDATE async_jobs_p")]
        assert len(named) == worker, counted.statements


@pytest.mark.parametrize("app", ["postgres"], indirect=True)
def test_the_first_claim_of_a_process_reads_the_partition_map_once(
    app: Celery, runtime: Runtime, counted: Counter
) -> None:
    plans = strategized_plans(runtime, 2)
    task = app.tasks["planq.execute_plan"]
    runtime.publisher.stamps.interval = 3600.0
    first, second = (task.delay(p.plan_id).id for p in plans)
    counted.reset()
    runtime.worker.run_job(first)
    assert [s for s in counted.statements if "relpartbound" in s] != []
    assert len(counted.statements) == 3  # the map, the claim, the finish
    counted.reset()
    runtime.worker.run_job(second)
    assert len(counted.statements) == 2


def test_dispatch_stamps_are_one_statement_for_a_batch(
    app: Celery, runtime: Runtime, counted: Counter
) -> None:
    plans = strategized_plans(runtime, 5)
    runtime.publisher.stamps.interval = 3600.0  # the batch thread waits: this test flushes by hand
    task = app.tasks["planq.execute_plan"]
    ids = [task.delay(p.plan_id).id for p in plans]
    assert runtime.publisher.stamps.pending == len(ids)
    counted.reset()
    assert runtime.publisher.stamps.flush() == len(ids)
    stamps = [s for s in counted.statements if "dispatched_at" in s]
    assert len(stamps) == 1, counted.statements
    for job_id in ids:  # every row stamped by that one statement
        job = runtime.jobs.get(job_id)
        assert job is not None and job.dispatched_at is not None and job.dispatch_count == 1


def test_delay_many_is_one_statement_for_the_batch(
    app: Celery, runtime: Runtime, counted: Counter
) -> None:
    dialect = runtime.db.dialect
    plans = strategized_plans(runtime, 10)
    counted.reset()
    ids = app.tasks["planq.execute_plan"].delay_many([p.plan_id for p in plans])
    assert len(ids) == 10
    writes = [s for s in counted.statements if "dispatched_at" not in s]
    # PostgreSQL: one statement for the ten plans and rows; SQLite: one BEGIN, two per plan.
    assert len(writes) == (1 if dialect == "postgresql" else 21), writes


def test_bulk_plans_and_their_queue_are_one_statement_each(
    app: Celery, runtime: Runtime, counted: Counter
) -> None:
    """create_plans: one INSERT for the batch; delay_many: one statement; stamps: one."""
    dialect = runtime.db.dialect
    runtime.publisher.stamps.interval = 3600.0  # the batch thread waits: this test flushes by hand
    counted.reset()
    plans = runtime.lifecycle.create_plans([["a", "b"]] * 300, [f"bulk-{i}" for i in range(300)])
    # One INSERT for the 300 plans (SQLite: one executemany, inside its BEGIN IMMEDIATE).
    expected = ["INSERT INTO plans"] if dialect == "postgresql" else ["BEGIN IMMEDIATE", "INSERT"]
    assert [s[: len(e)] for s, e in zip(counted.statements, expected, strict=False)] == expected
    assert len(counted.statements) == len(expected), counted.statements
    if dialect == "postgresql":  # as one delay(): the statement is the only round trip
        assert counted.round_trips(dialect) == ROUND_TRIPS[dialect][0], counted
    assert runtime.plans.count() == 300

    counted.reset()
    ids = app.tasks["planq.strategize_plan"].delay_many([p.plan_id for p in plans])
    assert len(ids) == 300
    assert len(counted.statements) == (1 if dialect == "postgresql" else 601), counted.statements
    assert runtime.publisher.stamps.pending == 300  # every chunk the broker took, unstamped yet
    counted.reset()
    assert runtime.publisher.stamps.flush() == 300
    stamps = [s for s in counted.statements if "dispatched_at" in s]
    assert len(stamps) == 1 and len(counted.statements) <= 2, counted.statements  # + BEGIN


def test_a_notifying_event_costs_one_outbox_insert_and_nothing_else(
    app: Celery, runtime: Runtime, counted: Counter
) -> None:
    """A phase that brings its pipeline to the gate: +1 statement with webhooks, 0 without."""
    from planq.domain.webhooks import NO_WEBHOOKS, WebhookPolicy

    runtime.publisher.stamps.interval = 3600.0
    cost: dict[str, list[str]] = {}
    for name, policy in (
        ("warm", NO_WEBHOOKS),  # a process's first claim reads the partition map: not counted
        ("off", NO_WEBHOOKS),
        ("on", WebhookPolicy(urls=("http://127.0.0.1:9/hook",), secret="s")),
    ):
        runtime.ledger.webhooks = policy
        plan = runtime.lifecycle.create_plan(["a"], name=f"gated-{name}")
        first = runtime.lifecycle.run_plan(plan.plan_id, "execute", "execute", actor="api:ann")
        assert first.job is not None
        counted.reset()
        assert runtime.worker.run_job(first.job.job_id).value == "succeeded"
        cost[name] = list(counted.statements)
        assert len(runtime.plans.list_deliveries(plan.plan_id)) == (name == "on")
    extra = [s for s in cost["on"] if s not in cost["off"]]
    assert len(cost["on"]) == len(cost["off"]) + 1, (cost["off"], cost["on"])
    assert len(extra) == 1 and extra[0].startswith("INSERT INTO webhook_deliveries"), extra
