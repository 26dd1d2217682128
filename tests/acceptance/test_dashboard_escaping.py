"""Markup in the ledger's text is shown as text on every dashboard page, never run as HTML.

The pages are Jinja2 templates with autoescape on and no hand escaping (cli/api/templating.py),
so this is what keeps a plan name, an error or a worker id from injecting a tag: a ledger
seeded with hostile text in each of them is read over real HTTP (no-token mode: the sections
render inline), and then in headless Chromium, where no injected element may exist.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from sqlalchemy import update

from planq.store import Database
from planq.store.models import AsyncJobModel, PlanModel
from tests.api_support import ApiServer, seed_ledger
from tests.browser_support import Browser
from tests.integration.test_api import api_settings
from tests.support import wait_for

HOSTILE = '"><img id="injected" src=x onerror="document.body.dataset.pwned=1"><b>'
ECHOED = '"><img id=injected>'  # short enough for the id filter (40 characters)


@pytest.fixture
def seeded(redis_url: str, tmp_path: Path) -> Iterator[tuple[ApiServer, str, str]]:
    """No-token `planq api` on a SQLite ledger whose plan, error and worker hold HOSTILE."""
    url = f"sqlite:///{tmp_path / 'escaping.db'}"
    server = ApiServer(api_settings(redis_url, url, api_token=None))
    try:
        assert server.get("/api/ledger/plans", token=None).status_code == 200  # migrated
        db = Database(url)
        try:
            seed_ledger(db, good=0, failed=1)
            with db.engine.begin() as conn:
                conn.execute(update(PlanModel.__table__).values(name=HOSTILE))
                conn.execute(
                    update(AsyncJobModel.__table__).values(
                        error_message=f"ValueError: {HOSTILE}", worker_id=f"node{HOSTILE}/1"
                    )
                )
        finally:
            db.close()
        job = server.get("/api/ledger/jobs", token=None).json()["jobs"][0]
        yield server, job["job_id"], job["plan_id"]
    finally:
        server.close()


def test_hostile_text_is_escaped_on_every_page(seeded: tuple[ApiServer, str, str]) -> None:
    api, job_id, plan_id = seeded
    pages = [
        (path, {})
        for path in (
            "/dashboard",
            "/dashboard/plans",
            "/dashboard/jobs",
            "/dashboard/failed",
            f"/dashboard/jobs/{job_id}",
            f"/dashboard/plans/{plan_id}",
        )
    ]
    pages.append(("/dashboard/plans", {"id": ECHOED}))  # a filter's input, echoed in its form
    for path, params in pages:
        page = api.get(path, token=None, params=params)
        assert page.status_code == 200, (path, page.text[:300])
        assert "<img id=" not in page.text, (path, params)
        assert "&lt;img id=" in page.text, (path, params)


@pytest.mark.timeout(300)
def test_no_injected_element_exists_in_chromium(
    seeded: tuple[ApiServer, str, str], browser: Browser
) -> None:
    api, job_id, plan_id = seeded
    for path in ("/dashboard", f"/dashboard/jobs/{job_id}", f"/dashboard/plans/{plan_id}"):
        browser.open(api.url + path)
        wait_for(
            lambda: browser.evaluate("document.body && document.body.dataset.loaded") == "true",
            timeout=30,
            what=f"{path} to load",
        )
        assert not browser.evaluate("!!document.getElementById('injected')"), path
        assert browser.evaluate("document.body.dataset.pwned || ''") == "", path
        shown = browser.evaluate("document.body.innerText")
        assert '<img id="injected"' in shown, path  # shown as the text it is
