"""Bulk enqueue: plans made in one statement, queued in one, published over one pipeline.

A real `celery worker` process runs a bulk batch (more than one publish chunk) and every
job runs exactly once; the bulk path's messages are the ones `send_task` sends; bad input
in a batch is a typed error with nothing written. On SQLite and PostgreSQL.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from celery import Celery
from celery.signals import before_task_publish
from kombu import Connection
from kombu.exceptions import ChannelError

from planq.domain.errors import BatchError, BoundsError, WrongTypeError
from planq.domain.ids import new_id
from planq.domain.jobs import AsyncJobStatus
from planq.domain.lifecycle import PlanLifecycleService
from planq.domain.plans import Plan
from planq.domain.ports import JobStore, PlanStore
from planq.tasks.publisher import CHUNK
from planq.tasks.runtime import reset_runtime, runtime_for
from planq.worker_config import client
from tests.celery_support import WorkerProcess, make_app, worker_env
from tests.executors_for_tests import REDIS, runs_key
from tests.support import wait_for

COUNTED = "tests.executors_for_tests:counted"
#: RabbitMQ, where routing meets declaration (.ci/run starts it if it does not answer).
AMQP_URL = os.environ.get("PLANQ_TEST_AMQP", "amqp://guest:guest@127.0.0.1:5672//")


@pytest.fixture(params=["sqlite", "postgres"])
def database_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """A fresh ledger: a new SQLite file (migrated by the runtime) or the emptied PG database."""
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'ledger.db'}"
    request.getfixturevalue("pg_database")  # truncates the session database
    url: str = request.getfixturevalue("pg_url")
    return url


@pytest.fixture
def app(redis_url: str, database_url: str) -> Iterator[Celery]:
    application = make_app(redis_url, database_url, default_executor=COUNTED)
    runtime_for(application)  # builds the runtime (and migrates a SQLite ledger) first
    yield application
    reset_runtime(application)


def test_a_bulk_batch_runs_on_a_real_worker_exactly_once(
    app: Celery, redis_url: str, database_url: str, tmp_path: Path
) -> None:
    count = CHUNK + 100  # two publish chunks
    plans = client.create_plans([["a"]] * count, [f"bulk-{i}" for i in range(count)], app=app)
    assert len({p.plan_id for p in plans}) == count
    results = client.queue_phases([p.plan_id for p in plans], "strategize", app=app)
    rt = runtime_for(app)
    rt.publisher.stamps.flush()
    env = worker_env(redis_url, database_url, default_executor=COUNTED)
    env["PLANQ_TEST_SECONDS"] = "0"
    worker = WorkerProcess(env, "bulk", log_path=tmp_path / "worker.log")
    try:
        worker.wait_ready(app)

        def all_done() -> bool:
            done = rt.jobs.count(AsyncJobStatus.succeeded)
            return done >= count or bool(worker.proc.poll() is not None)

        wait_for(all_done, timeout=240, interval=0.5, what=f"{count} bulk jobs to succeed")
        assert worker.proc.poll() is None, worker.log_tail()
    finally:
        worker.close()
    assert rt.jobs.count(AsyncJobStatus.succeeded) == count
    for result in results:
        assert REDIS.get(runs_key(result.id)) == "1", result.id  # ran once, never twice
        job = rt.jobs.get(result.id)
        assert job is not None and job.dispatch_count >= 1  # stamped: the broker took it
    assert {client.get_plan(p.plan_id, app=app).label for p in plans} == {"Strategize/COMPLETE"}


def test_bulk_messages_are_the_ones_send_task_sends(app: Celery) -> None:
    """Same headers and properties (ids aside) for a bulk chunk and a lone send_task."""
    rt = runtime_for(app)
    first, second = client.create_plans([["a"], ["b"]], app=app)
    captured: dict[str, dict[str, Any]] = {}

    def record(headers: Any = None, properties: Any = None, **_: Any) -> None:
        captured[headers["id"]] = {"headers": dict(headers), "properties": dict(properties)}

    before_task_publish.connect(record, weak=False)
    try:
        bulk_id, lone_id = client.queue_phases(
            [first.plan_id, second.plan_id], "strategize", app=app
        )
        lone = rt.jobs.get(lone_id.id)
        assert lone is not None
        rt.publisher.send_one(lone)  # Celery's own send_task, for comparison
    finally:
        before_task_publish.disconnect(record)
    bulk, plain = captured[bulk_id.id], captured[lone_id.id]
    for message, job_id, plan_id in (
        (bulk, bulk_id.id, first.plan_id),
        (plain, lone_id.id, second.plan_id),
    ):
        assert message["headers"]["id"] == message["headers"]["root_id"] == job_id
        assert message["headers"]["kwargsrepr"] == repr({"job_id": job_id, "plan_id": plan_id})
        assert message["properties"]["correlation_id"] == job_id
        for part, key in (("headers", "id"), ("headers", "root_id"), ("headers", "kwargsrepr")):
            message[part].pop(key)
        message["properties"].pop("correlation_id")
        message["properties"].pop("kwargsrepr")
    assert bulk == plain
    assert bulk["headers"]["task"] == "planq.strategize_plan"
    assert bulk["headers"]["argsrepr"] == "()" and bulk["headers"]["ignore_result"] is True


@pytest.fixture
def service(stores: tuple[JobStore, PlanStore]) -> PlanLifecycleService:
    jobs, plans = stores
    return PlanLifecycleService(plans, jobs)


@pytest.mark.parametrize(
    ("steps", "names", "error"),
    [
        ([["a"], ["b", {"name": ""}], ["c"]], None, BoundsError),  # one bad step in the middle
        ([["a"], "abc"], None, WrongTypeError),  # a string is not a list of steps
        ([["a"], ["b"]], ["one", "x" * 201], BoundsError),  # a name too long
        ([["a"], ["b"]], ["only one"], BatchError),  # names of another length
        ([], None, BatchError),  # nothing to create
        ("abc", None, BatchError),  # not a batch
        ([["a"]], "ab", BatchError),  # names not a list
    ],
)
def test_bad_input_in_a_plan_batch_is_typed_and_writes_nothing(
    service: PlanLifecycleService, steps: Any, names: Any, error: type[Exception]
) -> None:
    with pytest.raises(error):
        service.create_plans(steps, names)
    assert service.plans.count() == 0


def test_a_batch_with_a_plan_that_exists_writes_nothing(service: PlanLifecycleService) -> None:
    kept = service.create_plan(["a"], name="kept")
    fresh = Plan.with_steps(["b"], name="fresh")
    with pytest.raises(ValueError, match="already exists"):
        service.plans.add_many([fresh, kept])
    with pytest.raises(ValueError, match="twice"):
        service.plans.add_many([fresh, fresh])
    assert [p.plan_id for p in service.plans.list_all()] == [kept.plan_id]
    assert service.plans.get(fresh.plan_id) is None


def _messages_in(amqp_url: str, queue: str) -> int:
    """How many messages wait in a RabbitMQ queue (0 if it does not exist)."""
    with Connection(amqp_url) as conn:
        try:
            return int(conn.default_channel.queue_declare(queue, passive=True).message_count)
        except ChannelError:
            return 0


def test_a_task_routed_to_its_own_queue_lands_there_on_every_connection(
    tmp_path: Path,
) -> None:
    """On RabbitMQ, through task_routes: a message to a queue no one declared is dropped.

    The route is looked up once per publisher; the queue is declared on every connection
    that publishes to it (kombu's own per-connection cache), so a queue deleted under a
    connection that did not declare it yet is declared again, not silently missed.
    """
    queue = f"planq-routed-{new_id().lower()}"
    app = make_app(AMQP_URL, f"sqlite:///{tmp_path / 'ledger.db'}")
    app.conf.task_routes = {"planq.strategize_plan": {"queue": queue}}
    try:
        first, second, third = client.create_plans([["a"], ["b"], ["c"]], app=app)
        client.queue_phase(first.plan_id, "strategize", app=app)
        wait_for(lambda: _messages_in(AMQP_URL, queue) == 1, timeout=10, what="the message")
        with Connection(AMQP_URL) as conn:
            conn.default_channel.queue_delete(queue)
        with app.producer_or_acquire():  # holds the connection that declared it
            client.queue_phases([second.plan_id, third.plan_id], "strategize", app=app)
        wait_for(lambda: _messages_in(AMQP_URL, queue) == 2, timeout=10, what="the batch")
        assert list(runtime_for(app).publisher.routes) == ["planq.strategize_plan"]
    finally:
        with contextlib.suppress(Exception), Connection(AMQP_URL) as conn:  # not the cause
            conn.default_channel.queue_delete(queue)
        reset_runtime(app)
