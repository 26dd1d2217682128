"""Plans: defaults, the phase rules, following job outcomes, and the spec."""

from __future__ import annotations

import itertools
import json
from datetime import UTC, datetime, timedelta

import pytest
from pydantic import ValidationError

from planq.domain.errors import InvalidPlanTransitionError
from planq.domain.ids import is_ulid, new_id
from planq.domain.plans import Plan, PlanPhase, PlanStatus

P = PlanPhase
St = PlanStatus

#: Every consistent plan state: brand new, or some phase in some status.
STATES: list[tuple[PlanPhase | None, PlanStatus | None]] = [(None, None)] + [
    (phase, status) for phase in P for status in St
]

#: The phase rules, written out by hand (independently of domain.plans' tables).
QUEUE_ALLOWED: dict[PlanPhase, set[tuple[PlanPhase | None, PlanStatus | None]]] = {
    P.strategize: {(None, None), (P.strategize, St.failed), (P.strategize, St.cancelled)},
    P.execute: {(P.strategize, St.complete), (P.execute, St.failed), (P.execute, St.cancelled)},
    P.apply: {(P.execute, St.complete), (P.apply, St.failed), (P.apply, St.cancelled)},
}

QUEUE_CASES = [(phase, status, wanted) for (phase, status) in STATES for wanted in P]


def _state_id(phase: PlanPhase | None, status: PlanStatus | None) -> str:
    return "new" if phase is None else f"{phase.value}/{status.value if status else None}"


#: Moves a job outcome may make on a plan in the same phase.
FOLLOW_ALLOWED = {
    (St.queued, St.running),
    (St.queued, St.cancelled),
    (St.queued, St.failed),
    (St.running, St.complete),
    (St.running, St.failed),
    (St.running, St.cancelled),
    (St.running, St.queued),
    (St.failed, St.queued),
    (St.cancelled, St.queued),
}
FOLLOW_CASES = list(itertools.product(list(St), list(St)))


# -- defaults ------------------------------------------------------------------------------


def test_defaults() -> None:
    before = datetime.now(UTC)
    plan = Plan()
    assert is_ulid(plan.plan_id)
    assert plan.name == ""
    assert plan.phase is None
    assert plan.status is None
    assert plan.label == "New"
    assert plan.version == 0
    assert plan.spec == {"steps": []}
    assert plan.steps == []
    assert plan.created_at.utcoffset() == timedelta(0)
    assert before <= plan.created_at <= datetime.now(UTC)
    assert plan.updated_at.utcoffset() == timedelta(0)


def test_labels() -> None:
    assert Plan(phase=P.execute, status=St.queued).label == "Execute/QUEUED"
    assert Plan(phase=P.strategize, status=St.complete).label == "Strategize/COMPLETE"
    assert Plan(phase=P.apply, status=St.cancelled).label == "Apply/CANCELLED"


def test_plan_id_must_be_a_ulid_and_is_upper_cased() -> None:
    with pytest.raises(ValidationError):
        Plan(plan_id="not-a-ulid")
    with pytest.raises(ValidationError):
        Plan(plan_id="")
    plan_id = new_id()
    assert Plan(plan_id=plan_id.lower()).plan_id == plan_id


def test_naive_timestamps_become_utc() -> None:
    naive = datetime(2024, 3, 4, 5, 6, 7)
    plan = Plan(created_at=naive, updated_at=naive)
    assert plan.created_at == naive.replace(tzinfo=UTC)
    assert plan.updated_at.tzinfo is not None


def test_version_cannot_be_negative() -> None:
    with pytest.raises(ValidationError):
        Plan(version=-1)


def test_as_cli_dict() -> None:
    plan = Plan.with_steps(["a", "b"], name="nightly")
    out = plan.as_cli_dict()
    assert out == {
        "plan_id": plan.plan_id,
        "name": "nightly",
        "phase": None,
        "status": None,
        "state": "New",
        "steps": 2,
        "created_at": plan.created_at.isoformat(),
        "updated_at": plan.updated_at.isoformat(),
        "pipeline": None,
    }
    plan.queue_phase(P.strategize)
    out = plan.as_cli_dict()
    assert (out["phase"], out["status"], out["state"]) == (
        "strategize",
        "queued",
        "Strategize/QUEUED",
    )
    json.dumps(out)


# -- queue_phase -----------------------------------------------------------------------------


def test_the_queue_table_covers_every_state_and_phase() -> None:
    assert len(STATES) == 16
    assert len(QUEUE_CASES) == 48


