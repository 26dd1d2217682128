"""The plan page's pipeline section: its state, the gate's buttons and the plan's timeline.

Its own module (the plan page adds it with one line), rendered from templates/pipeline.html;
the buttons are the dashboard's confirmed POSTs to the admin API's pipeline routes (token
and same-origin guard as every write).
"""

from __future__ import annotations

from typing import Any

from markupsafe import Markup

from planq.cli import services
from planq.cli.api.templating import render
from planq.cli.context import Planq

ACTIVE = ("running", "awaiting_approval")


def plan_pipeline(planq: Planq, plan_id: str) -> Markup:
    """The section for one plan (nothing for a plan run phase by phase with no events)."""
    plan = services.find_plan(planq, plan_id)
    events = services.plan_events(planq, plan.plan_id)
    info: dict[str, Any] | None = plan.pipeline_dict()
    if info is None and not events:
        return Markup()
    return render("pipeline.html", plan_id=plan.plan_id, info=info, events=events, active=ACTIVE)
