"""Webhooks: a pipeline's gate, decisions and end reach a real HTTP receiver on loopback.

The ledger on PostgreSQL and SQLite, real in-process Celery workers (threads) on Redis,
and a real `http.server` receiver: signed bodies, the event id as idempotency key, a
receiver that is down for 30 s or answers 500, the bound after which a delivery is given
up, two senders at once, and the outbox written in the event's own transaction.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from celery import Celery
from prometheus_client import REGISTRY

from planq.domain.errors import ConfigurationError, PipelineError
from planq.domain.pipeline import EventKind
from planq.domain.plans import PipelineState, Plan
from planq.domain.webhooks import EVENT_ID_HEADER, SIGNATURE_HEADER, verify
from planq.tasks.runtime import Runtime
from planq.worker_config.celery_config import beat_schedule
from planq.worker_config.settings import load_settings
from tests.api_support import ApiServer, add_principal
from tests.celery_support import embedded_runtime, make_app
from tests.integration import test_api as api_tests
from tests.integration.test_api_pipeline import new_plan as api_plan
from tests.resources import free_port
from tests.support import wait_for

SECRET = "whsec-test-0123456789"
# The API tests' fixtures: the ledger, a worker on it, the API served by uvicorn.
ledger_url = api_tests.ledger_url
worker_app = api_tests.worker_app
runtime = api_tests.runtime
api = api_tests.api


class Receiver:
    """A loopback HTTP server that keeps every POST; `fail` answers 500 that many times."""

    def __init__(self, port: int | None = None, fail: int = 0, status: int = 500) -> None:
        self.port = port or free_port()
        self.fail, self.status = fail, status
        self.requests: list[tuple[dict[str, str], bytes, int]] = []
        self._lock = threading.Lock()
        self._server: ThreadingHTTPServer | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/hooks/planq?token=in-the-query"

    def start(self) -> Receiver:
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
                with receiver._lock:
                    answer = receiver.status if receiver.fail > 0 else 204
                    receiver.fail -= 1
                    receiver.requests.append((dict(self.headers.items()), body, answer))
                self.send_response(answer)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, *args: Any) -> None:
                pass

        self._server = ThreadingHTTPServer(("127.0.0.1", self.port), Handler)
        threading.Thread(target=self._server.serve_forever, daemon=True).start()
        return self

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()

    def accepted(self) -> list[dict[str, Any]]:
        """The bodies answered 2xx, decoded, in arrival order."""
        with self._lock:
            return [json.loads(b) for _h, b, status in self.requests if status < 300]

    def accepted_types(self) -> list[str]:
        return [b["type"] for b in self.accepted()]


@pytest.fixture(params=["postgres", "sqlite"])
def database_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if request.param == "postgres":
        request.getfixturevalue("pg_database")  # emptied
        url: str = request.getfixturevalue("pg_url")
        return url
    return f"sqlite:///{tmp_path / 'webhooks.db'}"


@pytest.fixture
def postgres_url(pg_database: Any, pg_url: str) -> str:
    return pg_url


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    found = Receiver().start()
    yield found
    found.stop()


def app_for(redis_url: str, database_url: str, urls: list[str], **settings: Any) -> Celery:
    return make_app(
        redis_url,
        database_url,
        auto_migrate=True,
        webhook_urls=urls,
        webhook_secret=SECRET,
        webhook_backoff_max=settings.pop("webhook_backoff_max", 0.5),
        **settings,
    )


def gated_plan(rt: Runtime, **run: Any) -> Plan:
    """A plan whose pipeline runs strategize and execute, then waits before apply."""
    plan = rt.lifecycle.create_plan([{"name": "a", "seconds": 0.01}], name="hooked")
    rt.lifecycle.run_plan(plan.plan_id, "apply", "apply", actor="api:ann", **run)
    return plan


def reaches(rt: Runtime, plan_id: str, state: PipelineState) -> None:
    def reached() -> bool:
        plan = rt.plans.get(plan_id)
        return plan is not None and plan.pipeline_state is state

    wait_for(reached, timeout=30, what=f"pipeline of {plan_id} to be {state}")


def test_the_gate_its_approval_and_the_end_reach_the_receiver_signed_once_each(
    redis_url: str, database_url: str, receiver: Receiver
) -> None:
    with embedded_runtime(app_for(redis_url, database_url, [receiver.url])) as rt:
        plan = gated_plan(rt)
        wait_for(lambda: "gate.waiting" in receiver.accepted_types(), what="gate.waiting")
        rt.lifecycle.approve_plan(plan.plan_id, actor="api:bob", note="ship it")
        wait_for(lambda: "plan.finished" in receiver.accepted_types(), what="plan.finished")
        wait_for(lambda: not rt.plans.list_deliveries(plan.plan_id), what="an empty outbox")
        events = {e.event_id: e for e in rt.lifecycle.plan_events(plan.plan_id)}

    assert receiver.accepted_types() == ["gate.waiting", "gate.approved", "plan.finished"]
    for headers, body, _status in receiver.requests:
        assert verify(SECRET, body, headers[SIGNATURE_HEADER])  # GitHub's scheme
        assert not verify("another secret", body, headers[SIGNATURE_HEADER])
        document = json.loads(body)
        assert headers[EVENT_ID_HEADER] == document["id"] == headers["Idempotency-Key"]
        assert events[document["id"]].kind.value == document["kind"]  # the kept event
        assert document["plan"]["id"] == plan.plan_id
    waiting, approved, finished = receiver.accepted()
    assert (waiting["phase"], waiting["plan"]["pipeline"]["state"]) == (
        "apply",
        "awaiting_approval",
    )
    assert (approved["actor"], approved["note"]) == ("api:bob", "ship it")
    assert finished["plan"]["pipeline"]["state"] == "done"
    ids = [b["id"] for b in receiver.accepted()]
    assert len(ids) == len(set(ids))  # once per event id


def test_a_receiver_answering_500_is_retried_with_the_same_event_id_then_once(
    redis_url: str, database_url: str
) -> None:
    flaky = Receiver(fail=3).start()
    try:
        with embedded_runtime(app_for(redis_url, database_url, [flaky.url])) as rt:
            plan = gated_plan(rt)
            wait_for(lambda: flaky.accepted_types() == ["gate.waiting"], what="gate.waiting")
            wait_for(lambda: not rt.plans.list_deliveries(plan.plan_id), what="an empty outbox")
    finally:
        flaky.stop()
    assert [status for _h, _b, status in flaky.requests] == [500, 500, 500, 204]
    assert len({h[EVENT_ID_HEADER] for h, _b, _s in flaky.requests}) == 1
    assert len({h["X-Planq-Delivery"] for h, _b, _s in flaky.requests}) == 1
    assert len({b for _h, b, _s in flaky.requests}) == 1  # the same body, the same signature


def test_a_delivery_is_given_up_after_its_bound_and_kept_until_the_ttl(
    redis_url: str, database_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    def tries(outcome: str) -> float:
        found = REGISTRY.get_sample_value("planq_webhook_deliveries_total", {"outcome": outcome})
        return found or 0.0

    retried, gave_up = tries("retried"), tries("gave_up")
    broken = Receiver(fail=1000).start()
    app = app_for(redis_url, database_url, [broken.url], webhook_max_attempts=3)
    try:
        with embedded_runtime(app) as rt:
            plan = gated_plan(rt)

            def given_up() -> Any:
                rows = rt.plans.list_deliveries(plan.plan_id)
                return rows if rows and rows[0].next_at is None else None

            [row] = wait_for(given_up, what="the delivery to be given up")
            before = len(broken.requests)
            for _ in range(3):  # a given-up row is never tried again
                rt.webhooks.deliver_due()
            after = len(broken.requests)
            kept_ttl = rt.ledger.cleanup(job_ttl=3600)
            kept = rt.plans.list_deliveries(plan.plan_id)
            rt.ledger.cleanup(job_ttl=0.001)
            gone = rt.plans.list_deliveries(plan.plan_id)
    finally:
        broken.stop()
    assert (row.attempts, row.last_error) == (3, "HTTP 500")
    assert (tries("retried") - retried, tries("gave_up") - gave_up) == (2, 1)  # the metric
    assert before == after == 3
    assert kept_ttl >= 0 and len(kept) == 1 and gone == []
    assert "given up after 3 tries: HTTP 500" in caplog.text
    assert "in-the-query" not in caplog.text and "/hooks" not in caplog.text  # host only


def test_the_pipelines_own_receiver_hears_it_beside_the_fleets(
    redis_url: str, database_url: str, receiver: Receiver
) -> None:
    own = Receiver().start()
    try:
        with embedded_runtime(app_for(redis_url, database_url, [receiver.url])) as rt:
            plan = gated_plan(rt, notify=[own.url, own.url])  # the same URL counts once
            wait_for(lambda: own.accepted_types() == ["gate.waiting"], what="the own receiver")
            wait_for(lambda: receiver.accepted_types() == ["gate.waiting"], what="the fleet's")
            other = rt.lifecycle.create_plan([{"name": "a", "seconds": 0.01}], name="other")
            rt.lifecycle.run_plan(other.plan_id, "apply", "apply", actor="api:ann")
            reaches(rt, other.plan_id, PipelineState.awaiting_approval)
            wait_for(lambda: len(receiver.accepted()) == 2, what="the other plan's gate")
    finally:
        own.stop()
    assert [b["plan"]["id"] for b in own.accepted()] == [plan.plan_id]  # not the other's


def test_notify_without_a_secret_or_with_a_bad_url_is_refused_and_writes_nothing(
    redis_url: str, database_url: str
) -> None:
    app = make_app(redis_url, database_url, auto_migrate=True)
    with embedded_runtime(app, start=False) as rt:
        plan = rt.lifecycle.create_plan([{"name": "a"}])
        with pytest.raises(PipelineError, match="PLANQ_WEBHOOK_SECRET"):
            rt.lifecycle.run_plan(plan.plan_id, "apply", "apply", notify=["http://127.0.0.1/x"])
        assert rt.jobs.list_by_plan(plan.plan_id) == []
        assert rt.plans.get(plan.plan_id).pipeline_state is None  # type: ignore[union-attr]
    signed = app_for(redis_url, database_url, [])
    with embedded_runtime(signed, start=False) as rt:
        for bad in (
            ["ftp://host/x"],
            ["not a url"],
            "http://one.example/x",
            ["http:///path"],
            ["http://169.254.169.254/latest/meta-data"],  # no receiver host allows it
        ):
            with pytest.raises(PipelineError, match="notify"):
                rt.lifecycle.run_plan(plan.plan_id, "apply", "apply", notify=bad)
        assert rt.jobs.list_by_plan(plan.plan_id) == []
        assert rt.lifecycle.plan_events(plan.plan_id) == []


def test_secrets_in_notes_names_and_custom_patterns_never_reach_the_receiver(
    redis_url: str, database_url: str, receiver: Receiver
) -> None:
    app = app_for(redis_url, database_url, [receiver.url], redaction_patterns=[r"ACME-[0-9]{6}"])
    with embedded_runtime(app) as rt:
        plan = rt.lifecycle.create_plan([{"name": "a", "seconds": 0.01}], name="for ACME-123456")
        rt.lifecycle.run_plan(plan.plan_id, "apply", "apply", actor="api:ann")
        reaches(rt, plan.plan_id, PipelineState.awaiting_approval)
        rt.lifecycle.reject_plan(
            plan.plan_id, actor="api:bob", note="password=hunter2 and ACME-654321 leaked"
        )
        wait_for(lambda: "gate.rejected" in receiver.accepted_types(), what="gate.rejected")
    raw = b"".join(body for _h, body, _s in receiver.requests)
    assert b"hunter2" not in raw and b"ACME-654321" not in raw and b"ACME-123456" not in raw
    rejected = receiver.accepted()[-1]
    assert "leaked" in rejected["note"] and "REDACTED" in rejected["note"]


def test_an_event_refused_leaves_no_notification_behind(
    redis_url: str, database_url: str, receiver: Receiver
) -> None:
    """The outbox row rides the event's transaction: a rolled-back event notifies nobody."""
    with embedded_runtime(app_for(redis_url, database_url, [receiver.url]), start=False) as rt:
        plan = gated_plan(rt)
        with pytest.raises(RuntimeError), rt.ledger.jobs.transaction():
            rt.ledger.pipeline.record(plan.plan_id, EventKind.done, plan=rt.plans.get(plan.plan_id))
            assert len(rt.plans.list_deliveries(plan.plan_id)) == 1  # inside: written
            raise RuntimeError("the caller's transaction fails after the event")
        assert rt.plans.list_deliveries(plan.plan_id) == []
        kinds = [e.kind for e in rt.lifecycle.plan_events(plan.plan_id)]
        assert EventKind.done not in kinds


