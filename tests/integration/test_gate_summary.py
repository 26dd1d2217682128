"""The plans waiting at an approval gate, as the metrics gauges read them, on every store."""

from __future__ import annotations

from datetime import timedelta

import pytest

from planq.domain.clock import utcnow
from planq.domain.errors import BoundsError
from planq.domain.plans import PipelineState, Plan, PlanPhase, PlanStatus
from planq.domain.ports import PlanStore


def at_gate(plans: PlanStore, name: str, minutes_ago: int) -> Plan:
    plan = Plan(name=name)
    plans.add(plan)
    plan.phase, plan.status = PlanPhase.execute, PlanStatus.complete
    plan.pipeline_through, plan.pipeline_gate = PlanPhase.apply, PlanPhase.apply
    plan.pipeline_state = PipelineState.awaiting_approval
    plan.updated_at = utcnow() - timedelta(minutes=minutes_ago)
    plans.update(plan)
    return plan


def test_the_summary_counts_the_waiting_plans_and_the_oldest_wait(plans: PlanStore) -> None:
    empty = plans.gate_summary()
    assert (empty.waiting, empty.oldest_since) == (0, None)
    plans.add(Plan(name="no pipeline"))
    newer, older = at_gate(plans, "newer", 5), at_gate(plans, "older", 50)
    moved_on = at_gate(plans, "approved", 90)
    moved_on.pipeline_state = PipelineState.running
    plans.update(moved_on)

    summary = plans.gate_summary()
    assert summary.waiting == 2
    assert summary.oldest_since == older.updated_at
    capped = plans.gate_summary(at_most=1)
    assert (capped.waiting, capped.oldest_since) == (1, older.updated_at)
    uncapped = plans.gate_summary(at_most=2)  # exactly the cap: "at least 2", and 2
    assert (uncapped.waiting, uncapped.oldest_since) == (2, older.updated_at)
    newer.pipeline_state = PipelineState.rejected  # a decision takes it off the gate
    plans.update(newer)
    assert plans.gate_summary().waiting == 1


@pytest.mark.parametrize("bad", [0, -1, "10", 10**12, True])
def test_a_bad_cap_is_refused(plans: PlanStore, bad: object) -> None:
    with pytest.raises((BoundsError, TypeError)):
        plans.gate_summary(at_most=bad)  # type: ignore[arg-type]
