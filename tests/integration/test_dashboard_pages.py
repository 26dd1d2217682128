"""The dashboard's listing and detail pages over real HTTP (uvicorn in a thread), SQLite ledger.

Fast: no worker, no browser. (Starlette's TestClient needs the httpx2 package, which this
project does not install; the suite's ApiServer serves the real app instead.) The ledger is
seeded past one page of plans, jobs and failed jobs, and the pages are followed by their own
links ("older »", ids), as a person would.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from planq.cli.api.detail_html import pager
from planq.cli.api.listing import Listing
from planq.domain.runs import Fresh
from planq.store import Database
from planq.store.runs_sql import SqlRunStoreProvider
from tests.api_support import TOKEN, ApiServer, seed_ledger
from tests.integration.test_api import api_settings

GOOD, FAILED = 45, 30
FLOWER = "http://flower.example:5555"


@pytest.fixture
def ledger_url(tmp_path: Path) -> str:
    """A SQLite ledger file, migrated by the API's runtime on first use."""
    return f"sqlite:///{tmp_path / 'pages.db'}"


def client_for(redis_url: str, ledger_url: str, **overrides: Any) -> ApiServer:
    """The API served on a free port (the bearer token configured)."""
    return ApiServer(api_settings(redis_url, ledger_url, **overrides))


@pytest.fixture
def seeded(redis_url: str, ledger_url: str) -> Iterator[tuple[ApiServer, Database]]:
    """Open reads, a Flower URL, and 75 plans: 45 succeeded, 30 failed (newest)."""
    client = client_for(redis_url, ledger_url, api_open_reads=True, flower_url=FLOWER)
    db = None
    try:
        assert client.get("/api/ledger/plans").status_code == 200  # migrates the SQLite file
        db = Database(ledger_url)
        seed_ledger(db, good=GOOD, failed=FAILED)
        yield client, db
    finally:
        if db is not None:
            db.close()
        client.close()


def text_of(html: str) -> str:
    """What a person reads: the tags dropped, whitespace collapsed."""
    return " ".join(re.sub(r"<[^>]+>", " ", html).split())


def older_link(html: str, page: str) -> str:
    """The href of a listing's "older »" link to page."""
    found = re.search(rf'<a href="({re.escape(page)}\?[^"]+)" class="nav older">', html)
    assert found, f"no older link to {page}"
    return found.group(1).replace("&amp;", "&")


def ids(html: str, attribute: str) -> list[str]:
    """The data-<attribute> of every row, in order."""
    return re.findall(rf'<tr data-{attribute}="([0-9A-Z]+)">', html)


