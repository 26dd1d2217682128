"""Webhooks' rules without a network: which events notify, the body, signing, backoff, the bound.

The in-memory outbox is the SQL one's contract in miniature (lease, retry, give up, TTL);
tests/integration/test_webhooks.py runs the real thing against a loopback receiver.
"""

from __future__ import annotations

import hashlib
import hmac
import json
from datetime import timedelta

import pytest

from planq.domain.clock import utcnow
from planq.domain.errors import ConfigurationError, PipelineError
from planq.domain.ledger import JobLedger
from planq.domain.pipeline import EventKind, PlanEvent
from planq.domain.plans import PipelineState, Plan, PlanPhase
from planq.domain.redaction import Redactor
from planq.domain.webhooks import (
    NOTIFY,
    WebhookPolicy,
    body_of,
    check_notify,
    deliveries_for,
    next_try,
    sign,
    verify,
)
from planq.store.memory import in_memory_ledger

SECRET = "s3cret-for-signing"
POLICY = WebhookPolicy(urls=("https://hooks.example/planq",), secret=SECRET)


def gated_plan() -> Plan:
    plan = Plan.with_steps(["a"], name="nightly")
    plan.pipeline_state = PipelineState.awaiting_approval
    plan.pipeline_through = plan.pipeline_gate = PlanPhase.apply
    return plan


def test_the_signature_is_githubs_hmac_sha256_of_the_raw_body() -> None:
    body = b'{"id":"x"}'
    expected = "sha256=" + hmac.new(SECRET.encode(), body, hashlib.sha256).hexdigest()
    assert sign(SECRET, body) == expected == POLICY.sign(body)
    assert verify(SECRET, body, expected)
    assert not verify(SECRET, body + b" ", expected)
    assert not verify("other", body, expected) and not verify(SECRET, body, None)


def test_retries_back_off_doubling_to_the_cap_and_stop_at_the_bound() -> None:
    policy = WebhookPolicy(secret=SECRET, max_attempts=5, backoff_max=6.0)
    assert [policy.retry_in(n) for n in range(1, 6)] == [1.0, 2.0, 4.0, 6.0, 6.0]
    now = utcnow()
    assert next_try(policy, 4, now) == now + timedelta(seconds=6.0)
    assert next_try(policy, 5, now) is None  # given up after the fifth try


def test_only_the_notifying_kinds_make_deliveries_one_per_receiver() -> None:
    plan = gated_plan()
    plan.pipeline_notify = ["https://own.example/x", "https://hooks.example/planq"]
    for kind in EventKind:
        event = PlanEvent(plan_id=plan.plan_id, kind=kind, phase=PlanPhase.apply)
        made = deliveries_for(event, plan, POLICY)
        if kind in NOTIFY:  # the fleet's receiver, then the pipeline's own; the same one once
            assert [d.url for d in made] == ["https://hooks.example/planq", "https://own.example/x"]
            assert {d.event_id for d in made} == {event.event_id}
        else:
            assert made == []
    unsigned = PlanEvent(plan_id=plan.plan_id, kind=EventKind.done)
    assert deliveries_for(unsigned, plan, WebhookPolicy()) == []  # no secret: nothing


def test_the_body_names_the_event_and_the_plan_redacted() -> None:
    plan = gated_plan()
    plan.name = "deploy ACME-123456"
    plan.pipeline_notify = ["https://own.example/x?token=abc"]
    event = PlanEvent(plan_id=plan.plan_id, kind=EventKind.awaiting_approval, phase=PlanPhase.apply)
    document = json.loads(body_of(event, plan, Redactor.from_patterns([r"ACME-\d{6}"])))
    assert (document["id"], document["type"], document["kind"]) == (
        event.event_id,
        "gate.waiting",
        "awaiting_approval",
    )
    assert document["plan"]["pipeline"]["state"] == "awaiting_approval"
    assert "ACME-123456" not in document["plan"]["name"]
    assert "own.example" not in json.dumps(document)  # a receiver's URL is never in a body


