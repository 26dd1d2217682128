"""Helpers the API tests share: a real uvicorn server in a thread, a client, a seeded ledger."""

from __future__ import annotations

import threading
from datetime import timedelta
from typing import Any

import requests
import uvicorn
from sqlalchemy import insert

from planq.cli.api.app import create_api
from planq.domain.clock import utcnow
from planq.domain.ids import new_id
from planq.domain.jobs import serialize_job_payload
from planq.store import Database
from planq.store.models import AsyncJobModel, PlanModel
from tests.resources import free_port
from tests.support import wait_for

TOKEN = "planq-api-test-token"


def add_principal(database_url: str, name: str, *roles: str, days: int | None = None) -> str:
    """A principal in the ledger at database_url, as `planq tokens create` makes one; its token."""
    from planq.domain.principals import Principal, expiry, new_token, parse_roles, token_hash
    from planq.store.migrate import migrate_sqlite
    from planq.store.sql_principals import SqlPrincipalStore

    migrate_sqlite(database_url)  # a fresh SQLite file: as the CLI would, migrate it first
    token = new_token()
    db = Database(database_url)
    try:
        principal = Principal(name=name, roles=parse_roles(list(roles)), expires_at=expiry(days))
        SqlPrincipalStore(db).add(principal, token_hash(token))
    finally:
        db.close()
    return token


class ApiServer:
    """The admin API served by uvicorn on a free loopback port, in a thread of this process."""

    def __init__(self, settings: Any) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        config = uvicorn.Config(
            create_api(settings=settings),
            host="127.0.0.1",
            port=self.port,
            log_level="warning",
            lifespan="on",
        )
        self.server = uvicorn.Server(config)
        self.thread = threading.Thread(target=self.server.run, name="planq-api", daemon=True)
        self.thread.start()
        wait_for(lambda: self.server.started, timeout=20, what="the API server to start")

    def request(
        self, method: str, path: str, token: str | None = TOKEN, **kwargs: Any
    ) -> requests.Response:
        """One HTTP request; with the bearer token unless token=None."""
        headers = dict(kwargs.pop("headers", {}))
        if token is not None:
            headers["Authorization"] = f"Bearer {token}"
        return requests.request(method, self.url + path, headers=headers, timeout=30, **kwargs)

    def get(self, path: str, **kwargs: Any) -> requests.Response:
        """GET path."""
        return self.request("GET", path, **kwargs)

    def post(self, path: str, **kwargs: Any) -> requests.Response:
        """POST path."""
        return self.request("POST", path, **kwargs)

    def close(self) -> None:
        """Stop serving and wait for the thread (the lifespan closes the session)."""
        self.server.should_exit = True
        self.thread.join(timeout=20)


def seed_ledger(
    db: Database, good: int, corrupt: int = 0, mismatched: int = 0, failed: int = 0
) -> int:
    """Seed plans with succeeded strategize jobs; how many job rows were inserted.

    `corrupt` of them get a payload that does not parse (data_loss), `mismatched` a plan that
    disagrees with its job (inconsistent); `failed` more end failed, each with its own error
    ("ValueError: seeded failure <i>"), newest last.
    """
    base = utcnow() - timedelta(hours=2)
    plans: list[dict[str, Any]] = []
    jobs: list[dict[str, Any]] = []
    kinds = ["good"] * good + ["corrupt"] * corrupt + ["mismatch"] * mismatched
    kinds += ["failed"] * failed
    for i, kind in enumerate(kinds):
        at = base + timedelta(milliseconds=i)
        plan_id, job_id = new_id(), new_id()
        plans.append(
            {
                "plan_id": plan_id,
                "name": f"seeded-{i}",
                "phase": "strategize",
                "status": {"mismatch": "running", "failed": "failed"}.get(kind, "complete"),
                "spec_json": '{"steps": []}',
                "created_at": at,
                "updated_at": at,
                "version": 1,
            }
        )
        payload = serialize_job_payload(plan_id, "strategize")
        jobs.append(
            {
                "job_id": job_id,
                "plan_id": plan_id,
                "phase": "strategize",
                "status": "failed" if kind == "failed" else "succeeded",
                "error_message": f"ValueError: seeded failure {i}" if kind == "failed" else None,
                "schema_version": 1,
                "payload_json": '{"plan_id": "trunc' if kind == "corrupt" else payload,
                "worker_id": "worker-seed-1",
                "created_at": at,
                "started_at": at,
                "finished_at": at,
                "last_heartbeat": at,
                "attempt": 1,
                "dispatch_count": 1,
                "dispatched_at": at,
            }
        )
    with db.engine.begin() as conn:
        conn.execute(insert(PlanModel.__table__), plans)
        conn.execute(insert(AsyncJobModel.__table__), jobs)
    return len(jobs)
