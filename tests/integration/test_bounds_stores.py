"""Bounds at the store boundaries (memory, SQLite, PostgreSQL): typed refusals, nothing written.

Each property runs 1,000 cases against ONE database per test function (the store fixtures
of tests/conftest.py), and after every case reads the tables back: the row counts and the
rows' mutable columns are exactly what they were before the first refused call.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st
from sqlalchemy import text

from planq.domain.bounds import (
    INT32_MAX,
    INT64_MAX,
    MAX_BATCH,
    MAX_CHECKPOINT_BYTES,
    MAX_DURATION_SECONDS,
    MAX_ERROR_LENGTH,
    MAX_JOB_NAME_LENGTH,
    MAX_LIST_LIMIT,
    MAX_OWNER_LENGTH,
    MAX_PLAN_NAME_LENGTH,
    MAX_RETENTION_DAYS,
    MAX_SCHEMA_VERSION,
    MAX_STEP_SECONDS,
    MAX_WORKER_ID_LENGTH,
)
from planq.domain.clock import utcnow
from planq.domain.errors import BoundsError
from planq.domain.ids import new_id
from planq.domain.jobs import AsyncJob, AsyncJobStatus
from planq.domain.lifecycle import PlanLifecycleService
from planq.domain.plans import Plan, PlanPhase
from planq.domain.runs import RunStore
from planq.domain.runs.ports import Fresh
from planq.store import (
    Database,
    InMemoryRunStoreProvider,
    SqlJobStore,
    SqlPlanStore,
    SqlRunStoreProvider,
    in_memory_ledger,
)
from tests.bounds_support import (
    RUN_WRITES,
    THOUSAND,
    bad_int,
    bad_number,
    bad_text,
    expect_bounds,
    run_write,
    too_deep_text,
    too_many_bytes,
    with_unstorable,
)

_SNAPSHOT = {
    "async_jobs": "job_id, status, worker_id, progress, checkpoint_json, error_message, "
    "attempt, dispatch_count, cancel_requested_at",
    "plans": "plan_id, name, version, spec_json, phase, status",
    "recoverable_runs": "id, status, owner, cursor, scanned_count, finding_count, params_json, "
    "progress_total, progress_kind, lease_epoch, error_message",
    "run_findings": "id, run_id, kind",
}


class World:
    """One ledger with a plan, a queued job, a running job and an active run in it.

    On SQL (db given) the snapshot reads the tables; in memory (db None) it reads every
    row back through the stores' own listings.
    """

    def __init__(self, db: Database | None) -> None:
        self.db = db
        if db is None:
            self.jobs, self.plans = in_memory_ledger()
            self.runs: SqlRunStoreProvider | InMemoryRunStoreProvider = InMemoryRunStoreProvider()
        else:
            self.jobs, self.plans = SqlJobStore(db), SqlPlanStore(db)
            self.runs = SqlRunStoreProvider(db)
        self.service = PlanLifecycleService(self.plans, self.jobs)
        self.plan = self.service.create_plan(["a", {"name": "b", "seconds": 0.5}], name="seed")
        self.queued = AsyncJob(plan_id=self.plan.plan_id, phase=PlanPhase.strategize)
        self.jobs.add(self.queued)
        self.running = AsyncJob(plan_id=self.plan.plan_id, phase=PlanPhase.execute)
        self.jobs.add(self.running)
        assert self.jobs.claim(self.running.job_id, "worker-a", utcnow())
        opened = self.runs.open_or_start("bounds", owner="worker-a")
        assert isinstance(opened, Fresh)
        self.run: RunStore = opened.store
        self.run.checkpoint(b"start", INT64_MAX - 10)  # RUN_WRITES' overflow case needs this
        self.run.set_string_param("mode", "deep")
        self.run.record_finding("seeded", "anomaly", None, {"n": 1})
        self.before = self.snapshot()

    def snapshot(self) -> dict[str, list[tuple[Any, ...]]]:
        """Every row's mutable columns, per table, in id order."""
        if self.db is None:
            runs = self.runs.list_runs(limit=MAX_LIST_LIMIT)
            return {
                "async_jobs": [(j.model_dump(),) for j in self.jobs.list_all()],
                "plans": [(p.model_dump(),) for p in self.plans.list_all()],
                "recoverable_runs": [(r,) for r in runs],
                "run_findings": [(f,) for r in runs for f in self.runs.list_findings(r.id)],
            }
        with self.db.engine.connect() as conn:
            return {
                table: [
                    tuple(row)
                    for row in conn.execute(text(f"SELECT {cols} FROM {table} ORDER BY 1"))
                ]
                for table, cols in _SNAPSHOT.items()
            }

    def refuses(self, call: Callable[[], object], field: str) -> None:
        """The call raises a BoundsError naming field, and no row changed."""
        with pytest.raises(BoundsError) as error:
            call()
        expect_bounds(error, field)
        assert self.snapshot() == self.before