def test_bad_receivers_are_typed_errors() -> None:
    assert check_notify(None) == []
    assert check_notify(["https://a.example/x", "https://a.example/x"]) == ["https://a.example/x"]
    for bad in ("https://a.example/x", ["ftp://a/x"], ["https://"], [3], ["http://a/ x"]):
        with pytest.raises(PipelineError):
            check_notify(bad)
    with pytest.raises(PipelineError, match="at most 5"):
        check_notify([f"https://a.example/{i}" for i in range(6)])
    with pytest.raises(ConfigurationError, match="needs PLANQ_WEBHOOK_SECRET"):
        WebhookPolicy(urls=("https://a.example/x",))
    with pytest.raises(ConfigurationError, match="PLANQ_WEBHOOK_URLS"):
        WebhookPolicy(urls=("mailto:ops@example.com",), secret=SECRET)


def test_the_memory_outbox_leases_retries_gives_up_and_ages_out() -> None:
    jobs, plans = in_memory_ledger()
    ledger = JobLedger(jobs, plans, webhooks=POLICY)
    plan = gated_plan()
    plans.add(plan)
    event = ledger.pipeline.record(plan.plan_id, EventKind.awaiting_approval, plan=plan)
    [row] = plans.list_deliveries(plan.plan_id)
    assert (row.event_id, row.attempts) == (event.event_id, 0)
    now = utcnow()
    [leased] = plans.claim_deliveries(now, now + timedelta(seconds=60))
    assert leased.attempts == 1
    assert plans.claim_deliveries(now, now + timedelta(seconds=60)) == []  # leased: not due
    plans.delivery_failed(leased.delivery_id, "HTTP 500", None)  # given up
    assert plans.claim_deliveries(now + timedelta(days=1), now + timedelta(days=2)) == []
    assert plans.delete_deliveries_before(now - timedelta(seconds=1)) == 0  # too young
    assert plans.delete_deliveries_before(now + timedelta(seconds=1)) == 1
    ledger.pipeline.record(plan.plan_id, EventKind.done, plan=plan)
    plans.remove(plan.plan_id)
    assert plans.list_deliveries() == []  # a purged plan takes its rows along


def test_a_ledger_without_webhooks_writes_no_delivery() -> None:
    jobs, plans = in_memory_ledger()
    plan = gated_plan()
    plans.add(plan)
    JobLedger(jobs, plans).pipeline.record(plan.plan_id, EventKind.done, plan=plan)
    assert plans.list_deliveries() == []


def test_a_pipelines_own_receiver_must_be_on_a_host_the_operator_allows() -> None:
    """Running a pipeline does not let anyone make the fleet POST anywhere it can reach."""
    fleet = WebhookPolicy(urls=("https://hooks.example/planq",), secret=SECRET)
    assert fleet.check_receivers(["https://hooks.example/team-a"]) == [
        "https://hooks.example/team-a"
    ]  # the fleet receivers' hosts, by default
    for elsewhere in ("http://169.254.169.254/latest/meta-data", "http://localhost:8080/admin"):
        with pytest.raises(PipelineError, match="PLANQ_WEBHOOK_NOTIFY_HOSTS"):
            fleet.check_receivers([elsewhere])
    listed = WebhookPolicy(secret=SECRET, notify_hosts=("Chat.Example",))
    assert listed.check_receivers(["https://chat.example/x"]) == ["https://chat.example/x"]
    with pytest.raises(PipelineError, match=r"\(none\)"):  # no receiver, no host
        WebhookPolicy(secret=SECRET).check_receivers(["https://hooks.example/x"])
    anywhere = WebhookPolicy(secret=SECRET, notify_hosts=("*",))
    assert anywhere.check_receivers(["https://any.example/x"]) == ["https://any.example/x"]
    with pytest.raises(PipelineError, match="PLANQ_WEBHOOK_SECRET"):
        WebhookPolicy(notify_hosts=("*",)).check_receivers(["https://any.example/x"])
