"""The dashboard in headless Chromium: `planq api` and a `celery worker` process on a real ledger.

The page is loaded with the token in its #fragment, so everything it shows came through its
own script and the API's auth; the DOM is checked (progress bars, pill colours, findings) and
a screenshot is taken. It is written to docs/img/ for the README only when asked
(PLANQ_REFRESH_SCREENSHOTS=1), so `make test` leaves the tree clean.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import requests
from celery import Celery

from planq.domain.runs import Fresh, ProgressKind
from planq.store import Database
from planq.store.runs_sql import SqlRunStoreProvider
from planq.tasks.runtime import reset_runtime
from tests.api_support import TOKEN, seed_ledger
from tests.browser_support import PNG_SIGNATURE, headless
from tests.celery_support import ROOT, WorkerProcess, make_app, worker_env
from tests.resources import free_port
from tests.runs_support import JOB
from tests.support import wait_for

pytestmark = pytest.mark.processes

SCREENSHOT = ROOT / "docs" / "img" / "planq-dashboard.png"
FLOWER_URL = "http://127.0.0.1:5555"
RED, AMBER, NEUTRAL = "#b91c1c", "#b45309", "#6b7280"


def start_api(env: dict[str, str], port: int, log_path: Path) -> subprocess.Popen[bytes]:
    """Start `planq api` and wait until it answers."""
    planq = Path(sys.executable).with_name("planq")  # the installed console script
    log = open(log_path, "ab")  # noqa: SIM115 - closed with the process
    proc = subprocess.Popen(
        [str(planq), "api", "--host", "127.0.0.1", "--port", str(port)],
        env=env,
        cwd=ROOT,
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )

    def answers() -> bool:
        if proc.poll() is not None:
            pytest.fail(f"planq api exited: {log_path.read_text(errors='replace')[-2000:]}")
        try:
            return requests.get(f"http://127.0.0.1:{port}/healthz", timeout=2).ok
        except requests.ConnectionError:
            return False

    wait_for(answers, timeout=30, interval=0.1, what="planq api to answer")
    return proc


class Api:
    """A client of the running `planq api`, with the token."""

    def __init__(self, port: int) -> None:
        self.url = f"http://127.0.0.1:{port}"

    def call(self, method: str, path: str, **kwargs: Any) -> Any:
        response = requests.request(
            method,
            self.url + path,
            headers={"Authorization": f"Bearer {TOKEN}"},
            timeout=30,
            **kwargs,
        )
        assert response.status_code < 300, response.text
        return response.json()


@pytest.fixture
def fleet(
    redis_url: str, pg_database: Database, pg_url: str, tmp_path: Path
) -> Iterator[tuple[Api, Database]]:
    """A celery worker process and `planq api` on PostgreSQL and the test Redis."""
    producer: Celery = make_app(redis_url, pg_url)
    env = worker_env(redis_url, pg_url, job_timeout=120.0)
    worker = WorkerProcess(env, "dash", pool="threads", concurrency=4, log_path=tmp_path / "w.log")
    port = free_port()
    api_env = {**env, "PLANQ_API_TOKEN": TOKEN, "PLANQ_FLOWER_URL": FLOWER_URL}
    api = None
    try:
        worker.wait_ready(producer)
        api = start_api(api_env, port, tmp_path / "api.log")
        yield Api(port), pg_database
    finally:
        if api is not None:
            api.terminate()
            api.wait(30)
        worker.close()
        reset_runtime(producer)


def row(dom: str, attribute: str, value: str) -> str:
    """The HTML of the table row whose data-<attribute> is value."""
    m = re.search(rf'<tr data-{attribute}="{re.escape(value)}">(.*?)</tr>', dom, re.S)
    assert m, f"no row data-{attribute}={value} in the dashboard"
    return m.group(1)


def pills(html: str) -> dict[str, str]:
    """{pill kind: its inline background colour} in a fragment."""
    found = re.findall(r'data-pill="([a-z_]+)" style="background-color: (#[0-9a-f]{6})"', html)
    return dict(found)


def bar_of(html: str) -> tuple[str, str, str]:
    """(title, data-fraction, fill width) of the first progress bar in a fragment."""
    m = re.search(
        r'class="bar"[^>]*title="([^"]*)"[^>]*data-fraction="([^"]*)".*?'
        r'class="fill" style="width: ([0-9.]+)%"',
        html,
        re.S,
    )
    assert m, f"no progress bar in {html[:300]}"
    return m.group(1), m.group(2), m.group(3)


def overshooting_run(db: Database) -> str:
    """An approximate-progress run that scanned 120 of an estimated 100, with an anomaly."""
    runs = SqlRunStoreProvider(db)
    opened = runs.open_or_start("orphan_invoices", owner="seed@dashboard-test")
    assert isinstance(opened, Fresh)
    store = opened.store
    store.seed_progress_params(100, ProgressKind.approximate)
    store.record_finding("dangling_reference", "anomaly", "invoice-0007", {"customer": None})
    store.checkpoint(b"invoice-0120", 120)
    assert store.mark_completed()
    return store.run_id


@pytest.mark.timeout(1200)  # the first run may install Chromium
def test_dashboard_shows_jobs_runs_and_findings(
    chromium: Path, fleet: tuple[Api, Database], tmp_path: Path
) -> None:
    api, db = fleet
    seed_ledger(db, good=60, corrupt=2, mismatched=1)
    done = api.call("POST", "/api/ledger/plans", json={"name": "nightly-rebalance", "steps": ["a"]})
    for phase in ("strategize", "execute", "apply"):
        job = api.call("POST", f"/api/ledger/plans/{done['plan_id']}/{phase}")["job"]
        wait_for(
            lambda j=job: (
                api.call("GET", f"/api/ledger/jobs/{j['job_id']}")["status"] == "succeeded"
            ),
            timeout=30,
            what=f"{phase} to succeed",
        )
    stopped = api.call(
        "POST",
        "/api/ledger/plans",
        json={"name": "cancelled-backfill", "steps": [{"name": "long", "seconds": 300}]},
    )
    stopped_id = api.call("POST", f"/api/ledger/plans/{stopped['plan_id']}/strategize")["job"][
        "job_id"
    ]
    wait_for(
        lambda: api.call("GET", f"/api/ledger/jobs/{stopped_id}")["status"] == "running",
        timeout=30,
        what="the job to cancel to run",
    )
    api.call("POST", f"/api/ledger/jobs/{stopped_id}/cancel")
    wait_for(
        lambda: api.call("GET", f"/api/ledger/jobs/{stopped_id}")["status"] == "cancelled",
        timeout=30,
        what="the job to be cancelled",
    )
    slow = api.call(
        "POST",
        "/api/ledger/plans",
        json={"name": "slow-backfill", "steps": ["warm", {"name": "long", "seconds": 300}]},
    )
    running_id = api.call("POST", f"/api/ledger/plans/{slow['plan_id']}/strategize")["job"][
        "job_id"
    ]
    wait_for(
        lambda: api.call("GET", f"/api/ledger/jobs/{running_id}").get("progress") == 0.5,
        timeout=30,
        what="the slow job at 50%",
    )
    run_id = api.call("POST", f"/api/admin/jobs/{JOB}/trigger")["run_id"]
    wait_for(
        lambda: api.call("GET", f"/api/admin/jobs/{JOB}/runs/{run_id}")["status"] == "Completed",
        timeout=60,
        what="the consistency scan to complete",
    )
    overshoot = overshooting_run(db)

    page = f"{api.url}/#token={TOKEN}&findings={JOB}/{run_id}"
    dom = headless(chromium, tmp_path / "profile-dom", "--dump-dom", page)
    assert dom.returncode == 0, dom.stderr[-2000:]
    html = dom.stdout
    assert 'data-loaded="true"' in html  # the script filled every section with the token
    assert f'href="{FLOWER_URL}"' in html

    job_row = row(html, "job", running_id)
    title, fraction, width = bar_of(job_row)
    assert (fraction, width) == ("0.5", "50.0") and "running" in job_row

    scan = row(html, "run", run_id)
    assert pills(scan) == {"data_loss": RED, "inconsistent": AMBER}
    title, fraction, width = bar_of(scan)
    assert (
        width == "100.0" and "(approximate)" in title and '<span class="kind">approximate' in scan
    )

    over = row(html, "run", overshoot)
    title, fraction, width = bar_of(over)
    assert float(fraction) == pytest.approx(1.2) and width == "100.0"  # clamped for the width
    assert title.startswith("raw fraction 1.2000 (approximate): 120 / 100")  # raw in the tooltip
    assert pills(over) == {"anomaly": NEUTRAL}
    assert "696e766f6963652d30313230" in over  # cursor_hex of b"invoice-0120"

    badge = row(html, "recoverable", JOB)
    assert pills(badge) == {"data_loss": RED} and "trigger" in badge
    assert 'data-confirm="Trigger ledger_consistency?"' in badge
    assert "1-3 of 3" in html and html.count("<tr data-finding=") == 3
    plan_row = row(html, "plan", slow["plan_id"])
    assert "cancel" in plan_row and 'data-confirm="Cancel strategize job' in plan_row
    stopped_row = row(html, "plan", stopped["plan_id"])
    assert "retry" in stopped_row and "Strategize/CANCELLED" in stopped_row

    shot = tmp_path / "dashboard.png"
    taken = headless(
        chromium, tmp_path / "profile-shot", "--window-size=1400,1250", f"--screenshot={shot}", page
    )
    assert taken.returncode == 0, taken.stderr[-2000:]
    data = shot.read_bytes()
    assert data.startswith(PNG_SIGNATURE) and len(data) > 20_000, len(data)
    if os.environ.get("PLANQ_REFRESH_SCREENSHOTS") == "1":  # asked for: the README's picture
        SCREENSHOT.parent.mkdir(parents=True, exist_ok=True)
        SCREENSHOT.write_bytes(data)
