"""Who acts over HTTP: principals with roles, four-eyes, N approvers, revoke across processes.

A real in-process worker runs the phases; the API is served by uvicorn; SQLite and
PostgreSQL. Tokens are made as `planq tokens create` makes them (the ledger keeps a hash).
"""

from __future__ import annotations

import logging
from datetime import timedelta
from typing import Any

import pytest
from sqlalchemy import update

from planq.cli.api.access import ROUTE_ROLES, role_of_url
from planq.domain.clock import utcnow
from planq.domain.principals import Role
from planq.store import Database
from planq.store.models import PrincipalModel
from planq.store.sql_principals import SqlPrincipalStore
from planq.tasks.runtime import Runtime
from tests.api_support import ApiServer, add_principal
from tests.integration import test_api as api_tests
from tests.integration.test_api_pipeline import new_plan, pipeline_of

ledger_url = api_tests.ledger_url
worker_app = api_tests.worker_app
runtime = api_tests.runtime
api = api_tests.api


def events(api: ApiServer, plan_id: str) -> list[dict[str, Any]]:
    found: list[dict[str, Any]] = api.get(f"/api/ledger/plans/{plan_id}/events").json()
    return found


def gated(api: ApiServer, token: str, **extra: Any) -> str:
    """A plan whose pipeline, run by token's principal, waits at its gate before apply."""
    plan_id = new_plan(api)
    body = {"through": "apply", "approve_before": "apply", **extra}
    started = api.post(f"/api/ledger/plans/{plan_id}/run", json=body, token=token)
    assert started.status_code == 202, started.text
    pipeline_of(api, plan_id, "awaiting_approval")
    return plan_id


def test_each_role_may_do_its_part_and_no_more(
    api: ApiServer, runtime: Runtime, ledger_url: str
) -> None:
    reader = add_principal(ledger_url, "reader", "read")
    operator = add_principal(ledger_url, "operator", "operate")
    plan_id = gated(api, operator)
    assert api.get(f"/api/ledger/plans/{plan_id}", token=reader).status_code == 200
    refused = api.post(f"/api/ledger/plans/{plan_id}/cancel", json={}, token=reader)
    assert refused.status_code == 403, refused.text
    assert refused.json() == {
        "error": "forbidden",
        "message": "reader (read) may not do this: it needs role operate",
    }
    approve = api.post(f"/api/ledger/plans/{plan_id}/approve", json={}, token=operator)
    assert approve.status_code == 403 and "needs role approve" in approve.json()["message"]
    assert api.post("/api/ledger/cleanup", token=operator).status_code == 403  # admin only
    assert api.post("/api/ledger/cleanup").status_code == 200  # PLANQ_API_TOKEN: admin
    who = api.get("/api/whoami", token=operator).json()
    assert (who["name"], who["actor"], who["roles"]) == ("operator", "api:operator", ["operate"])
    # nothing the refused calls asked for happened
    assert pipeline_of(api, plan_id, "awaiting_approval")["pipeline"]["state"] == (
        "awaiting_approval"
    )
    assert [e["kind"] for e in events(api, plan_id)].count("cancel_requested") == 0


def test_the_runner_may_not_approve_and_the_trail_names_the_credentials(
    api: ApiServer, runtime: Runtime, ledger_url: str
) -> None:
    a = add_principal(ledger_url, "principal-a", "operate", "approve")
    b = add_principal(ledger_url, "principal-b", "approve")
    plan_id = gated(api, a, by="b")
    own = api.post(f"/api/ledger/plans/{plan_id}/approve", json={"by": "principal-b"}, token=a)
    assert own.status_code == 403 and "four-eyes" in own.json()["message"], own.text
    ok = api.post(f"/api/ledger/plans/{plan_id}/approve", json={"by": "principal-a"}, token=b)
    assert ok.status_code == 200 and ok.json()["job"]["phase"] == "apply", ok.text
    pipeline_of(api, plan_id, "done")
    trail = [(e["kind"], e["actor"]) for e in events(api, plan_id)]
    assert trail[0] == ("queued", "api:principal-a")
    assert ("approval_refused", "api:principal-a") in trail
    assert [actor for kind, actor in trail if kind == "approved"] == ["api:principal-b"]


