"""The plan page's pipeline section: its state, the gate's buttons and the plan's timeline.

Its own module (the dashboard's pages call it with one line), rendered on the server and
escaped throughout; the buttons are the dashboard's confirmed POSTs to the admin API's
pipeline routes (token and same-origin guard as every write).
"""

from __future__ import annotations

from typing import Any

from planq.cli import pipeline_services, services
from planq.cli.api.fragments import button, e, job_link, when
from planq.cli.context import Planq

ACTIVE = ("running", "awaiting_approval")


def plan_pipeline(planq: Planq, plan_id: str) -> str:
    """The section for one plan ('' for a plan run phase by phase with no events)."""
    plan = services.find_plan(planq, plan_id)
    events = pipeline_services.plan_events(planq, plan.plan_id)
    info: dict[str, Any] | None = plan.pipeline_dict()
    if info is None and not events:
        return ""
    return f"<h3>Pipeline</h3>{_state(plan.plan_id, info)}{_timeline(events)}"


def _state(plan_id: str, info: dict[str, Any] | None) -> str:
    if info is None:
        return '<p class="muted">No pipeline: its phases were queued one at a time.</p>'
    gate = f", approve before <code>{e(info['approve_before'])}</code>"
    line = (
        f'<p data-pipeline="{e(info["state"])}">state <strong>{e(info["state"])}</strong>, '
        f"through <code>{e(info['through'])}</code>{gate if info['approve_before'] else ''}</p>"
    )
    base = f"/api/ledger/plans/{plan_id}"
    buttons = []
    if info["state"] == "awaiting_approval":
        buttons.append(button("approve", f"{base}/approve", f"Approve plan {plan_id}?"))
        buttons.append(button("reject", f"{base}/reject", f"Reject plan {plan_id}?", danger=True))
    if info["state"] in ACTIVE:
        buttons.append(
            button("cancel plan", f"{base}/cancel", f"Cancel plan {plan_id}?", danger=True)
        )
    return line + (f"<p>{' '.join(buttons)}</p>" if buttons else "")


def _timeline(events: list[Any]) -> str:
    if not events:
        return '<p class="muted">No events yet.</p>'
    rows = "".join(
        f'<tr data-event="{e(ev.kind.value)}"><td>{when(ev.at)}</td><td>{e(ev.kind.value)}</td>'
        f"<td>{e(ev.phase.value if ev.phase else None)}</td><td>{e(ev.actor)}</td>"
        f"<td>{job_link(ev.job_id, 26) if ev.job_id else '-'}</td><td>{e(ev.note)}</td></tr>"
        for ev in events
    )
    return (
        "<table><thead><tr><th>at</th><th>event</th><th>phase</th><th>by</th><th>job</th>"
        f"<th>note</th></tr></thead><tbody>{rows}</tbody></table>"
    )
