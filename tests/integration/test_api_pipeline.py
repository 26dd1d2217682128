"""The plan pipeline over real HTTP: run, the gate, cancel and the trail; token required.

Approve, a second approval (409), reject; a real in-process worker, SQLite and PostgreSQL.
"""

from __future__ import annotations

from typing import Any

from prometheus_client.parser import text_string_to_metric_families

from planq.tasks.runtime import Runtime
from tests.api_support import ApiServer, add_principal
from tests.integration import test_api as api_tests
from tests.support import wait_for

# The admin API's fixtures (a real worker, the API over HTTP, SQLite and PostgreSQL).
ledger_url = api_tests.ledger_url
worker_app = api_tests.worker_app
runtime = api_tests.runtime
api = api_tests.api


def pipeline_of(api: ApiServer, plan_id: str, state: str) -> dict[str, Any]:
    def check() -> dict[str, Any] | None:
        doc: dict[str, Any] = api.get(f"/api/ledger/plans/{plan_id}").json()
        pipeline = doc.get("pipeline") or {}
        return doc if pipeline.get("state") == state else None

    found: dict[str, Any] = wait_for(check, timeout=30, interval=0.05, what=f"pipeline {state}")
    return found


def metric(api: ApiServer, name: str, **labels: str) -> float:
    """One sample of the API's /metrics (0 if it has none yet)."""
    page = api.get("/metrics")
    assert page.status_code == 200, page.text
    for family in text_string_to_metric_families(page.text):
        for sample in family.samples:
            if sample.name == name and all(sample.labels.get(k) == v for k, v in labels.items()):
                return float(sample.value)
    return 0.0


def new_plan(api: ApiServer) -> str:
    created = api.post("/api/ledger/plans", json={"steps": [{"name": "a", "seconds": 0.01}]})
    assert created.status_code == 201, created.text
    plan_id: str = created.json()["plan_id"]
    return plan_id


def test_a_pipeline_through_the_api_waits_is_approved_once_and_keeps_its_trail(
    api: ApiServer, runtime: Runtime, ledger_url: str
) -> None:
    """Principal ci runs, ann approves: the trail names the credentials, whatever `by` says."""
    ci = add_principal(ledger_url, "ci", "operate")
    ann = add_principal(ledger_url, "ann", "approve")
    bob = add_principal(ledger_url, "bob", "approve")
    plan_id = new_plan(api)
    body = {"through": "apply", "approve_before": "apply", "by": "mallory"}
    assert api.post(f"/api/ledger/plans/{plan_id}/run", json=body, token=None).status_code == 401
    started = api.post(f"/api/ledger/plans/{plan_id}/run", json=body, token=ci)
    assert started.status_code == 202, started.text
    assert started.json()["job"]["phase"] == "strategize"
    waiting = pipeline_of(api, plan_id, "awaiting_approval")
    assert waiting["state"] == "Execute/COMPLETE"
    assert metric(api, "planq_plans_awaiting_approval") == 1
    assert metric(api, "planq_plan_approval_oldest_wait_seconds") > 0
    wait_count = "planq_plan_approval_wait_seconds_count"
    approvals = metric(api, wait_count, decision="approved")

    unauth = api.post(f"/api/ledger/plans/{plan_id}/approve", json={}, token=None)
    assert unauth.status_code == 401
    operator = api.post(f"/api/ledger/plans/{plan_id}/approve", json={}, token=ci)
    assert operator.status_code == 403 and operator.json()["error"] == "forbidden", operator.text
    approve = {"by": "mallory", "note": "ok"}
    approved = api.post(f"/api/ledger/plans/{plan_id}/approve", json=approve, token=ann)
    assert approved.status_code == 200, approved.text
    assert approved.json()["job"]["phase"] == "apply"
    again = api.post(f"/api/ledger/plans/{plan_id}/approve", json={"by": "ann"}, token=bob)
    assert again.status_code == 409 and again.json()["error"] == "refused", again.text
    assert metric(api, wait_count, decision="approved") == approvals + 1  # the refusal: none
    assert metric(api, "planq_plans_awaiting_approval") == 0
    assert metric(api, "planq_plan_approval_oldest_wait_seconds") == 0

    done = pipeline_of(api, plan_id, "done")
    assert done["state"] == "Apply/COMPLETE" and len(done["jobs"]) == 3
    events = api.get(f"/api/ledger/plans/{plan_id}/events").json()
    kinds = [e["kind"] for e in events]
    assert kinds[0] == "queued" and kinds[-1] == "done"
    approval = next(e for e in events if e["kind"] == "approved")
    assert (approval["actor"], approval["note"]) == ("api:ann", "by: mallory; ok")
    assert events[0]["actor"] == "api:ci" and "by: mallory" in events[0]["note"]
    assert "mallory" not in {e["actor"] for e in events}