def test_two_approvals_need_two_distinct_approvers(
    api: ApiServer, runtime: Runtime, ledger_url: str
) -> None:
    runner = add_principal(ledger_url, "runner", "operate")
    b = add_principal(ledger_url, "approver-b", "approve")
    c = add_principal(ledger_url, "approver-c", "approve")
    plan_id = gated(api, runner, approvals=2)
    first = api.post(f"/api/ledger/plans/{plan_id}/approve", json={}, token=b)
    assert first.status_code == 200 and first.json()["job"] is None, first.text
    assert first.json()["pipeline"]["state"] == "awaiting_approval"
    twice = api.post(f"/api/ledger/plans/{plan_id}/approve", json={}, token=b)
    assert twice.status_code == 409 and "already approved" in twice.json()["message"]
    assert pipeline_of(api, plan_id, "awaiting_approval")["state"] == "Execute/COMPLETE"
    second = api.post(f"/api/ledger/plans/{plan_id}/approve", json={}, token=c)
    assert second.status_code == 200 and second.json()["job"]["phase"] == "apply", second.text
    pipeline_of(api, plan_id, "done")
    approved = [e for e in events(api, plan_id) if e["kind"] == "approved"]
    assert [(e["actor"], e["note"]) for e in approved] == [
        ("api:approver-b", "1 of 2 approvals"),
        ("api:approver-c", "2 of 2 approvals"),
    ]


def test_a_revoked_or_expired_token_is_refused_by_every_api_process(
    api: ApiServer, redis_url: str, ledger_url: str
) -> None:
    token = add_principal(ledger_url, "leaky", "read")
    expiring = add_principal(ledger_url, "short-lived", "read", days=1)
    second = ApiServer(api_tests.api_settings(redis_url, ledger_url))
    try:
        for server in (api, second):
            assert server.get("/api/ledger/plans", token=token).status_code == 200
        db = Database(ledger_url)
        try:
            assert SqlPrincipalStore(db).revoke("leaky")
            with db.session() as s:  # a day has passed
                s.execute(
                    update(PrincipalModel)
                    .where(PrincipalModel.name == "short-lived")
                    .values(expires_at=utcnow() - timedelta(seconds=1))
                )
            assert SqlPrincipalStore(db).get("leaky").last_used_at is not None  # type: ignore[union-attr]
        finally:
            db.close()
        for server in (second, api):
            revoked = server.get("/api/ledger/plans", token=token)
            assert revoked.status_code == 401, revoked.text
            assert revoked.json() == {
                "error": "unauthorized",
                "message": "the token of 'leaky' was revoked",
            }
            expired = server.get("/api/ledger/plans", token=expiring)
            assert expired.status_code == 401 and "expired" in expired.json()["message"]
    finally:
        second.close()


def test_no_token_reaches_an_error_body_the_trail_or_the_log(
    api: ApiServer, runtime: Runtime, ledger_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    operator = add_principal(ledger_url, "ops", "operate")
    wrong = "planq_" + "Zx9" * 14 + "Q"  # the shape of a token, belonging to nobody
    caplog.set_level(logging.DEBUG)
    refused = api.get("/api/ledger/plans", token=wrong)
    assert refused.status_code == 401 and wrong not in refused.text
    plan_id = new_plan(api)
    body = {"approve_before": "apply", "by": f"pasted {operator} and {wrong}"}
    assert (
        api.post(f"/api/ledger/plans/{plan_id}/run", json=body, token=operator).status_code == 202
    )
    trail = api.get(f"/api/ledger/plans/{plan_id}/events").text
    assert operator not in trail and wrong not in trail and "***REDACTED***" in trail
    assert operator not in caplog.text and wrong not in caplog.text


def test_the_access_table_names_every_write_and_the_openapi_document_shows_it(
    api: ApiServer,
) -> None:
    doc = api.get("/openapi.json").json()
    approve = doc["paths"]["/api/ledger/plans/{plan_id}/approve"]["post"]
    assert approve["x-planq-role"] == "approve" and "Role: `approve`" in approve["description"]
    assert doc["paths"]["/api/ledger/plans"]["get"]["x-planq-role"] == "read"
    assert "| `operate` |" in doc["info"]["description"]
    writes = {(m.upper(), p) for p, ops in doc["paths"].items() for m in ops if m != "get"}
    assert writes <= set(ROUTE_ROLES)
    assert role_of_url("/api/ledger/plans/01ARZ3NDEKTSV4RRFFQ69G5FAV/run") is Role.operate
    assert role_of_url("/api/ledger/plans/01ARZ3NDEKTSV4RRFFQ69G5FAV/reject") is Role.approve