def test_overview_pages_past_the_first_page_with_totals(
    seeded: tuple[ApiServer, Database],
) -> None:
    client, _ = seeded
    page = client.get("/dashboard")
    assert page.status_code == 200 and page.headers["cache-control"] == "no-store"
    text = text_of(page.text)
    assert "20 of 75 plans" in text and "10 of 30 failed jobs" in text
    assert "25 of 75 jobs" in text
    assert re.search(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d UTC \(\d+ h ago\)", text)
    assert re.search(r'<span id="clock"[^>]*>[0-9: -]+ UTC</span>', page.text)

    second = client.get(older_link(page.text, "/dashboard/plans"))
    assert "after=" in older_link(page.text, "/dashboard/plans")  # keyset, not offset
    assert "50 older of 75 plans" in text_of(second.text)
    third = client.get(older_link(second.text, "/dashboard/plans"))
    assert "5 older of 75 plans" in text_of(third.text)
    assert 'class="nav older"' not in third.text and "« newest" in third.text
    pages = [ids(p.text, "plan") for p in (page, second, third)]
    every = [plan for found in pages for plan in found]
    assert len(set(every)) == len(every) == 75  # each plan once, none skipped

    first = client.get("/dashboard/jobs")
    rest = client.get(older_link(first.text, "/dashboard/jobs"))
    seen = ids(first.text, "job") + ids(rest.text, "job")
    assert len(ids(first.text, "job")) == 50 and len(set(seen)) == len(seen) == 75
    assert "25 older of 75 jobs" in text_of(rest.text)


def test_failed_jobs_show_their_error_in_the_row_newest_first(
    seeded: tuple[ApiServer, Database],
) -> None:
    client, _ = seeded
    first = client.get("/dashboard/failed", params={"limit": 20})
    rows = ids(first.text, "failed")
    assert len(rows) == 20 and "20 of 30 failed jobs" in text_of(first.text)
    newest = re.search(r'<tr data-failed="[^"]+">.*?</tr>', first.text, re.S)
    assert newest and '<pre class="error-text">ValueError: seeded failure 74</pre>' in newest[0]
    assert f'href="/dashboard/jobs/{rows[0]}"' in newest[0]
    older = client.get(older_link(first.text, "/dashboard/failed"))
    assert "seeded failure 45" in older.text and "seeded failure 74" not in older.text
    assert len(ids(older.text, "failed")) == 10 and "status=" not in older.text.split("pager")[-1]


def test_filters_and_search_by_id(seeded: tuple[ApiServer, Database]) -> None:
    client, _ = seeded
    failed = text_of(client.get("/dashboard/jobs", params={"status": "failed"}).text)
    assert "30 of 30 jobs" in failed
    by_phase = client.get("/dashboard/jobs", params={"status": "failed", "phase": "strategize"})
    assert len(ids(by_phase.text, "job")) == 30 and "not counted" in by_phase.text
    assert "No jobs match" in client.get("/dashboard/jobs", params={"phase": "apply"}).text
    plans = client.get("/dashboard/plans", params={"status": "failed"})
    assert len(ids(plans.text, "plan")) == 30 and "not counted" in plans.text
    assert 'option value="failed" selected' in plans.text  # the form shows the filter

    job_id = ids(client.get("/dashboard/failed").text, "failed")[0]
    plan_id = client.get(f"/api/ledger/jobs/{job_id}").json()["plan_id"]
    found = client.get("/dashboard/plans", params={"id": job_id.lower()})  # a job's plan
    assert ids(found.text, "plan") == [plan_id] and "1 of 1 plans" in text_of(found.text)
    assert ids(client.get("/dashboard/jobs", params={"id": plan_id}).text, "job") == [job_id]
    bad = client.get("/dashboard/fragments/jobs", params={"id": "nope"})
    assert bad.status_code == 422 and "not a plan or job id" in bad.text
    inline = client.get("/dashboard/jobs", params={"status": "bogus"})
    assert inline.status_code == 200 and inline.text.count('class="error-box"') == 1


def test_detail_pages_link_to_each_other(
    seeded: tuple[ApiServer, Database], redis_url: str, ledger_url: str
) -> None:
    client, db = seeded
    job_id = ids(client.get("/dashboard/failed").text, "failed")[0]
    job = client.get(f"/dashboard/jobs/{job_id}")
    assert job.status_code == 200
    assert '<pre class="error-text" id="job-error">ValueError: seeded failure 74</pre>' in job.text
    assert f'href="{FLOWER}/task/{job_id}"' in job.text
    for field in ("attempt", "dispatch_count", "last_heartbeat", "worker_id", "finished_at"):
        assert f'data-field="{field}"' in job.text
    plan_href = re.search(r'<a href="(/dashboard/plans/[0-9A-Z]+)">its plan</a>', job.text)
    assert plan_href
    plan = client.get(plan_href.group(1))
    assert ids(plan.text, "job") == [job_id] and f'href="/dashboard/jobs/{job_id}"' in plan.text
    assert client.get(f"/dashboard/jobs/{'0' * 26}").text.count("error-box") == 1  # not found

    opened = SqlRunStoreProvider(db).open_or_start("orphan_invoices", owner="seed@pages-test")
    assert isinstance(opened, Fresh)
    for i in range(30):
        opened.store.record_finding("dangling_reference", "anomaly", f"invoice-{i:04}", {"i": i})
    opened.store.mark_completed()
    run = client.get(f"/dashboard/runs/{opened.store.run_id}")
    assert "1-25 of 30 findings" in text_of(run.text)
    more = client.get(older_link(run.text, f"/dashboard/runs/{opened.store.run_id}"))
    assert "26-30 of 30 findings" in text_of(more.text)
    assert f'href="/dashboard/runs/{opened.store.run_id}"' in client.get("/dashboard").text

    without = client_for(redis_url, ledger_url, api_open_reads=True)
    try:
        assert "/task/" not in without.get(f"/dashboard/jobs/{job_id}").text  # no Flower URL
    finally:
        without.close()


def test_locked_reads_serve_an_empty_shell_and_pages_only_read(
    redis_url: str, ledger_url: str
) -> None:
    client = client_for(redis_url, ledger_url)
    try:
        shell = client.get("/dashboard/failed", token=None)
        assert shell.status_code == 200 and "loading" in shell.text
        assert 'data-src="/dashboard/fragments/failed"' in shell.text
        assert client.get("/dashboard/fragments/failed", token=None).status_code == 401
        assert client.get("/dashboard/fragments/failed", token=TOKEN).status_code == 200
        for path in ("/dashboard/plans", "/dashboard/jobs", "/dashboard/failed"):
            assert client.post(path).status_code == 405
    finally:
        client.close()


def test_a_bounded_total_is_labelled_as_such() -> None:
    capped = Listing(["row"] * 20, "more than 10,000", {"after": "X"})
    assert "20 of more than 10,000 jobs" in text_of(pager(capped, "/dashboard/jobs", "jobs", True))
