"""The dashboard's worker status over real HTTP, read with JavaScript off (no-token mode).

Running jobs are written to a SQLite ledger as two worker nodes left them (one beating, one
silent past PLANQ_JOB_TIMEOUT); no worker answers Celery's broadcast on the test Redis, so
both nodes are marked as not replying, and the page still comes back within its bound.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path

import pytest

from planq.cli.api.celery_view import BROADCAST_TIMEOUT, BROADCAST_TTL, CeleryAsker, CeleryView
from planq.domain.clock import utcnow
from planq.domain.jobs import AsyncJob, AsyncJobStatus
from planq.domain.plans import Plan, PlanPhase
from planq.store import Database, sql_ledger
from tests.api_support import ApiServer
from tests.celery_support import make_app
from tests.integration.test_api import api_settings
from tests.integration.test_dashboard_pages import text_of
from tests.support import wait_for

JOB_TIMEOUT = 120.0


@pytest.fixture
def server(redis_url: str, tmp_path: Path) -> Iterator[tuple[ApiServer, Database]]:
    """`planq api` without a token (pages render inline) on a fresh SQLite ledger."""
    url = f"sqlite:///{tmp_path / 'workers.db'}"
    api = ApiServer(api_settings(redis_url, url, api_token=None, job_timeout=JOB_TIMEOUT))
    db = None
    try:
        assert api.get("/api/ledger/plans", token=None).status_code == 200  # migrated
        db = Database(url)
        yield api, db
    finally:
        if db is not None:
            db.close()
        api.close()


def running(db: Database, worker_id: str, beat_age: float) -> str:
    """A running strategize job claimed by worker_id, last beating beat_age seconds ago."""
    jobs, plans = sql_ledger(db)
    plan = Plan.with_steps(["a"], name=f"on {worker_id}")
    plans.add(plan)
    job = AsyncJob(plan_id=plan.plan_id, phase=PlanPhase.strategize)
    jobs.add(job)
    stored = jobs.get(job.job_id)
    assert stored is not None
    stored.status = AsyncJobStatus.running
    stored.worker_id = worker_id
    stored.started_at = stored.last_heartbeat = utcnow() - timedelta(seconds=beat_age)
    jobs.update(stored)
    return job.job_id


def test_nodes_heartbeats_and_in_flight_jobs_read_without_javascript(
    server: tuple[ApiServer, Database],
) -> None:
    api, db = server
    busy = [running(db, "alpha@host-1/101", 2), running(db, "alpha@host-1/102", 3)]
    silent = running(db, "beta@host-2/7", JOB_TIMEOUT + 60)

    started = time.monotonic()
    page = api.get("/dashboard/workers", token=None)
    took = time.monotonic() - started
    assert page.status_code == 200 and "aria-current=page>Workers" in page.text
    text = text_of(page.text)
    alpha = text_of(page.text.split('data-node="alpha@host-1"')[1].split("</tr>")[0])
    beta = text_of(page.text.split('data-node="beta@host-2"')[1].split("</tr>")[0])
    assert "101, 102" in alpha and "2:" in alpha and "stale" not in alpha
    assert all(job[-8:] in alpha for job in busy) and "s ago" in alpha and "UTC" in alpha
    assert silent[-8:] in beta and "stale" in beta and "(3 min ago)" in beta
    assert "no reply" in alpha and "no reply" in beta  # no worker answers on this Redis
    assert "3 running jobs on 2 nodes (ledger)" in text and "Celery: 0 nodes answered" in text
    assert f'href="/dashboard/jobs/{silent}"' in page.text  # each job links to its page
    assert took < 10  # the broadcast is bounded (0.5 s); the rest is two indexed reads

    overview = api.get("/dashboard", token=None).text
    assert 'data-src="/dashboard/fragments/workers"' in overview
    assert 'data-node="alpha@host-1"' in overview  # rendered into the overview too
    fragment = api.get("/dashboard/fragments/workers", token=None)
    assert fragment.status_code == 200 and 'data-node="beta@host-2"' in fragment.text


def test_an_idle_ledger_says_so(server: tuple[ApiServer, Database]) -> None:
    api, _ = server
    text = text_of(api.get("/dashboard/workers", token=None).text)
    assert "no running jobs, and no node answered" in text
    assert "0 running jobs on 0 nodes (ledger)" in text


def test_celery_is_asked_once_per_few_seconds_and_never_by_two_requests(
    redis_url: str, tmp_path: Path
) -> None:
    """On the test Redis, where no worker answers: each broadcast waits its full bound."""
    app = make_app(redis_url, f"sqlite:///{tmp_path / 'asker.db'}")
    try:
        asker = CeleryAsker()  # the one an API process keeps (ApiState.celery)
        clock = [100.0]
        started = time.monotonic()
        first = asker.view(app, clock=lambda: clock[0])
        assert first is not None and first.active == {} and first.error == ""
        assert time.monotonic() - started >= BROADCAST_TIMEOUT * 0.9  # it did wait for replies
        clock[0] += BROADCAST_TTL / 2
        again = time.monotonic()
        assert asker.view(app, clock=lambda: clock[0]) is first  # kept: no second broadcast
        assert time.monotonic() - again < BROADCAST_TIMEOUT / 2
        clock[0] += BROADCAST_TTL
        results: list[CeleryView | None] = []
        asking = threading.Thread(target=lambda: results.append(asker.view(app, lambda: clock[0])))
        asking.start()  # an old answer: this one asks again ...
        wait_for(asker._lock.locked, timeout=10, interval=0.01, what="the broadcast to start")
        waited = time.monotonic()
        assert asker.view(app, clock=lambda: clock[0]) is first  # ... and another request
        assert time.monotonic() - waited < BROADCAST_TIMEOUT / 2  # shows the last answer at once
        asking.join(10)
        assert results and results[0] is not first and results[0] is not None
    finally:
        app.close()