def test_two_senders_at_once_deliver_each_notification_once(
    redis_url: str, postgres_url: str, receiver: Receiver
) -> None:
    """Leases (SKIP LOCKED on PostgreSQL): two beats on one outbox never send a row twice."""
    app = app_for(redis_url, postgres_url, [receiver.url])
    with embedded_runtime(app, start=False) as rt:
        plans = [rt.lifecycle.create_plan([{"name": "a"}], name=f"p{i}") for i in range(30)]
        for plan in plans:
            rt.lifecycle.run_plan(plan.plan_id, "apply", "apply", actor="api:ann")
            rt.service.jobs.cancel_plan(plan.plan_id, actor="api:ann")
        due = rt.plans.list_deliveries(limit=500)
        senders = [threading.Thread(target=rt.webhooks.deliver_due) for _ in range(2)]
        for sender in senders:
            sender.start()
        for sender in senders:
            sender.join(60)
        left = rt.plans.list_deliveries(limit=500)
    ids = [b["id"] for b in receiver.accepted()]
    assert len(due) >= 30 and sorted(ids) == sorted(d.event_id for d in due)
    assert len(ids) == len(set(ids)) and left == []


def test_the_maintenance_task_delivers_and_beat_schedules_it_only_with_a_secret(
    redis_url: str, database_url: str, receiver: Receiver
) -> None:
    with embedded_runtime(app_for(redis_url, database_url, [receiver.url]), start=False) as rt:
        plan = gated_plan(rt)
        rt.service.jobs.cancel_plan(plan.plan_id, actor="api:ann")
        report = rt.app.tasks["planq.maintenance.deliver_webhooks"].apply().get(timeout=30)
    assert receiver.accepted_types() == ["plan.cancel_requested", "phase.cancelled"]
    assert sorted(report["delivered"]) == sorted(b["id"] for b in receiver.accepted())
    with_secret = load_settings(webhook_secret=SECRET, webhook_interval=7)
    assert beat_schedule(with_secret)["planq-deliver-webhooks"]["schedule"] == 7
    assert "planq-deliver-webhooks" not in beat_schedule(load_settings())


