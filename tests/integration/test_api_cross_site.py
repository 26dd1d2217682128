"""Cross-site and DNS-rebinding requests replayed against `planq api` (a real uvicorn server).

Without PLANQ_API_TOKEN the API trusts loopback, and a browser on this machine is loopback
too: any web page could post to it (a `text/plain` form post needs no preflight) or, with
DNS rebinding, read it. Each attack below is sent the way a browser would send it (its
headers), and the ledger and the broker are checked afterwards: nothing written, nothing
queued. The guard depends on the request headers only, never on the ledger backend, so one
backend (SQLite) is enough here.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
import requests
from sqlalchemy import update

from planq.domain.clock import utcnow
from planq.domain.runs import Fresh
from planq.store import Database
from planq.store.models import RecoverableRunModel
from planq.store.runs_sql import SqlRunStoreProvider
from tests.api_support import ApiServer, seed_ledger
from tests.integration.test_api import api_settings, counts, queued_messages
from tests.runs_support import JOB

BROWSER_UA = "Mozilla/5.0 (X11; Linux x86_64) AppleWebKit/537.36 Chrome/120.0 Safari/537.36"
#: Every write route a page could aim at (the issue's purge, trigger, stuck, cleanup among them).
WRITES = [
    "/api/admin/jobs/runs/purge?retention_days=1",
    f"/api/admin/jobs/{JOB}/trigger",
    f"/api/admin/jobs/{JOB}/cancel",
    "/api/ledger/stuck",
    "/api/ledger/cleanup",
    "/api/ledger/plans",
]
#: Reads that hand out ledger data (the page shell renders sections inline without a token).
READS = [
    "/",
    "/api/ledger/plans",
    "/api/ledger/jobs",
    "/api/admin/jobs",
    f"/api/admin/jobs/{JOB}/runs",
    "/dashboard/fragments/runs",
    "/openapi.json",
]


@pytest.fixture
def ledger_url(tmp_path: Path) -> str:
    """A SQLite ledger file (the API's runtime migrates it on first use)."""
    return f"sqlite:///{tmp_path / 'cross-site.db'}"


@pytest.fixture
def open_api(redis_url: str, ledger_url: str) -> Iterator[ApiServer]:
    """`planq api` without a token (loopback no-token mode); ended jobs expire after 60 s."""
    server = ApiServer(api_settings(redis_url, ledger_url, api_token=None, job_ttl=60.0))
    yield server
    server.close()


@pytest.fixture
def old_run(open_api: ApiServer, ledger_url: str) -> Iterator[tuple[str, Database]]:
    """A Completed run ended 10 days ago (what purge deletes), and 3 ended jobs 2 h old."""
    assert open_api.get("/api/admin/jobs", token=None).status_code == 200  # migrates SQLite
    db = Database(ledger_url)
    opened = SqlRunStoreProvider(db).open_or_start(JOB, owner="seed@test")
    assert isinstance(opened, Fresh)
    opened.store.mark_completed()
    ten_days_ago = utcnow() - timedelta(days=10)
    with db.engine.begin() as conn:
        conn.execute(
            update(RecoverableRunModel)
            .where(RecoverableRunModel.id == opened.store.run_id)
            .values(started_at=ten_days_ago, completed_at=ten_days_ago)
        )
    seed_ledger(db, good=3)
    yield opened.store.run_id, db
    db.close()


def browser_post(api: ApiServer, path: str, **headers: str) -> requests.Response:
    """A cross-site form post as a browser sends it: text/plain, no preflight, its own UA."""
    sent = {"User-Agent": BROWSER_UA, "Content-Type": "text/plain", **headers}
    return api.post(path, token=None, headers=sent, data='{"steps": ["a"]}')


def refused(response: requests.Response, code: str) -> None:
    """A 403 with one small JSON error naming why."""
    assert response.status_code == 403, response.text
    assert response.headers["content-type"] == "application/json"
    doc = response.json()
    assert doc["error"] == code and doc["message"], doc
    assert len(response.content) < 600, len(response.content)


def untouched(run_id: str, db: Database, before: Any, redis_url: str) -> None:
    """The seeded run still exists and nothing was written or queued."""
    assert SqlRunStoreProvider(db).get_run_by_id(run_id) is not None
    assert (counts(db), queued_messages(redis_url)) == before


def csrf_of(page: requests.Response) -> str:
    """The CSRF token the dashboard page embeds for its buttons."""
    found = re.search(r'<meta name="planq-csrf" content="([^"]+)">', page.text)
    assert found, "the dashboard page carries no CSRF token"
    return found.group(1)


# -- refused ----------------------------------------------------------------------------------
def test_a_cross_site_text_plain_post_is_refused_and_deletes_nothing(
    open_api: ApiServer, old_run: tuple[str, Database], redis_url: str
) -> None:
    run_id, db = old_run
    before = counts(db), queued_messages(redis_url)
    for path in WRITES:
        for origin in ("http://evil.example", "null", "http://localhost:1"):
            response = browser_post(
                open_api, path, Origin=origin, **{"Sec-Fetch-Site": "cross-site"}
            )
            refused(response, "cross_origin")
        # a browser that sends no Origin but a Referer (old engines, some redirects)
        response = browser_post(open_api, path, Referer="http://evil.example/attack.html")
        refused(response, "cross_origin")
    untouched(run_id, db, before, redis_url)


def test_a_foreign_host_is_refused_for_writes_and_reads(
    open_api: ApiServer, old_run: tuple[str, Database], redis_url: str
) -> None:
    """DNS rebinding: the page's own name resolves to 127.0.0.1, so Origin and Host agree."""
    run_id, db = old_run
    before = counts(db), queued_messages(redis_url)
    evil = f"evil.example:{open_api.port}"
    for path in WRITES:
        response = browser_post(open_api, path, Host=evil, Origin=f"http://{evil}")
        refused(response, "foreign_host")
    for path in READS:
        read = open_api.get(path, token=None, headers={"Host": evil, "User-Agent": BROWSER_UA})
        refused(read, "foreign_host")
        assert "seeded-" not in read.text and run_id not in read.text
    other_port = f"127.0.0.1:{open_api.port + 1}"  # a loopback name, another server's port
    refused(
        open_api.get("/api/ledger/plans", token=None, headers={"Host": other_port}), "foreign_host"
    )
    untouched(run_id, db, before, redis_url)
    for host in (
        f"127.0.0.1:{open_api.port}",
        f"localhost:{open_api.port}",
        f"[::1]:{open_api.port}",
    ):
        assert open_api.get("/api/ledger/plans", token=None, headers={"Host": host}).ok, host


def test_a_browser_post_without_the_csrf_token_is_refused(
    open_api: ApiServer, old_run: tuple[str, Database], redis_url: str
) -> None:
    """No Origin, no Referer (a referrer policy can hide both): the token is still required."""
    run_id, db = old_run
    before = counts(db), queued_messages(redis_url)
    same = f"http://127.0.0.1:{open_api.port}"
    for path in WRITES:
        form = {"Content-Type": "application/x-www-form-urlencoded"}
        refused(browser_post(open_api, path, **form), "csrf")
        refused(browser_post(open_api, path, **{"Sec-Fetch-Site": "same-origin"}), "csrf")
        refused(browser_post(open_api, path, Origin=same), "csrf")  # same origin, no token
        wrong = {"Origin": same, "X-Planq-CSRF": "0" * 64, "Cookie": "planq_csrf_1=abc"}
        refused(browser_post(open_api, path, **wrong), "csrf")
    untouched(run_id, db, before, redis_url)


# -- still served -----------------------------------------------------------------------------
def test_the_dashboards_own_buttons_still_work(
    open_api: ApiServer, old_run: tuple[str, Database], redis_url: str
) -> None:
    run_id, db = old_run
    tab = requests.Session()  # a browser tab: it keeps the page's cookie
    tab.headers["User-Agent"] = BROWSER_UA
    page = tab.get(open_api.url + "/", timeout=30)
    assert page.status_code == 200 and "seeded-" in page.text  # rendered inline, no token
    token = csrf_of(page)
    cookie = next(c for c in tab.cookies if c.name == f"planq_csrf_{open_api.port}")
    assert cookie.get_nonstandard_attr(
        "SameSite", ""
    ).lower() == "strict" and cookie.has_nonstandard_attr("HttpOnly")
    same = {"Origin": open_api.url, "X-Planq-CSRF": token}
    purged = tab.post(open_api.url + "/api/admin/jobs/runs/purge?retention_days=1", headers=same)
    assert purged.status_code == 200 and purged.json()["purged"] == 1, purged.text
    assert SqlRunStoreProvider(db).get_run_by_id(run_id) is None
    referer = {"Referer": open_api.url + "/", "X-Planq-CSRF": token}  # no Origin: the Referer
    assert tab.post(open_api.url + "/api/ledger/cleanup", headers=referer).json()["deleted"] == 3
    again = tab.get(open_api.url + "/", timeout=30)  # a second tab keeps the same token
    assert csrf_of(again) == token
    other_tab = requests.Session()  # the token is bound to its own tab's cookie
    stolen = other_tab.post(
        open_api.url + "/api/ledger/stuck", headers={**same, "User-Agent": BROWSER_UA}
    )
    refused(stolen, "csrf")
    # a script or curl on this machine (no browser marks) is as trusted as the CLI
    assert open_api.post("/api/ledger/stuck", token=None).status_code == 200


def test_with_a_token_the_bearer_is_the_check(redis_url: str, ledger_url: str) -> None:
    """A page cannot attach the bearer header cross-site, so a bearer request needs no CSRF."""
    api = ApiServer(api_settings(redis_url, ledger_url))
    try:
        evil = {"Origin": "http://evil.example", "User-Agent": BROWSER_UA}
        created = api.post("/api/ledger/plans", headers=evil, json={"steps": ["a"]})
        assert created.status_code == 201, created.text
        for token in (None, "wrong"):
            denied = api.post("/api/ledger/plans", token=token, headers=evil, json={"steps": ["a"]})
            assert denied.status_code == 401, denied.text
        page = api.get("/", token=None)
        assert page.status_code == 200 and 'name="planq-csrf"' not in page.text
        assert len(api.get("/api/ledger/plans").json()["plans"]) == 1
    finally:
        api.close()


# -- bounded errors ---------------------------------------------------------------------------
def test_a_huge_bad_input_gets_a_small_error(open_api: ApiServer, redis_url: str) -> None:
    big = "A" * (1 << 20)
    cases: list[tuple[str, dict[str, Any]]] = [
        ("/api/ledger/plans", {"json": {"steps": [big]}}),  # the domain's message
        ("/api/ledger/plans", {"json": {big: 1, "steps": ["a"]}}),  # pydantic's loc
        ("/api/ledger/plans", {"json": {"steps": [{"name": "", "x" * 999: 1}] * 1000}}),
        (f"/api/admin/jobs/{JOB}/trigger", {"json": {"args": {big: "1"}}}),
        ("/api/ledger/plans", {"data": big}),
    ]
    for path, kwargs in cases:
        response = open_api.post(path, token=None, **kwargs)
        assert response.status_code == 422, response.text[:300]
        assert len(response.content) < 8_000, (path, len(response.content))
        assert len(response.json()["message"]) <= 200
    many = open_api.post("/api/ledger/plans", token=None, json={"steps": [{"x": 1}] * 1000})
    assert len(many.json()["detail"]) == 20 and many.json()["more_problems"] > 1000
    assert queued_messages(redis_url) == 0