@pytest.mark.parametrize(
    ("phase", "status", "wanted"),
    QUEUE_CASES,
    ids=[f"{_state_id(p, s)}->{w.value}" for p, s, w in QUEUE_CASES],
)
def test_queue_phase_rules(
    phase: PlanPhase | None, status: PlanStatus | None, wanted: PlanPhase
) -> None:
    old = datetime(2020, 1, 1, tzinfo=UTC)
    plan = Plan(phase=phase, status=status, updated_at=old)
    if (phase, status) in QUEUE_ALLOWED[wanted]:
        plan.queue_phase(wanted)
        assert plan.phase is wanted
        assert plan.status is St.queued
        assert plan.label == f"{wanted.value.capitalize()}/QUEUED"
        assert plan.updated_at > old
    else:
        label = plan.label
        with pytest.raises(InvalidPlanTransitionError) as info:
            plan.queue_phase(wanted)
        assert (plan.phase, plan.status) == (phase, status)
        assert plan.updated_at == old
        assert info.value.plan_id == plan.plan_id
        assert info.value.current == label
        assert info.value.wanted == f"{wanted.value.capitalize()}/QUEUED"


def test_a_plan_walks_all_three_phases() -> None:
    plan = Plan()
    for phase in (P.strategize, P.execute, P.apply):
        plan.queue_phase(phase)
        assert plan.follow_job(phase, St.running)
        assert plan.follow_job(phase, St.complete)
    assert plan.label == "Apply/COMPLETE"
    for phase in P:
        with pytest.raises(InvalidPlanTransitionError):
            plan.queue_phase(phase)


# -- follow_job -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("current", "outcome"), FOLLOW_CASES, ids=[f"{a}->{b}" for a, b in FOLLOW_CASES]
)
def test_follow_job_in_the_current_phase(current: PlanStatus, outcome: PlanStatus) -> None:
    old = datetime(2020, 1, 1, tzinfo=UTC)
    plan = Plan(phase=P.execute, status=current, updated_at=old)
    if current is outcome:
        assert plan.follow_job(P.execute, outcome) is False
        assert plan.updated_at == old
    elif (current, outcome) in FOLLOW_ALLOWED:
        assert plan.follow_job(P.execute, outcome) is True
        assert plan.status is outcome
        assert plan.updated_at > old
    else:
        with pytest.raises(InvalidPlanTransitionError):
            plan.follow_job(P.execute, outcome)
        assert plan.status is current
        assert plan.updated_at == old


def test_follow_job_of_another_phase_changes_nothing() -> None:
    plan = Plan(phase=P.execute, status=St.queued)
    assert plan.follow_job(P.strategize, St.complete) is False
    assert plan.follow_job(P.apply, St.running) is False
    assert plan.label == "Execute/QUEUED"


def test_follow_job_on_a_new_plan_changes_nothing() -> None:
    plan = Plan()
    assert plan.follow_job(P.strategize, St.running) is False
    assert plan.label == "New"


def test_follow_job_error_names_both_states() -> None:
    plan = Plan(phase=P.execute, status=St.complete)
    with pytest.raises(InvalidPlanTransitionError) as info:
        plan.follow_job(P.execute, St.running)
    assert info.value.current == "Execute/COMPLETE"
    assert info.value.wanted == "Execute/RUNNING"


# -- spec --------------------------------------------------------------------------------------


def test_with_steps_from_names_and_objects() -> None:
    plan = Plan.with_steps(["scan", {"name": "fix", "limit": 3}], name="cleanup")
    assert plan.name == "cleanup"
    assert plan.steps == [{"name": "scan"}, {"name": "fix", "limit": 3}]
    assert plan.spec == {"steps": plan.steps}
    assert plan.label == "New"


def test_with_steps_copies_step_objects() -> None:
    step = {"name": "fix"}
    plan = Plan.with_steps([step])
    step["name"] = "changed"
    assert plan.steps == [{"name": "fix"}]


def test_with_no_steps() -> None:
    assert Plan.with_steps([]).steps == []


def test_steps_view_is_a_copy() -> None:
    plan = Plan.with_steps(["a"])
    plan.steps.append({"name": "b"})
    assert plan.steps == [{"name": "a"}]


def test_spec_without_steps_key_has_no_steps() -> None:
    plan = Plan(spec_json='{"owner": "ops"}')
    assert plan.steps == []
    assert plan.spec == {"owner": "ops"}


@pytest.mark.parametrize(
    "spec_json",
    ["{broken", "", "[1, 2]", '"steps"', "null", '{"steps": "scan"}', '{"steps": {"a": 1}}'],
)
def test_spec_must_be_an_object_with_a_steps_list(spec_json: str) -> None:
    with pytest.raises(ValidationError):
        Plan(spec_json=spec_json)


def test_spec_assignment_is_validated() -> None:
    plan = Plan.with_steps(["a"])
    with pytest.raises(ValidationError):
        plan.spec_json = "[]"
    assert plan.steps == [{"name": "a"}]
