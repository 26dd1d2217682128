"""Bounds at the plan and run stores' boundaries (memory, SQLite, PostgreSQL).

As test_bounds_stores.py for the job store: 1,000 cases per property against one seeded
database per test function (`world`), every case refused with a typed error and no row
changed.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from planq.domain.bounds import (
    INT32_MAX,
    INT64_MAX,
    MAX_DURATION_SECONDS,
    MAX_JOB_NAME_LENGTH,
    MAX_LIST_LIMIT,
    MAX_OWNER_LENGTH,
    MAX_PLAN_NAME_LENGTH,
    MAX_RETENTION_DAYS,
    MAX_STEP_SECONDS,
)
from planq.domain.ids import new_id
from planq.domain.plans import Plan
from tests.bounds_support import (
    BAD_IDS,
    RUN_WRITES,
    THOUSAND,
    bad_int,
    bad_number,
    bad_text,
    run_write,
    too_deep_text,
    too_many_bytes,
    with_unstorable,
)
from tests.integration.conftest import World

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
