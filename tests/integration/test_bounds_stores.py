"""Bounds at the job store's boundaries (memory, SQLite, PostgreSQL): typed refusals.

Each property runs 1,000 cases against ONE database per test function (`world`, in
tests/integration/conftest.py), and after every case reads the tables back: the row counts
and the rows' mutable columns are exactly what they were before the first refused call.
The plan and run stores' bounds are in test_bounds_plan_run_stores.py.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from planq.domain.bounds import (
    INT32_MAX,
    INT64_MAX,
    MAX_BATCH,
    MAX_CHECKPOINT_BYTES,
    MAX_ERROR_LENGTH,
    MAX_LIST_LIMIT,
    MAX_SCHEMA_VERSION,
    MAX_WORKER_ID_LENGTH,
)
from planq.domain.clock import utcnow
from planq.domain.ids import new_id
from planq.domain.jobs import AsyncJob, AsyncJobStatus
from planq.domain.plans import PlanPhase
from tests.bounds_support import (
    BAD_IDS,
    THOUSAND,
    bad_int,
    bad_number,
    bad_text,
    too_deep_text,
    too_many_bytes,
)
from tests.integration.conftest import World


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