@pytest.fixture(params=["memory", "sqlite", "postgres"])
def world(request: pytest.FixtureRequest) -> Iterator[World]:
    """A seeded World on each backend; one database per test function."""
    if request.param == "memory":
        yield World(None)
        return
    fixture = "sqlite_database" if request.param == "sqlite" else "pg_database"
    yield World(request.getfixturevalue(fixture))


def _text_fields() -> st.SearchStrategy[tuple[str, object]]:
    return st.one_of(
        st.tuples(st.just("worker_id"), bad_text(MAX_WORKER_ID_LENGTH)),
        st.tuples(st.just("error_message"), bad_text(MAX_ERROR_LENGTH, allow_empty=True)),
        st.tuples(st.just("checkpoint_json"), too_many_bytes(MAX_CHECKPOINT_BYTES)),
        st.tuples(st.just("checkpoint_json"), too_deep_text()),
        st.tuples(st.just("progress"), bad_number(0.0, 1.0).filter(lambda v: v is not None)),
        st.tuples(st.just("attempt"), bad_int(1, INT32_MAX)),
        st.tuples(st.just("dispatch_count"), bad_int(0, INT32_MAX)),
        st.tuples(st.just("schema_version"), bad_int(1, MAX_SCHEMA_VERSION)),
        st.tuples(st.just("payload"), too_deep_text('{"schema_version": 1, "x": {}}')),
        st.tuples(
            st.just("payload"), st.sampled_from(['{"plan_id": "x"}', '{"schema_version": 0}'])
        ),
    )


# -- the job store ---------------------------------------------------------------------------


@THOUSAND
@given(case=_text_fields(), op=st.sampled_from(["add", "update", "queue"]))
def test_a_job_out_of_bounds_is_refused_by_add_update_and_queue(
    world: World, case: tuple[str, object], op: str
) -> None:
    field, value = case
    if field in {"worker_id", "progress", "checkpoint_json"} and value is None:
        return
    base = world.running if op == "update" else AsyncJob(plan_id=new_id(), phase=PlanPhase.apply)
    column = "payload_json" if field == "payload" else field
    job = base.model_copy(update={column: value})  # skips pydantic, as a caller's copy can
    call = {
        "add": lambda: world.jobs.add(job),
        "update": lambda: world.jobs.update(job),
        "queue": lambda: world.jobs.queue([job], utcnow()),
    }[op]
    world.refuses(call, field)


@THOUSAND
@given(
    case=st.one_of(
        st.tuples(st.just("claim"), st.just("worker_id"), bad_text(MAX_WORKER_ID_LENGTH)),
        st.tuples(st.just("finish"), st.just("worker_id"), bad_text(MAX_WORKER_ID_LENGTH)),
        st.tuples(
            st.just("finish"),
            st.just("error_message"),
            bad_text(MAX_ERROR_LENGTH, allow_empty=True),
        ),
        st.tuples(st.just("progress"), st.just("progress"), bad_number(0.0, 1.0)),
        st.tuples(st.just("progress"), st.just("checkpoint_json"), too_deep_text()),
        st.tuples(
            st.just("progress"), st.just("checkpoint_json"), too_many_bytes(MAX_CHECKPOINT_BYTES)
        ),
        st.tuples(
            st.just("progress"),
            st.just("checkpoint_json"),
            st.sampled_from(["NaN", "[Infinity]", "{", "", '{"a": -Infinity}']),
        ),
        st.tuples(st.just("progress"), st.just("worker_id"), bad_text(MAX_WORKER_ID_LENGTH)),
        st.tuples(st.just("heartbeat"), st.just("worker_id"), bad_text(MAX_WORKER_ID_LENGTH)),
    )
)
def test_worker_writes_out_of_bounds_are_refused(world: World, case: tuple[str, str, Any]) -> None:
    op, field, value = case
    if value is None:
        return  # None is a valid (absent) progress
    now, queued, running = utcnow(), world.queued.job_id, world.running.job_id
    calls: dict[tuple[str, str], Callable[[], object]] = {
        ("claim", "worker_id"): lambda: world.jobs.claim(queued, value, now),
        ("finish", "worker_id"): lambda: world.jobs.finish(
            running, AsyncJobStatus.failed, now, "boom", worker_id=value
        ),
        ("finish", "error_message"): lambda: world.jobs.finish(
            running, AsyncJobStatus.failed, now, value, worker_id="worker-a"
        ),
        ("progress", "progress"): lambda: world.jobs.save_progress(
            running, value, None, "worker-a"
        ),
        ("progress", "checkpoint_json"): lambda: world.jobs.save_progress(
            running, 0.5, value, "worker-a"
        ),
        ("progress", "worker_id"): lambda: world.jobs.save_progress(running, 0.5, "{}", value),
        ("heartbeat", "worker_id"): lambda: world.jobs.heartbeat([running], now, value),
    }
    world.refuses(calls[(op, field)], field)


