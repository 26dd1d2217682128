"""/docs in headless Chromium: the OpenAPI page renders the API's operations, offline.

The page is what the dashboard's "API" link opens. A status code of 200 proved nothing
(Swagger UI 4 answered 200 and then "Unable to render this definition" for OpenAPI 3.1), so
this reads what a person sees: the operations Swagger UI lists, and no error box. Every
request the page makes is recorded: none may leave the API's own origin (no CDN).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.api_support import ApiServer
from tests.browser_support import Browser
from tests.integration.test_api import api_settings
from tests.support import wait_for

LISTED = """Array.from(document.querySelectorAll('.opblock-summary'), op =>
  (op.querySelector('.opblock-summary-method')?.innerText || '') + ' ' +
  (op.querySelector('.opblock-summary-path')?.innerText || '').replace(/\\u200b/g, ''))"""
FAILED = ".version-pragma, .errors-wrapper"  # Swagger UI's "Unable to render" and error boxes


@pytest.fixture
def api(redis_url: str, tmp_path: Path) -> Iterator[ApiServer]:
    """`planq api` on a SQLite ledger (no worker: /docs needs none)."""
    server = ApiServer(api_settings(redis_url, f"sqlite:///{tmp_path / 'docs.db'}"))
    yield server
    server.close()


@pytest.mark.timeout(600)
def test_docs_page_lists_the_api_operations_in_chromium(
    chromium: Path, api: ApiServer, tmp_path: Path
) -> None:
    spec = api.get("/openapi.json", token=None).json()
    assert spec["openapi"].startswith("3.1")  # what FastAPI emits, and what the page must read
    browser = Browser(chromium)
    try:
        browser.call("Network.enable")
        browser.open(api.url + "/docs")
        wait_for(  # the operations listed, or Swagger UI's own error box
            lambda: browser.evaluate(
                f"({LISTED}).length > 0 || !!document.querySelector({FAILED!r})"
            ),
            timeout=60,
            what="Swagger UI to list the API's operations or say why not",
        )
        operations: list[str] = browser.evaluate(LISTED)
        authorize = browser.evaluate("!!document.querySelector('button.authorize')")
        text = browser.evaluate("document.body.innerText")
        urls = browser.evaluate(
            "performance.getEntriesByType('resource').map(e => e.name).concat([location.href])"
        )
        browser.screenshot(tmp_path / "docs.png")
    finally:
        browser.close()
    assert "Unable to render" not in text, text[:600]
    assert "planq" in text  # the API's title, rendered from the document
    assert "GET /api/ledger/plans" in operations, operations
    assert "POST /api/ledger/plans/{plan_id}/{phase}" in operations
    assert len(operations) == sum(len(ops) for ops in spec["paths"].values())
    # HTTPBearer declares the token, so the page offers to send it; public routes need none
    assert spec["components"]["securitySchemes"]["HTTPBearer"]["scheme"] == "bearer"
    assert authorize, "no Authorize button"
    assert "security" not in spec["paths"]["/healthz"]["get"]
    assert spec["paths"]["/api/ledger/plans"]["get"]["security"] == [{"HTTPBearer": []}]
    foreign = [u for u in urls if not u.startswith(api.url)]
    assert not foreign, f"/docs loaded files from elsewhere: {foreign}"
