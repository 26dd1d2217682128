"""The dashboard's pages as a person sees them in headless Chromium: paging, failed jobs, UTC.

`planq api` (uvicorn in a thread) on a SQLite ledger seeded past one page; Chromium driven
over the DevTools pipe follows the page's own links ("older »", a failed job, its plan) and
reads what is rendered: the rows, the error text shown in the row, the clock's UTC label,
and the notice after an action, which must follow the row's status. Screenshots go to the
test's temporary directory, never into the repository.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from planq.store import Database
from tests.api_support import TOKEN, ApiServer, seed_ledger
from tests.browser_support import PNG_SIGNATURE, Browser
from tests.integration.test_api import api_settings
from tests.support import wait_for

GOOD, FAILED = 45, 30


@pytest.fixture
def ledger_url(tmp_path: Path) -> str:
    """A SQLite ledger file (the API's runtime migrates it on first use)."""
    return f"sqlite:///{tmp_path / 'pages.db'}"


@pytest.fixture
def api(redis_url: str, ledger_url: str) -> Iterator[ApiServer]:
    """`planq api` in no-token mode (its pages render inline), seeded past one page."""
    server = ApiServer(api_settings(redis_url, ledger_url, api_token=None))
    try:
        assert server.get("/api/ledger/plans", token=None).status_code == 200  # migrated
        db = Database(ledger_url)
        try:
            seed_ledger(db, good=GOOD, failed=FAILED)
        finally:
            db.close()
        yield server
    finally:
        server.close()


def loaded(browser: Browser, url: str) -> None:
    """Open url and wait until its script has refreshed every section once."""
    browser.open(url)
    wait_for(
        lambda: (
            browser.evaluate(
                f"location.href.split('#')[0] === {url.split('#')[0]!r}"
                " && document.body && document.body.dataset.loaded"
            )
            == "true"
        ),
        timeout=30,
        what=f"{url} to load",
    )


def follow(browser: Browser, selector: str, what: str) -> str:
    """Click the link selector names, as a person would; the URL the tab lands on."""
    before = browser.evaluate("location.href")
    href = browser.evaluate(f"document.querySelector({selector!r}).href")
    browser.click(selector)
    wait_for(
        lambda: (
            browser.evaluate(
                f"location.href !== {before!r} && document.body && document.body.dataset.loaded"
            )
            == "true"
        ),
        timeout=30,
        what=what,
    )
    assert browser.evaluate("location.href") == href
    return str(href)


def visible_text(browser: Browser, selector: str) -> str:
    """The rendered text of an element (innerText: what is shown, not what a title hides)."""
    text = browser.evaluate(f"document.querySelector({selector!r})?.innerText ?? ''")
    return str(text)


@pytest.mark.timeout(600)
def test_pages_read_as_a_person_sees_them(api: ApiServer, browser: Browser, tmp_path: Path) -> None:
    loaded(browser, api.url + "/dashboard")
    clock = visible_text(browser, "#clock")
    assert clock.endswith(" UTC") and len(clock) == len("2024-01-01 00:00:00 UTC"), clock
    plans = visible_text(browser, "#plans")
    assert "20 of 75 plans" in plans and "UTC (2 h ago)" in plans
    assert "10 of 30 failed jobs" in visible_text(browser, "#failed")
    shot = browser.screenshot(tmp_path / "overview.png")
    assert shot.startswith(PNG_SIGNATURE) and len(shot) > 20_000

    follow(browser, "#plans a.older", "the second page of plans")
    second = visible_text(browser, "#plans")
    assert "50 older of 75 plans" in second and "seeded-54" in second and "seeded-74" not in second
    assert "after=" in browser.evaluate("location.search")  # paged by key
    browser.screenshot(tmp_path / "plans-page-2.png")

    loaded(browser, api.url + "/dashboard/failed")
    row = visible_text(browser, "#failed tbody tr")
    assert "ValueError: seeded failure 74" in row  # in the row itself, not only a tooltip
    height = browser.evaluate(
        "document.querySelector('#failed pre.error-text').getBoundingClientRect().height"
    )
    assert height > 5, height
    browser.screenshot(tmp_path / "failed.png")

    landed = follow(browser, "#failed tbody tr a[href^='/dashboard/jobs/']", "the job page")
    assert "/dashboard/jobs/" in landed
    assert visible_text(browser, "#job-error") == "ValueError: seeded failure 74"
    assert "UTC" in visible_text(browser, "tr[data-field='finished_at']")
    browser.screenshot(tmp_path / "job.png")
    follow(browser, "#job a[href^='/dashboard/plans/']", "the job's plan")
    assert "seeded-74" in visible_text(browser, "#plan")
    browser.screenshot(tmp_path / "plan.png")


@pytest.mark.timeout(600)
def test_the_notice_follows_the_row_after_an_action(api: ApiServer, browser: Browser) -> None:
    plan = api.post("/api/ledger/plans", token=None, json={"name": "notice", "steps": ["a"]})
    queued = api.post(f"/api/ledger/plans/{plan.json()['plan_id']}/strategize", token=None)
    job_id = queued.json()["job"]["job_id"]  # no worker: it stays queued
    loaded(browser, f"{api.url}/dashboard/plans/{plan.json()['plan_id']}")
    browser.evaluate("window.confirm = () => true")
    browser.click(f'tr[data-job="{job_id}"] button')
    notice = wait_for(
        lambda: (
            "done (200)" in visible_text(browser, "#notice") and visible_text(browser, "#notice")
        ),
        timeout=30,
        what="the cancel's notice",
    )
    assert f"cancel job {job_id}: cancelled" in notice, notice
    wait_for(
        lambda: browser.evaluate(
            f"!!document.querySelector('button[data-post$=\"{job_id}/retry\"]')"
        ),
        timeout=30,
        what="the retry button after the refresh",
    )
    browser.click(f'button[data-post$="{job_id}/retry"]')
    retried = wait_for(
        lambda: (
            "done (202)" in visible_text(browser, "#notice") and visible_text(browser, "#notice")
        ),
        timeout=30,
        what="the retry's notice",
    )
    assert "queued" in retried, retried
    new_id = next(
        j["job_id"]
        for j in api.get("/api/ledger/jobs", token=None).json()["jobs"]
        if j["retry_of"] == job_id
    )
    assert api.post(f"/api/ledger/jobs/{new_id}/cancel", token=None).status_code == 200
    # ended elsewhere (the CLI, another tab): the notice says so on the next refresh
    wait_for(
        lambda: f"job {new_id} is now cancelled" in visible_text(browser, "#notice"),
        timeout=30,
        what="the notice to follow the row to cancelled",
    )


@pytest.mark.timeout(600)
def test_a_wrong_token_shows_one_error_box(
    redis_url: str, ledger_url: str, browser: Browser
) -> None:
    server = ApiServer(api_settings(redis_url, ledger_url))  # reads need the token
    try:
        loaded(browser, f"{server.url}/dashboard#token={TOKEN}x")
        boxes = browser.evaluate(
            "JSON.stringify([...document.querySelectorAll('.error-box')].map(b => b.innerText))"
        )
        assert len(json.loads(boxes)) == 1, boxes
        assert "PLANQ_API_TOKEN" in json.loads(boxes)[0]
        assert not browser.evaluate("document.getElementById('token-form').hidden")
    finally:
        server.close()