def test_webhook_settings_are_checked_in_one_line(monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(ConfigurationError, match="needs PLANQ_WEBHOOK_SECRET"):
        load_settings(webhook_urls=["https://hooks.example/x"])
    with pytest.raises(ConfigurationError, match="PLANQ_WEBHOOK_URLS"):
        load_settings(webhook_urls=["gopher://x"], webhook_secret=SECRET)
    monkeypatch.setenv("PLANQ_WEBHOOK_URLS", "https://a.example/x, https://b.example/y")
    monkeypatch.setenv("PLANQ_WEBHOOK_SECRET", SECRET)
    assert load_settings().webhooks().urls == ("https://a.example/x", "https://b.example/y")
    monkeypatch.setenv("PLANQ_WEBHOOK_URLS", '["https://c.example/z"]')
    monkeypatch.setenv("PLANQ_WEBHOOK_NOTIFY_HOSTS", "chat.example, c.example")
    settings = load_settings()
    assert settings.webhooks().urls == ("https://c.example/z",)
    assert settings.webhooks().allowed_hosts() == {"chat.example", "c.example"}
    assert SECRET not in repr(settings) and SECRET not in repr(settings.webhooks())


def test_the_api_refuses_notify_without_a_secret_or_with_a_bad_url_writing_nothing(
    api: ApiServer, runtime: Runtime, ledger_url: str
) -> None:
    token = add_principal(ledger_url, "runner", "operate")
    plan_id = api_plan(api)
    run = f"/api/ledger/plans/{plan_id}/run"
    unsigned = api.post(run, json={"notify": ["http://127.0.0.1:9/x"]}, token=token)
    assert unsigned.status_code == 422 and "PLANQ_WEBHOOK_SECRET" in unsigned.text
    for bad in (["ftp://host/x"], "http://one.example/x", ["http://h/"] * 6):
        answer = api.post(run, json={"approve_before": "apply", "notify": bad}, token=token)
        assert answer.status_code == 422, answer.text
    shown = api.get(f"/api/ledger/plans/{plan_id}").json()
    assert shown["pipeline"] is None
    assert api.get(f"/api/ledger/plans/{plan_id}/events").json() == []
