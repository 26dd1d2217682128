"""The demo's pipeline: one plan that runs itself, waits at its approval gate, is approved.

Its own module beside cli/demo.py: `run_plan.delay` queues strategize, the finishes queue
execute, the plan waits as Execute/COMPLETE until `approve_plan`, then apply runs; the
plan's timeline (who approved) is printed at the end.
"""

from __future__ import annotations

import time
from typing import Any

from rich.console import Console

from planq.domain.plans import PipelineState, Plan

STEPS = [{"name": "plan-change", "seconds": 0.2}, {"name": "check-drift", "seconds": 0.2}]
DEADLINE = 30.0
POLL = 0.05


class PipelineDemoError(Exception):
    """The pipeline did not reach the state the demo waits for."""


def _wait_state(service: Any, plan_id: str, state: PipelineState) -> Plan:
    stop = time.monotonic() + DEADLINE
    while time.monotonic() < stop:
        plan: Plan = service.plans.find(plan_id)
        if plan.pipeline_state is state:
            return plan
        time.sleep(POLL)
    raise PipelineDemoError(f"plan {plan_id} never reached pipeline state {state.value}")


def run_pipeline_demo(service: Any, app: Any, console: Console) -> Plan:
    """Run one plan through a gate, approve it after showing the wait; the finished plan."""
    plan = service.plans.create(STEPS, name="reviewed-rollout")
    console.print(
        f"plan reviewed-rollout {plan.plan_id}: "
        'run_plan.delay(plan_id, through="apply", approve_before="apply")'
    )
    app.tasks["planq.run_plan"].delay(
        plan.plan_id, through="apply", approve_before="apply", actor="demo"
    )
    waiting = _wait_state(service, plan.plan_id, PipelineState.awaiting_approval)
    console.print(f"  waiting at its gate: plan {waiting.label}, pipeline awaiting_approval")
    service.plans.approve(plan.plan_id, "demo-operator", "diff reviewed")
    done = _wait_state(service, plan.plan_id, PipelineState.done)
    console.print(f"  approve_plan(by demo-operator) -> apply ran -> plan {done.label}")
    trail = service.plans.events(plan.plan_id)
    console.print(
        "  timeline: "
        + ", ".join(
            f"{e.kind.value}{' ' + e.phase.value if e.phase else ''}"
            + (f" ({e.actor})" if e.kind.value in ("approved", "queued") and e.actor else "")
            for e in trail
        )
    )
    return done