def test_bad_phases_are_422_and_reject_and_cancel_end_the_pipeline(
    api: ApiServer, runtime: Runtime
) -> None:
    plan_id = new_plan(api)
    bad = api.post(f"/api/ledger/plans/{plan_id}/run", json={"through": "deploy"})
    assert bad.status_code == 422, bad.text
    late = api.post(
        f"/api/ledger/plans/{plan_id}/run", json={"through": "execute", "approve_before": "apply"}
    )
    assert late.status_code == 422, late.text
    no_gate = api.post(f"/api/ledger/plans/{plan_id}/run", json={"approval_timeout": 60})
    assert no_gate.status_code == 422 and "approve_before" in no_gate.json()["message"]
    assert api.get(f"/api/ledger/plans/{plan_id}/events").json() == []
    not_waiting = api.post(f"/api/ledger/plans/{plan_id}/reject", json={})
    assert not_waiting.status_code == 409

    api.post(f"/api/ledger/plans/{plan_id}/run", json={"approve_before": "execute"})
    pipeline_of(api, plan_id, "awaiting_approval")
    rejected = api.post(f"/api/ledger/plans/{plan_id}/reject", json={"note": "no"})
    assert rejected.status_code == 200 and rejected.json()["pipeline"]["state"] == "rejected"

    other = new_plan(api)
    api.post(f"/api/ledger/plans/{other}/run", json={"approve_before": "apply"})
    pipeline_of(api, other, "awaiting_approval")
    cancelled = api.post(f"/api/ledger/plans/{other}/cancel", json={"by": "ops"})
    assert cancelled.status_code == 200, cancelled.text
    assert cancelled.json()["pipeline"]["state"] == "cancelled"
    assert cancelled.json()["outcome"] == "cancelled"
    last = api.get(f"/api/ledger/plans/{other}/events").json()[-1]
    assert (last["kind"], last["actor"], last["note"]) == (
        "cancel_requested",
        "api:default",  # PLANQ_API_TOKEN's principal, whatever `by` says
        "by: ops",
    )
    late = api.post(f"/api/ledger/plans/{other}/cancel", json={})
    assert late.status_code == 409 and "nothing to cancel" in late.json()["message"], late.text


def test_the_plan_page_shows_the_gate_and_its_buttons_approve_it(
    api: ApiServer, runtime: Runtime, ledger_url: str
) -> None:
    plan_id = new_plan(api)
    page = api.get(f"/dashboard/fragments/plan/{plan_id}")  # the page's content
    assert page.status_code == 200 and "<h3>Pipeline</h3>" not in page.text  # none yet
    api.post(f"/api/ledger/plans/{plan_id}/run", json={"approve_before": "apply", "by": "ci"})
    pipeline_of(api, plan_id, "awaiting_approval")
    page = api.get(f"/dashboard/fragments/plan/{plan_id}").text
    assert 'data-pipeline="awaiting_approval"' in page
    approve = f'data-post="/api/ledger/plans/{plan_id}/approve"'
    assert approve in page and f'data-post="/api/ledger/plans/{plan_id}/reject"' in page
    assert 'data-event="awaiting_approval"' in page
    approver = add_principal(ledger_url, "reviewer", "approve")  # not the runner: four-eyes
    clicked = api.post(f"/api/ledger/plans/{plan_id}/approve", token=approver)  # no body
    assert clicked.status_code == 200, clicked.text
    pipeline_of(api, plan_id, "done")
    page = api.get(f"/dashboard/fragments/plan/{plan_id}").text
    assert 'data-pipeline="done"' in page and approve not in page
    assert 'data-event="approved"' in page and 'data-event="done"' in page
