"""The Workers section in headless Chromium, with a real `celery worker` running a slow job.

The fleet of test_dashboard (a threads-pool worker process and `planq api` with a token, on
PostgreSQL and the test Redis): a plan's job is left running, and the page, loaded with the
token in its #fragment as a person would, shows the worker's node, its process, the job as
in flight with a recent heartbeat, and Celery's own answer (one active task). The job is then
cancelled so the worker stops cleanly. Screenshots go to the test's temporary directory.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from planq.store import Database
from tests.acceptance.test_dashboard import Api, fleet
from tests.acceptance.test_dashboard_pages_browser import loaded, visible_text
from tests.api_support import TOKEN
from tests.browser_support import PNG_SIGNATURE, Browser
from tests.support import wait_for

pytestmark = pytest.mark.processes
__all__ = ["fleet"]  # the fixture shared with test_dashboard


@pytest.mark.timeout(600)
def test_the_workers_page_shows_the_node_its_heartbeat_and_its_job(
    fleet: tuple[Api, Database], browser: Browser, tmp_path: Path
) -> None:
    api, _ = fleet
    plan = api.call(
        "POST",
        "/api/ledger/plans",
        json={"name": "long-backfill", "steps": [{"name": "long", "seconds": 300}]},
    )
    job_id = api.call("POST", f"/api/ledger/plans/{plan['plan_id']}/strategize")["job"]["job_id"]
    wait_for(
        lambda: api.call("GET", f"/api/ledger/jobs/{job_id}")["status"] == "running",
        timeout=60,
        what="the job to run",
    )
    worker_id = api.call("GET", f"/api/ledger/jobs/{job_id}")["worker_id"]
    node, _, pid = worker_id.rpartition("/")
    assert node.startswith("dash@") and pid.isdigit()

    loaded(browser, f"{api.url}/dashboard/workers#token={TOKEN}")

    def celery_answered() -> bool:  # its answer is kept 5 s: a later refresh may bring it
        return "1 active" in visible_text(browser, f'#workers tr[data-node="{node}"]')

    wait_for(celery_answered, timeout=30, what="Celery's answer on the Workers page")
    row = visible_text(browser, f'#workers tr[data-node="{node}"]')
    assert node in row and pid in row and "UTC" in row and "s ago" in row
    assert f"1: {job_id[-8:]}" in row and "stale" not in row and "no reply" not in row
    section = visible_text(browser, "#workers")
    assert "1 running job on 1 node (ledger)" in section and "1 node answered" in section
    href = browser.evaluate(f"document.querySelector('#workers a[href$=\"{job_id}\"]')?.href")
    assert href == f"{api.url}/dashboard/jobs/{job_id}"
    assert browser.screenshot(tmp_path / "workers.png").startswith(PNG_SIGNATURE)

    api.call("POST", f"/api/ledger/jobs/{job_id}/cancel")  # the worker stops promptly
    wait_for(
        lambda: api.call("GET", f"/api/ledger/jobs/{job_id}")["status"] == "cancelled",
        timeout=60,
        what="the job to be cancelled",
    )
