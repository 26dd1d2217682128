"""Signing in to the dashboard in headless Chromium: a session cookie, greyed buttons.

The page says who is signed in and greys the buttons a principal may not use.
`planq api` with auth on (PLANQ_API_TOKEN) on a SQLite ledger with failed jobs (each has a
retry button, an `operate` write). A `read` principal signs in through a `#token=` link: the
page says who it is, its retry buttons are disabled, and the token is in no place the page's
script can read (the cookie is HttpOnly, sessionStorage is empty). An `operate` principal
sees them lit; signing out leaves the page asking for a token again.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from planq.store import Database
from tests.acceptance.test_dashboard_pages_browser import loaded
from tests.api_support import ApiServer, add_principal, seed_ledger
from tests.browser_support import Browser
from tests.integration.test_api import api_settings
from tests.support import wait_for


@pytest.fixture
def ledger_url(tmp_path: Path) -> str:
    return f"sqlite:///{tmp_path / 'sign-in.db'}"


@pytest.fixture
def api(redis_url: str, ledger_url: str) -> Iterator[ApiServer]:
    server = ApiServer(api_settings(redis_url, ledger_url))  # auth on: reads need a token
    try:
        assert server.get("/api/ledger/plans").status_code == 200  # migrated
        db = Database(ledger_url)
        try:
            seed_ledger(db, good=2, failed=3)
        finally:
            db.close()
        yield server
    finally:
        server.close()


def retry_buttons(browser: Browser) -> list[bool]:
    """Each retry button's disabled flag, once the failed section has rendered them."""
    script = (
        "JSON.stringify([...document.querySelectorAll('button[data-role=operate]')]"
        ".map(b => b.disabled))"
    )
    found: list[bool] = wait_for(
        lambda: json.loads(browser.evaluate(script)) or None, timeout=30, what="retry buttons"
    )
    return found


def who(browser: Browser) -> str:
    return str(browser.evaluate("document.getElementById('who').textContent"))


def test_a_read_principal_signs_in_and_sees_the_buttons_it_may_not_use_greyed(
    api: ApiServer, ledger_url: str, browser: Browser, tmp_path: Path
) -> None:
    viewer = add_principal(ledger_url, "viewer", "read")
    operator = add_principal(ledger_url, "operator", "operate")
    loaded(browser, f"{api.url}/dashboard/failed#token={viewer}")
    wait_for(lambda: who(browser) == "signed in as viewer (read)", timeout=20, what="viewer")
    assert all(retry_buttons(browser))
    browser.screenshot(tmp_path / "signed-in-read.png")  # the test's directory, never the repo
    assert viewer not in str(browser.evaluate("document.cookie + JSON.stringify(sessionStorage)"))
    assert browser.evaluate("location.hash") == ""

    loaded(browser, f"{api.url}/dashboard/failed?again=1#token={operator}")  # a new load
    wait_for(lambda: who(browser) == "signed in as operator (operate)", timeout=20, what="op")
    wait_for(lambda: not any(retry_buttons(browser)), timeout=20, what="lit buttons")

    browser.click("#sign-out")
    wait_for(
        lambda: browser.evaluate("document.getElementById('token-form').hidden") is False,
        timeout=20,
        what="the token form after signing out",
    )
    assert who(browser) == ""
