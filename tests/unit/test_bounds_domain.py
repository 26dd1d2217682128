"""Bounds at the domain boundaries: every refusal is typed, names its field, writes nothing.

Property-based (1,000 cases each) over the job model, the payload codec, plans and plan
creation, the run checks, the run engine and the in-memory stores.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st
from pydantic import ValidationError

from planq.domain.bounds import (
    INT32_MAX,
    INT64_MAX,
    MAX_CHECKPOINT_BYTES,
    MAX_DURATION_SECONDS,
    MAX_ERROR_LENGTH,
    MAX_JOB_NAME_LENGTH,
    MAX_LIST_LIMIT,
    MAX_OWNER_LENGTH,
    MAX_PAYLOAD_BYTES,
    MAX_PLAN_NAME_LENGTH,
    MAX_RETENTION_DAYS,
    MAX_SCHEMA_VERSION,
    MAX_STEP_NAME_LENGTH,
    MAX_STEP_SECONDS,
    MAX_STEPS,
    MAX_WORKER_ID_LENGTH,
)
from planq.domain.errors import BoundsError, WrongTypeError
from planq.domain.ids import new_id
from planq.domain.jobs import AsyncJob, deserialize_job_payload, serialize_job_payload
from planq.domain.ledger import JobLedger
from planq.domain.lifecycle import PlanLifecycleService
from planq.domain.plans import Plan, PlanPhase
from planq.domain.runs import Completed, RunOutcome, RunStore, run_or_resume
from planq.domain.runs.checks import check_limit, purge_cutoff, stale_cutoff
from planq.domain.runs.ports import Fresh
from planq.store import InMemoryRunStoreProvider, in_memory_ledger
from tests.bounds_support import (
    RUN_WRITES,
    THOUSAND,
    bad_int,
    bad_number,
    bad_text,
    expect_bounds,
    run_write,
    too_deep,
    too_deep_text,
    too_many_bytes,
)

# -- the job model: pydantic's ValidationError names the field; the cause is typed ----------


def model_text(max_length: int, *, allow_empty: bool = False) -> st.SearchStrategy[object]:
    """bad_text without bytes (pydantic's lax mode reads UTF-8 bytes as a str)."""
    return bad_text(max_length, allow_empty=allow_empty).filter(lambda v: not isinstance(v, bytes))


def _job(**fields: Any) -> AsyncJob:
    return AsyncJob(plan_id=new_id(), phase=PlanPhase.execute, **fields)


def _refused_field(error: pytest.ExceptionInfo[ValidationError], field: str) -> None:
    errors = error.value.errors()
    assert errors[0]["loc"] == (field,), errors
    cause = errors[0].get("ctx", {}).get("error")
    assert cause is None or isinstance(cause, BoundsError | ValueError)


@THOUSAND
@given(
    field=st.sampled_from(["attempt", "schema_version", "dispatch_count"]),
    value=st.one_of(st.integers(min_value=INT32_MAX + 1), st.integers(max_value=-1)),
)
def test_job_integers_fit_their_int32_columns(field: str, value: int) -> None:
    with pytest.raises(ValidationError) as error:
        _job(**{field: value})
    _refused_field(error, field)


@THOUSAND
@given(value=st.integers(min_value=MAX_SCHEMA_VERSION + 1))
def test_job_schema_version_too_new_is_refused(value: int) -> None:
    with pytest.raises(ValidationError) as error:
        _job(schema_version=value)
    _refused_field(error, "schema_version")


@THOUSAND
@given(
    case=st.one_of(
        st.tuples(st.just("worker_id"), model_text(MAX_WORKER_ID_LENGTH)),
        st.tuples(st.just("error_message"), model_text(MAX_ERROR_LENGTH, allow_empty=True)),
        st.tuples(st.just("checkpoint_json"), too_many_bytes(MAX_CHECKPOINT_BYTES)),
        st.tuples(st.just("checkpoint_json"), too_deep_text()),
        st.tuples(st.just("checkpoint_json"), st.sampled_from(["NaN", '{"a": Infinity}', "{"])),
        st.tuples(
            st.just("progress"),
            bad_number(0.0, 1.0).filter(lambda v: v is not None and not isinstance(v, bool)),
        ),
    )
)
def test_job_text_and_json_fields_are_bounded(case: tuple[str, object]) -> None:
    field, value = case
    if field == "progress" and isinstance(value, str):
        value = value + "x"  # pydantic would read "1" or "0.5" as a number
    with pytest.raises(ValidationError) as error:
        _job(**{field: value})
    _refused_field(error, field)


@THOUSAND
@given(worker_id=bad_text(MAX_WORKER_ID_LENGTH))
def test_mark_running_refuses_a_bad_worker_id_and_stays_queued(worker_id: object) -> None:
    job = _job()
    with pytest.raises(BoundsError) as error:
        job.mark_running(worker_id)  # type: ignore[arg-type]
    expect_bounds(error, "worker_id")
    assert job.status.value == "queued" and job.worker_id is None


# -- the payload codec -------------------------------------------------------------------------


def _payload(**data: Any) -> str:
    return json.dumps({"plan_id": new_id(), "phase": "execute", **data})


SCHEMA_VERSIONS = st.one_of(
    st.integers(max_value=0),
    st.integers(min_value=MAX_SCHEMA_VERSION + 1),
    st.floats(),
    st.booleans(),
    st.text(max_size=5),
    st.none(),
    st.lists(st.integers(), max_size=2),
)


@THOUSAND
@given(version=SCHEMA_VERSIONS, missing=st.booleans())
def test_deserialize_checks_schema_version_on_read(version: object, missing: bool) -> None:
    if missing:
        text = _payload()
    elif isinstance(version, float) and not math.isfinite(version):
        text = _payload().replace("}", f', "schema_version": {json.dumps(version)}}}')
    else:
        text = _payload(schema_version=version)
    with pytest.raises(BoundsError) as error:
        deserialize_job_payload(text)
    expect_bounds(error, "payload")
    if missing or not (isinstance(version, float) and not math.isfinite(version)):
        assert error.value.field == "payload schema_version"


@THOUSAND
@given(
    text=st.one_of(
        too_deep_text('{"schema_version": 1, "x": {}}'),
        too_many_bytes(MAX_PAYLOAD_BYTES).map(lambda s: _payload(schema_version=1, pad=s)),
        st.sampled_from(["[]", "3", "null", "{", "NaN", '"s"', ""]),
    )
)
def test_deserialize_refuses_deep_big_or_non_object_payloads(text: str) -> None:
    with pytest.raises(BoundsError) as error:
        deserialize_job_payload(text)
    expect_bounds(error, "payload")


@THOUSAND
@given(
    case=st.one_of(
        st.tuples(st.just("payload plan_id"), bad_text(26)),
        st.tuples(st.just("payload phase"), bad_text(16)),
        st.tuples(st.just("payload schema_version"), SCHEMA_VERSIONS),
        st.tuples(st.just("payload"), too_deep().map(lambda v: {"x": v})),
    )
)
def test_serialize_refuses_what_it_could_not_read_back(case: tuple[str, object]) -> None:
    field, value = case
    kwargs: dict[str, Any] = {"plan_id": new_id(), "phase": "execute", "schema_version": 1}
    if field == "payload":
        kwargs["extra"] = value
    else:
        kwargs[field.split()[-1]] = value
    with pytest.raises(BoundsError) as error:
        serialize_job_payload(**kwargs)
    expect_bounds(error, field)


# -- plans and plan creation (nothing stored on a refusal) ----------------------------------

BAD_STEP = st.one_of(
    st.integers(),
    st.none(),
    st.lists(st.text(max_size=3), max_size=2),
    bad_text(MAX_STEP_NAME_LENGTH).filter(lambda v: isinstance(v, str)),
    st.fixed_dictionaries({"name": bad_text(MAX_STEP_NAME_LENGTH)}),
    st.fixed_dictionaries({"seconds": st.floats(0, 10)}),  # no name
    st.fixed_dictionaries(
        {
            "name": st.just("ok"),
            "seconds": bad_number(0.0, MAX_STEP_SECONDS).filter(lambda v: v is not None),
        }
    ),
)
BAD_STEPS = st.one_of(
    st.text(max_size=10),  # steps="abc" is not three steps
    st.tuples(st.just("a")),
    st.dictionaries(st.text(max_size=3), st.text(max_size=3), max_size=2),
    st.integers(),
    st.none(),
    st.tuples(
        st.lists(st.just("ok"), max_size=3), BAD_STEP, st.lists(st.just("ok"), max_size=3)
    ).map(lambda t: [*t[0], t[1], *t[2]]),
)


@THOUSAND
@given(
    case=st.one_of(
        st.tuples(st.just("steps"), BAD_STEPS, st.just("")),
        st.tuples(
            st.just("name"), st.just(["ok"]), bad_text(MAX_PLAN_NAME_LENGTH, allow_empty=True)
        ),
    )
)
def test_create_plan_refuses_bad_steps_or_name_and_stores_nothing(
    case: tuple[str, object, object],
) -> None:
    field, steps, name = case
    jobs, plans = in_memory_ledger()
    service = PlanLifecycleService(plans, jobs)
    with pytest.raises(BoundsError) as error:
        service.create_plan(steps, name=name)  # type: ignore[arg-type]
    expect_bounds(error, field)
    assert plans.list_all() == [] and jobs.count() == 0


def test_create_plan_refuses_too_many_steps() -> None:
    jobs, plans = in_memory_ledger()
    with pytest.raises(BoundsError) as error:
        PlanLifecycleService(plans, jobs).create_plan(["s"] * (MAX_STEPS + 1))
    expect_bounds(error, "steps")
    assert plans.list_all() == []


@THOUSAND
@given(
    case=st.one_of(
        st.tuples(st.just("name"), model_text(MAX_PLAN_NAME_LENGTH, allow_empty=True)),
        st.tuples(st.just("version"), st.integers(min_value=INT32_MAX + 1)),
        st.tuples(st.just("spec_json"), too_deep_text('{"x": {}}')),
        st.tuples(
            st.just("spec_json"),
            BAD_STEPS.filter(lambda s: isinstance(s, list)).map(
                lambda s: json.dumps({"steps": s}, default=lambda _: None)
            ),
        ),
    )
)
def test_plan_model_bounds_its_fields(case: tuple[str, object]) -> None:
    field, value = case
    with pytest.raises(ValidationError) as error:
        Plan(**{field: value})  # type: ignore[arg-type]
    _refused_field(error, field)


# -- the run checks and cut-offs --------------------------------------------------------------


@THOUSAND
@given(days=bad_number(-MAX_RETENTION_DAYS, MAX_RETENTION_DAYS))
def test_purge_days_must_be_finite_and_within_datetime(days: object) -> None:
    from planq.domain.clock import utcnow

    with pytest.raises(BoundsError) as error:
        purge_cutoff(utcnow(), days)  # type: ignore[arg-type]
    expect_bounds(error, "retention_days")


@THOUSAND
@given(seconds=bad_number(0.0, MAX_DURATION_SECONDS))
def test_stale_after_must_be_finite_and_within_datetime(seconds: object) -> None:
    from planq.domain.clock import utcnow

    with pytest.raises(BoundsError) as error:
        stale_cutoff(utcnow(), seconds)  # type: ignore[arg-type]
    expect_bounds(error, "stale_after")


@THOUSAND
@given(limit=bad_int(1, MAX_LIST_LIMIT), offset=st.integers(0, 10))
def test_page_limits_are_bounded(limit: object, offset: int) -> None:
    with pytest.raises(BoundsError) as error:
        check_limit(limit, offset)
    expect_bounds(error, "limit")


# -- the in-memory run store and the engine ---------------------------------------------------


def _state(provider: InMemoryRunStoreProvider) -> list[tuple[Any, ...]]:
    return [
        (r.id, r.status, r.scanned_count, r.finding_count, r.cursor_hex, dict(r.params))
        for r in provider.list_runs(limit=MAX_LIST_LIMIT)
    ]


@pytest.fixture(scope="module")
def memory_run() -> tuple[InMemoryRunStoreProvider, RunStore]:
    provider = InMemoryRunStoreProvider()
    opened = provider.open_or_start("bounds")
    assert isinstance(opened, Fresh)
    opened.store.checkpoint(b"start", INT64_MAX - 10)
    return provider, opened.store


@THOUSAND
@given(case=RUN_WRITES)
def test_memory_run_writes_out_of_bounds_change_nothing(
    memory_run: tuple[InMemoryRunStoreProvider, RunStore], case: tuple[str, str, Any]
) -> None:
    provider, store = memory_run
    if isinstance(case[2], str) and case[2] in {
        "data_loss",
        "inconsistent",
        "anomaly",
        "count",
        "approximate",
    }:
        return  # a valid severity or progress kind: not a refusal to test
    before = _state(provider)
    with pytest.raises(BoundsError) as error:
        run_write(store, case[1], case[0], case[2])
    expect_bounds(error, case[0])
    assert _state(provider) == before


class _Handler:
    def __init__(self, name: object) -> None:
        self.name = name

    def run_resumable(
        self, store: RunStore, args: Mapping[str, Any], resume_cursor: bytes | None
    ) -> RunOutcome:
        return Completed()


@THOUSAND
@given(
    case=st.one_of(
        st.tuples(st.just("job_name"), bad_text(MAX_JOB_NAME_LENGTH)),
        st.tuples(st.just("owner"), bad_text(MAX_OWNER_LENGTH)),
        st.tuples(
            st.just("args"),
            st.one_of(
                st.text(min_size=1, max_size=5), st.integers(), st.lists(st.integers(), min_size=1)
            ),
        ),
        st.tuples(
            st.just("args"), st.dictionaries(st.integers(), st.integers(), min_size=1, max_size=2)
        ),
    )
)
def test_the_engine_refuses_bad_input_before_opening_a_run(case: tuple[str, Any]) -> None:
    field, value = case
    provider = InMemoryRunStoreProvider()
    name, owner, args = "scan", "worker-a", None
    if field == "job_name":
        name = value
    elif field == "owner":
        owner = value
    else:
        args = value
    with pytest.raises(BoundsError) as error:
        run_or_resume(_Handler(name), provider, args, owner=owner)  # type: ignore[arg-type]
    expect_bounds(error, field)
    assert provider.list_runs() == []


def test_wrong_types_are_type_errors_too() -> None:
    with pytest.raises(TypeError) as error:
        Plan.with_steps("abc")  # type: ignore[arg-type]
    assert isinstance(error.value, WrongTypeError) and error.value.field == "steps"
    assert str(error.value) == "steps: must be a list of steps, got 'abc'"


# -- the ledger ---------------------------------------------------------------------------------


@THOUSAND
@given(
    case=st.one_of(
        st.tuples(st.just("job_ttl"), bad_number(0.0, MAX_DURATION_SECONDS)),
        st.tuples(st.just("job_timeout"), bad_number(0.0, MAX_DURATION_SECONDS)),
        st.tuples(st.just("unsent_grace"), bad_number(0.0, MAX_DURATION_SECONDS)),
        st.tuples(st.just("job_id"), bad_text(26)),
    ),
    cancel=st.booleans(),
)
def test_ledger_durations_and_ids_are_bounded(case: tuple[str, object], cancel: bool) -> None:
    field, value = case
    jobs, plans = in_memory_ledger()
    ledger = JobLedger(jobs, plans)
    plan = PlanLifecycleService(plans, jobs).create_plan(["a"])
    jobs.add(AsyncJob(plan_id=plan.plan_id, phase=PlanPhase.strategize))
    before = [j.model_dump() for j in jobs.list_all()]
    calls = {
        "job_ttl": lambda: ledger.cleanup(value),  # type: ignore[arg-type]
        "job_timeout": lambda: ledger.expire_stuck(value),  # type: ignore[arg-type]
        "unsent_grace": lambda: ledger.dispatch_due(value, 60),  # type: ignore[arg-type]
        "job_id": (lambda: ledger.cancel(value)) if cancel else (lambda: ledger.claim(value, "w")),  # type: ignore[arg-type]
    }
    with pytest.raises(BoundsError) as error:
        calls[field]()
    expect_bounds(error, field)
    assert [j.model_dump() for j in jobs.list_all()] == before


@THOUSAND
@given(
    state=st.one_of(
        too_deep().map(lambda v: {"deep": v}),
        too_many_bytes(MAX_CHECKPOINT_BYTES).map(lambda s: {"big": s}),
        st.sampled_from([{"n": float("nan")}, {"i": float("inf")}, {"s": {1}}, {"b": b"x"}]),
    )
)
def test_an_executor_checkpoint_out_of_bounds_saves_nothing(state: dict[str, Any]) -> None:
    from planq.domain.cancellation import CancellationToken
    from planq.tasks.executors import JobContext

    saved: list[tuple[float | None, str | None]] = []
    ctx = JobContext(job=_job(), token=CancellationToken(), save=lambda p, c: saved.append((p, c)))
    with pytest.raises(BoundsError) as error:
        ctx.checkpoint(state, progress=0.5)
    expect_bounds(error, "checkpoint")
    assert saved == []