BAD_IDS = bad_text(26)


@THOUSAND
@given(
    job_id=BAD_IDS,
    op=st.sampled_from(
        ["get", "cancel", "remove", "claim", "finish", "progress", "expire", "fail_queued"]
    ),
)
def test_job_ids_out_of_bounds_are_refused(world: World, job_id: object, op: str) -> None:
    now = utcnow()
    calls: dict[str, Callable[[], object]] = {
        "get": lambda: world.jobs.get(job_id),  # type: ignore[arg-type]
        "cancel": lambda: world.jobs.cancel(job_id, now),  # type: ignore[arg-type]
        "remove": lambda: world.jobs.remove(job_id),  # type: ignore[arg-type]
        "claim": lambda: world.jobs.claim(job_id, "w", now),  # type: ignore[arg-type]
        "finish": lambda: world.jobs.finish(job_id, AsyncJobStatus.failed, now, "x"),  # type: ignore[arg-type]
        "progress": lambda: world.jobs.save_progress(job_id, 0.5, None),  # type: ignore[arg-type]
        "expire": lambda: world.jobs.expire(job_id, now, now, "x"),  # type: ignore[arg-type]
        "fail_queued": lambda: world.jobs.fail_queued(job_id, now, "x"),  # type: ignore[arg-type]
    }
    world.refuses(calls[op], "job_id")


@THOUSAND
@given(
    case=st.one_of(
        st.tuples(st.just("job_ids"), st.lists(BAD_IDS, min_size=1, max_size=3)),
        st.tuples(st.just("job_ids"), st.one_of(st.text(max_size=5), st.binary(max_size=5))),
        st.tuples(st.just("plan_id"), BAD_IDS),
        st.tuples(st.just("limit"), bad_int(0, MAX_LIST_LIMIT).filter(lambda v: v is not None)),
        st.tuples(st.just("batch_size"), bad_int(1, INT32_MAX)),
        st.tuples(st.just("offset"), bad_int(0, INT64_MAX)),
    ),
    op=st.integers(0, 6),
)
def test_batches_listings_and_limits_are_bounded(
    world: World, case: tuple[str, Any], op: int
) -> None:
    field, value = case
    now = utcnow()
    calls: dict[str, list[Callable[[], object]]] = {
        "job_ids": [
            lambda: world.jobs.heartbeat(value, now, "worker-a"),
            lambda: world.jobs.mark_dispatched(value, now),
        ],
        "plan_id": [
            lambda: world.jobs.list_by_plan(value),
            lambda: world.plans.get(value) if isinstance(value, str) else world.plans.remove(value),
            lambda: world.plans.remove(value),
            lambda: world.jobs.list_recent(plan_id=value) if value is not None else 0,
        ],
        "limit": [
            lambda: world.jobs.list_all(limit=value),
            lambda: world.jobs.list_by_status(AsyncJobStatus.queued, limit=value),
            lambda: world.jobs.list_stuck(now, limit=value),
            lambda: world.jobs.list_dispatch_due(now, now, limit=value),
            lambda: world.plans.list_all(limit=value),
            lambda: world.jobs.list_recent(limit=value),
            lambda: world.plans.list_recent(limit=value),
        ],
        "offset": [
            lambda: world.jobs.list_recent(offset=value),
            lambda: world.plans.list_recent(offset=value),
            lambda: world.runs.list_findings(world.run.run_id, offset=value),
        ],
        "batch_size": [lambda: world.jobs.delete_terminal_before(now, batch_size=value)],
    }
    options = calls[field]
    world.refuses(options[op % len(options)], field)


def test_too_many_ids_in_one_call_are_refused(world: World) -> None:
    ids = [new_id() for _ in range(MAX_BATCH + 1)]
    world.refuses(lambda: world.jobs.mark_dispatched(ids, utcnow()), "job_ids")
    world.refuses(lambda: world.jobs.heartbeat(ids, utcnow()), "job_ids")


# -- plans -----------------------------------------------------------------------------------


