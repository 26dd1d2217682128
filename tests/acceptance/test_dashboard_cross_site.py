"""No-token mode in a real browser: the dashboard's buttons work, other sites' requests do not.

`planq api` without PLANQ_API_TOKEN (uvicorn, SQLite ledger) and headless Chromium driven
over the DevTools pipe: the dashboard's cancel and retry buttons are clicked and the ledger
checked; then a page of another site (served on `localhost`, the API on `127.0.0.1`)
auto-submits a `text/plain` form to purge, and a DNS-rebinding name (`evil.example` mapped to
127.0.0.1 by Chromium's resolver rules) reads the ledger. Both are refused, nothing deleted.
"""

from __future__ import annotations

import functools
import http.server
import threading
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path

import pytest
from sqlalchemy import update

from planq.domain.clock import utcnow
from planq.domain.runs import Fresh
from planq.store import Database
from planq.store.models import RecoverableRunModel
from planq.store.runs_sql import SqlRunStoreProvider
from tests.api_support import ApiServer
from tests.browser_support import PNG_SIGNATURE, Browser
from tests.integration.test_api import api_settings
from tests.resources import free_port
from tests.runs_support import JOB
from tests.support import wait_for

EVIL_FORM = """<!doctype html><html><body>
<form id="f" method="POST" enctype="text/plain" action="{target}">
<input name='{{"x":"' value='"}}'></form>
<script>document.getElementById("f").submit();</script></body></html>"""


@pytest.fixture
def ledger_url(tmp_path: Path) -> str:
    """A SQLite ledger file (the API's runtime migrates it on first use)."""
    return f"sqlite:///{tmp_path / 'browser.db'}"


@pytest.fixture
def api(redis_url: str, ledger_url: str) -> Iterator[ApiServer]:
    """`planq api` in no-token mode on the SQLite ledger."""
    server = ApiServer(api_settings(redis_url, ledger_url, api_token=None))
    yield server
    server.close()


@pytest.fixture
def evil_site(tmp_path: Path, api: ApiServer) -> Iterator[str]:
    """Another site: a page on localhost:<other port> whose form posts to the API's purge."""
    root = tmp_path / "evil"
    root.mkdir()
    target = f"{api.url}/api/admin/jobs/runs/purge?retention_days=1"
    (root / "attack.html").write_text(EVIL_FORM.format(target=target))
    handler = functools.partial(http.server.SimpleHTTPRequestHandler, directory=str(root))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", free_port()), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://localhost:{server.server_address[1]}/attack.html"
    server.shutdown()
    server.server_close()


def old_completed_run(db: Database) -> str:
    """A Completed run ended 10 days ago: what a purge with retention_days=1 deletes."""
    opened = SqlRunStoreProvider(db).open_or_start(JOB, owner="seed@browser-test")
    assert isinstance(opened, Fresh)
    opened.store.mark_completed()
    ago = utcnow() - timedelta(days=10)
    with db.engine.begin() as conn:
        conn.execute(
            update(RecoverableRunModel)
            .where(RecoverableRunModel.id == opened.store.run_id)
            .values(started_at=ago, completed_at=ago)
        )
    return opened.store.run_id


def answer(browser: Browser, origin: str, what: str) -> str:
    """The text of the page the tab shows once it is a document of origin."""
    text: str = wait_for(
        lambda: browser.evaluate(
            f"location.href.startsWith({origin!r}) && document.body && document.body.innerText"
        ),
        timeout=30,
        what=what,
    )
    return text


@pytest.mark.timeout(600)
def test_dashboard_buttons_work_and_other_sites_are_refused_in_chromium(
    chromium: Path, api: ApiServer, ledger_url: str, evil_site: str, tmp_path: Path
) -> None:
    plan = api.post("/api/ledger/plans", token=None, json={"name": "browser", "steps": ["a"]})
    queued = api.post(f"/api/ledger/plans/{plan.json()['plan_id']}/strategize", token=None)
    job_id = queued.json()["job"]["job_id"]  # no worker: it stays queued
    db = Database(ledger_url)
    browser = Browser(chromium, "--host-resolver-rules=MAP evil.example 127.0.0.1")
    try:
        run_id = old_completed_run(db)
        browser.open(api.url + "/")
        wait_for(
            lambda: browser.evaluate("document.body && document.body.dataset.loaded") == "true",
            timeout=30,
            what="the dashboard to load",
        )
        browser.evaluate("window.confirm = () => true")  # the buttons ask first

        def click(selector: str, status: str) -> None:
            browser.click(selector)
            wait_for(
                lambda: (
                    f"done ({status})"
                    in browser.evaluate("document.getElementById('notice').textContent")
                ),
                timeout=30,
                what=f"{selector} to answer {status}",
            )

        click(f'tr[data-job="{job_id}"] button[data-post$="/cancel"]', "200")
        assert api.get(f"/api/ledger/jobs/{job_id}", token=None).json()["status"] == "cancelled"
        wait_for(
            lambda: browser.evaluate(
                f"!!document.querySelector('button[data-post$=\"{job_id}/retry\"]')"
            ),
            timeout=30,
            what="the retry button after the refresh",
        )
        click(f'button[data-post$="{job_id}/retry"]', "202")
        jobs = api.get("/api/ledger/jobs", token=None).json()["jobs"]
        assert [j["attempt"] for j in jobs if j["retry_of"] == job_id] == [2]
        shot = browser.screenshot(tmp_path / "no-token-dashboard.png")
        assert shot.startswith(PNG_SIGNATURE) and len(shot) > 20_000

        browser.open(evil_site)  # the form posts itself to the API, cross-site
        body = answer(browser, api.url, "the cross-site form post's answer")
        assert '"cross_origin"' in body, body
        assert SqlRunStoreProvider(db).get_run_by_id(run_id) is not None

        rebound = f"http://evil.example:{api.port}"  # DNS rebinding: evil.example is 127.0.0.1
        browser.open(rebound + "/api/ledger/plans")
        body = answer(browser, rebound, "the rebinding read's answer")
        assert '"foreign_host"' in body and "browser" not in body, body
    finally:
        browser.close()
        db.close()
