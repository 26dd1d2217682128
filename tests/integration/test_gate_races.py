"""At a waiting gate, approves, rejects and cancels sent at once: the answers and the ledger agree.

On PostgreSQL (the fleet's ledger, where the requests really run in parallel), five tries of
20 requests released together: 10 approves (two approvers), 5 rejects, 5 cancels (five
operators). Whatever wins (approve, reject, a cancel before or after the approval), each
answer, the plan, its pipeline and its events must tell the same story: one decision at
most, a landed cancel recorded once with its caller as actor and the apply stopped, every
other cancel a 409 saying why it came too late.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest
import requests

from planq.tasks.runtime import Runtime
from tests.api_support import ApiServer, add_principal
from tests.integration import test_api as api_tests
from tests.support import wait_for

worker_app = api_tests.worker_app
runtime = api_tests.runtime
api = api_tests.api
TRIES = 5
STEP = {"name": "work", "seconds": 0.3}  # cooperative: the token interrupts the wait


@pytest.fixture
def ledger_url(request: pytest.FixtureRequest) -> str:
    """PostgreSQL only: SQLite serialises every writer, so nothing would race."""
    request.getfixturevalue("pg_database")
    return str(request.getfixturevalue("pg_url"))


@pytest.fixture
def tokens(ledger_url: str) -> Iterator[dict[str, str]]:
    names = {"runner": "operate", "appr-1": "approve", "appr-2": "approve"}
    names |= {f"ops-{i}": "operate" for i in range(5)}
    yield {name: add_principal(ledger_url, name, role) for name, role in names.items()}


def settled(api: ApiServer, plan_id: str) -> dict[str, Any]:
    """The plan once no job of it is live and its pipeline has stopped moving."""

    def check() -> dict[str, Any] | None:
        doc: dict[str, Any] = api.get(f"/api/ledger/plans/{plan_id}").json()
        live = [j for j in doc["jobs"] if j["status"] in ("queued", "running")]
        state = (doc.get("pipeline") or {}).get("state")
        return None if live or state in ("running", None) else doc

    found: dict[str, Any] = wait_for(check, timeout=30, interval=0.05, what="the plan to settle")
    return found


def one_try(api: ApiServer, tokens: dict[str, str], cancel_after: float) -> None:
    """One race; the cancels leave cancel_after seconds late (0: with the rest)."""
    created = api.post("/api/ledger/plans", json={"steps": [STEP]})
    plan_id = created.json()["plan_id"]
    body = {"through": "apply", "approve_before": "apply"}
    run = api.post(f"/api/ledger/plans/{plan_id}/run", json=body, token=tokens["runner"])
    assert run.status_code == 202, run.text
    wait_for(
        lambda: (
            (api.get(f"/api/ledger/plans/{plan_id}").json().get("pipeline") or {}).get("state")
            == "awaiting_approval"
        ),
        timeout=30,
        interval=0.05,
        what="the gate",
    )
    calls = [("approve", f"appr-{1 + i % 2}") for i in range(10)]
    calls += [("reject", f"appr-{1 + i % 2}") for i in range(5)]
    calls += [("cancel", f"ops-{i}") for i in range(5)]
    start = threading.Barrier(len(calls))

    def send(call: tuple[str, str]) -> tuple[str, str, requests.Response]:
        action, who = call
        start.wait()
        if action == "cancel" and cancel_after:  # an approval's publish may land first
            threading.Event().wait(cancel_after)
        response = api.post(f"/api/ledger/plans/{plan_id}/{action}", json={}, token=tokens[who])
        return action, who, response

    with ThreadPoolExecutor(len(calls)) as pool:
        answers = list(pool.map(send, calls))
    for action, who, response in answers:
        assert response.status_code in (200, 409), (action, who, response.text)
    won = {
        a: [(w, r) for act, w, r in answers if act == a and r.status_code == 200]
        for a in ("approve", "reject", "cancel")
    }
    assert len(won["approve"]) + len(won["reject"]) <= 1, won
    assert len(won["cancel"]) <= 1, won
    final = settled(api, plan_id)
    trail = api.get(f"/api/ledger/plans/{plan_id}/events").json()
    kinds = [e["kind"] for e in trail]
    assert kinds.count("approved") == len(won["approve"]), trail
    assert kinds.count("rejected") == len(won["reject"]), trail
    # a cancel that asked a running apply to stop, which finished first: 409, yet recorded
    late = [
        (w, r)
        for a, w, r in answers
        if a == "cancel" and r.status_code == 409 and "came too late" in r.json()["message"]
    ]
    assert len(won["cancel"]) + len(late) <= 1, (won, late)
    asked = [e for e in trail if e["kind"] == "cancel_requested"]
    assert [e["actor"] for e in asked] == [f"api:{w}" for w, _ in won["cancel"] + late], trail
    apply_jobs = [j for j in final["jobs"] if j["phase"] == "apply"]
    state = final["pipeline"]["state"]
    for _, _, response in answers:
        if response.status_code == 409:
            assert response.json()["error"] == "refused", response.text
    if won["cancel"]:
        who, response = won["cancel"][0]
        doc = response.json()
        assert doc["pipeline"]["state"] == "cancelled" and state == "cancelled", (doc, final)
        (landed,) = [e for e in trail if e["kind"] == "cancel_requested"]
        assert landed["actor"] == f"api:{who}"
        assert all(j["status"] == "cancelled" for j in apply_jobs), apply_jobs
        assert final["state"] != "Apply/COMPLETE", final
        assert set(doc["cancelled_jobs"]) == {j["job_id"] for j in apply_jobs}
        if doc["outcome"] == "cancelled":
            assert all(v == "cancelled" for v in doc["jobs"].values()), doc
    elif won["approve"]:
        assert state == "done" and final["state"] == "Apply/COMPLETE", final
        assert [j["status"] for j in apply_jobs] == ["succeeded"]
        if late:
            assert "came too late" in trail[-1]["note"] and trail[-1]["kind"] == "done"
    elif won["reject"]:
        assert state == "rejected" and apply_jobs == [], final
    else:
        pytest.fail(f"nothing won at the gate: {[(a, r.status_code) for a, _, r in answers]}")
    for action, _, response in answers:
        if action == "cancel" and response.status_code == 409:
            message = response.json()["message"]
            assert "nothing to cancel" in message or "came too late" in message, message


def test_the_answers_the_plan_the_pipeline_and_the_events_agree(
    api: ApiServer, runtime: Runtime, tokens: dict[str, str]
) -> None:
    """Five tries (each about 1.5 s: two 0.3 s phases before the gate, the race, the end).

    The cancels leave with the others, then later and later: the approval's request (it
    checks the broker first) is slower than a cancel's, so late cancels meet the apply job
    queued or running, where the reported race lay.
    """
    for cancel_after in (0.0, 0.05, 0.1, 0.2, 0.4)[:TRIES]:
        one_try(api, tokens, cancel_after)