@THOUSAND
@given(
    case=st.one_of(
        st.tuples(st.just("name"), bad_text(MAX_PLAN_NAME_LENGTH, allow_empty=True)),
        st.tuples(st.just("version"), bad_int(0, INT32_MAX)),
        st.tuples(st.just("spec_json"), too_deep_text('{"x": {}}')),
        st.tuples(st.just("spec_json"), too_many_bytes(2**20).map(lambda s: json.dumps({"p": s}))),
        st.tuples(
            st.just("steps"),
            st.one_of(
                st.text(max_size=6),
                st.lists(st.one_of(st.integers(), st.none(), with_unstorable(50)), min_size=1),
                st.lists(
                    st.fixed_dictionaries(
                        {
                            "name": st.just("s"),
                            "seconds": bad_number(0.0, MAX_STEP_SECONDS).filter(
                                lambda v: v is not None
                            ),
                        }
                    ),
                    min_size=1,
                    max_size=2,
                ),
            ),
        ),
    ),
    op=st.sampled_from(["add", "update", "create"]),
)
def test_a_plan_out_of_bounds_is_refused_by_add_update_and_create_plan(
    world: World, case: tuple[str, Any], op: str
) -> None:
    field, value = case
    if op == "create":
        steps, name = (value, "") if field == "steps" else (["a"], value)
        if field in {"version", "spec_json"}:
            return  # create_plan takes steps and a name only
        world.refuses(lambda: world.service.create_plan(steps, name=name), field)
        return
    if field == "steps":
        field, value = "spec_json", json.dumps({"steps": value}, allow_nan=True)
    base = world.plan if op == "update" else Plan()
    plan = base.model_copy(update={field: value})
    call = world.plans.add if op == "add" else world.plans.update
    world.refuses(lambda: call(plan), field)


# -- recoverable runs ------------------------------------------------------------------------


@THOUSAND
@given(case=RUN_WRITES)
def test_run_writes_out_of_bounds_are_refused(world: World, case: tuple[str, str, Any]) -> None:
    field, op, value = case
    if isinstance(value, str) and value in {
        "data_loss",
        "inconsistent",
        "anomaly",
        "count",
        "approximate",
    }:
        return  # a valid severity or progress kind
    world.refuses(lambda: run_write(world.run, op, field, value), field)


@THOUSAND
@given(
    case=st.one_of(
        st.tuples(st.just("job_name"), bad_text(MAX_JOB_NAME_LENGTH)),
        st.tuples(st.just("owner"), bad_text(MAX_OWNER_LENGTH)),
        st.tuples(st.just("run_id"), BAD_IDS),
        st.tuples(
            st.just("leases"), st.one_of(st.lists(st.integers(), max_size=2), st.text(max_size=3))
        ),
        st.tuples(
            st.just("lease run_id"),
            BAD_IDS.filter(lambda v: not isinstance(v, list | dict)).map(lambda k: {k: 1}),
        ),
        st.tuples(st.just("lease_epoch"), bad_int(0, INT64_MAX).map(lambda e: {new_id(): e})),
        st.tuples(st.just("retention_days"), bad_number(-MAX_RETENTION_DAYS, MAX_RETENTION_DAYS)),
        st.tuples(st.just("stale_after"), bad_number(0.0, MAX_DURATION_SECONDS)),
        st.tuples(st.just("limit"), bad_int(1, MAX_LIST_LIMIT)),
    ),
    op=st.integers(0, 2),
)
def test_run_provider_calls_out_of_bounds_are_refused(
    world: World, case: tuple[str, Any], op: int
) -> None:
    field, value = case
    if field == "stale_after" and value is None:
        return  # None: the spec's sweep of every active run
    runs = world.runs
    calls: dict[str, list[Callable[[], object]]] = {
        "job_name": [
            lambda: runs.open_or_start(value, owner="worker-a"),
            lambda: runs.request_cancel(value),
            lambda: runs.list_runs(value),
        ],
        "owner": [
            lambda: runs.open_or_start("other", owner=value),
            lambda: runs.boot_recovery_sweep(value, 60),
        ],
        "run_id": [
            lambda: runs.get_run_by_id(value),
            lambda: runs.list_findings(value),
            lambda: runs.finding_severity_counts(value),
        ],
        "lease run_id": [lambda: runs.heartbeat_runs(value)],
        "leases": [lambda: runs.heartbeat_runs(value)],
        "lease_epoch": [lambda: runs.heartbeat_runs(value)],
        "retention_days": [lambda: runs.purge_terminal_runs(value)],
        "stale_after": [lambda: runs.boot_recovery_sweep("worker-a", stale_after=value)],
        "limit": [
            lambda: runs.list_runs(limit=value),
            lambda: runs.list_findings(world.run.run_id, limit=value),
        ],
    }
    options = calls[field]
    world.refuses(options[op % len(options)], "run_id" if field == "lease run_id" else field)
