"""The admin API over real HTTP (uvicorn) on a real ledger, SQLite and PostgreSQL.

A real in-process Celery worker on Redis runs the triggers: every route, auth, bad input and
outages are driven through the API itself.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
import redis
import requests
from celery import Celery
from sqlalchemy import func, select, update

from planq.domain.clock import utcnow
from planq.domain.ids import new_id
from planq.domain.runs import Fresh
from planq.store import Database
from planq.store.models import AsyncJobModel, PlanModel, RecoverableRunModel, RunFindingModel
from planq.tasks.recoverable import request_cancel
from planq.tasks.runtime import Runtime
from planq.worker_config.celery_config import ALL_QUEUES
from planq.worker_config.settings import load_settings
from tests.api_support import TOKEN, ApiServer, seed_ledger
from tests.celery_support import FAST, ROOT, embedded_runtime, make_app
from tests.resources import free_port
from tests.runs_support import JOB
from tests.support import wait_for

ADMIN = f"/api/admin/jobs/{JOB}"
SCAN = {"batch_size": "10", "checkpoint_rows": "10", "batch_delay": "0.1"}


# -- fixtures ---------------------------------------------------------------------------------
@pytest.fixture(params=["sqlite", "postgres"])
def ledger_url(request: pytest.FixtureRequest, tmp_path: Any) -> str:
    """A real, empty ledger: a SQLite file (migrated on first use) or PostgreSQL."""
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'api.db'}"
    request.getfixturevalue("pg_database")  # emptied before the test
    return str(request.getfixturevalue("pg_url"))


def api_settings(broker_url: str, database_url: str, **overrides: Any) -> Any:
    """The settings `planq api` would read from the environment, for these services."""
    values: dict[str, Any] = {**FAST, "job_timeout": 120.0, "api_token": TOKEN}
    return load_settings(broker_url=broker_url, database_url=database_url, **values | overrides)


@pytest.fixture
def worker_app(redis_url: str, ledger_url: str) -> Celery:
    """The worker's app on the test Redis DB and the ledger."""
    return make_app(redis_url, ledger_url, max_workers=4, job_timeout=120.0)


@pytest.fixture
def runtime(worker_app: Celery) -> Iterator[Runtime]:
    """A real Celery worker (threads pool) in this process, consuming every planq queue."""
    with embedded_runtime(worker_app) as rt:
        yield rt
        request_cancel(worker_app, JOB)  # a scan left running would hold the worker's stop
        wait_for(
            lambda: not any(r.status.is_active for r in rt.runs.list_runs(JOB, limit=5)),
            timeout=30,
            what="no active run at teardown",
        )


@pytest.fixture
def api(redis_url: str, ledger_url: str) -> Iterator[ApiServer]:
    """The API on the same ledger and broker, token required for reads and writes."""
    server = ApiServer(api_settings(redis_url, ledger_url))
    yield server
    server.close()


# -- helpers ----------------------------------------------------------------------------------
def run_of(api: ApiServer, run_id: str) -> dict[str, Any]:
    """GET the run (200 expected)."""
    response = api.get(f"{ADMIN}/runs/{run_id}")
    assert response.status_code == 200, response.text
    doc: dict[str, Any] = response.json()
    return doc


def wait_run(api: ApiServer, run_id: str, what: str, ok: Any, timeout: float = 60) -> dict:
    """Poll the run through the API until ok(run)."""

    def check() -> dict[str, Any] | None:
        doc = run_of(api, run_id)
        return doc if ok(doc) else None

    return wait_for(check, timeout=timeout, interval=0.05, what=what)


def wait_job(api: ApiServer, job_id: str, *statuses: str, timeout: float = 30) -> dict:
    """Poll a phase job through the API until it is in one of statuses."""

    def check() -> dict[str, Any] | None:
        doc = api.get(f"/api/ledger/jobs/{job_id}").json()
        return doc if doc["status"] in statuses else None

    return wait_for(check, timeout=timeout, interval=0.05, what=f"job {job_id} {statuses}")


def counts(db: Database) -> tuple[int, int, int, int]:
    """(plans, jobs, runs, findings) in the ledger: what 'nothing written' compares."""
    with db.engine.connect() as conn:
        return tuple(  # type: ignore[return-value]
            int(conn.scalar(select(func.count()).select_from(m)) or 0)
            for m in (PlanModel, AsyncJobModel, RecoverableRunModel, RunFindingModel)
        )


def queued_messages(redis_url: str) -> int:
    """Messages waiting on the broker in planq's queues."""
    client = redis.Redis.from_url(redis_url)
    return sum(int(client.llen(q)) for q in ALL_QUEUES)


def no_traceback(response: requests.Response) -> None:
    """An error body is one JSON document with a message, never a traceback."""
    doc = response.json()
    assert doc["message"] and "Traceback" not in response.text, response.text


# -- recoverable runs: the spec's routes -----------------------------------------------------
def test_trigger_runs_to_completion_a_second_is_409_and_findings_page(
    api: ApiServer, runtime: Runtime
) -> None:
    total = seed_ledger(runtime.db, good=150, corrupt=3, mismatched=2)

    first = api.post(f"{ADMIN}/trigger", json={"args": SCAN})

    assert first.status_code == 202, first.text
    doc = first.json()
    assert doc["decision"] == "fresh" and doc["job_name"] == JOB and doc["task_id"]
    run_id = doc["run_id"]
    assert run_id and doc["status"] in ("Running", "Completed")
    second = api.post(f"{ADMIN}/trigger")
    assert second.status_code == 409, second.text
    skipped = second.json()
    assert skipped["skipped"] == "already_running"
    assert (skipped["run_id"], skipped["status"]) == (run_id, "Running")

    done = wait_run(api, run_id, "the run to complete", lambda r: r["status"] == "Completed")
    assert done["stats"]["scanned_count"] == total and done["completed_at"]
    assert done["progress"] == {
        "fraction": 1.0,
        "kind": "approximate",
        "scanned": total,
        "total": total,
    }
    assert bytes.fromhex(done["cursor_hex"]).decode()  # the last job id scanned
    assert "error_message" not in done  # omitted when null, as the spec serialises it
    assert done["params"]["batch_size"] == "10"
    listed = api.get(f"{ADMIN}/runs", params={"limit": 10_000})  # clamped, not refused
    assert [r["id"] for r in listed.json()] == [run_id]  # the 409 started no twin

    whole = api.get(f"{ADMIN}/runs/{run_id}/findings").json()
    assert whole["total"] == 5 and len(whole["findings"]) == 5
    assert whole["severity_counts"] == {"data_loss": 3, "inconsistent": 2, "anomaly": 0}
    paged = []
    for offset in (0, 2, 4):
        page = api.get(f"{ADMIN}/runs/{run_id}/findings", params={"limit": 2, "offset": offset})
        assert page.status_code == 200 and page.json()["offset"] == offset
        paged += page.json()["findings"]
    assert [f["id"] for f in paged] == [f["id"] for f in whole["findings"]]
    assert {f["kind"] for f in paged} == {"corrupt_payload", "plan_job_mismatch"}
    assert all(f["run_id"] == run_id and f["resource_id"] for f in paged)
    keyed, after = [], None
    while True:  # by key: `after=` the page's next_after, until a page is not full
        params: dict[str, Any] = {"limit": 2} | ({"after": after} if after else {})
        page = api.get(f"{ADMIN}/runs/{run_id}/findings", params=params).json()
        keyed += page["findings"]
        after = page.get("next_after")
        if after is None:
            break
        assert after == page["findings"][-1]["id"]
    assert [f["id"] for f in keyed] == [f["id"] for f in whole["findings"]]
    bad = api.get(f"{ADMIN}/runs/{run_id}/findings", params={"after": "nope"})
    assert bad.status_code in (400, 422), bad.text
    empty = api.get(f"{ADMIN}/runs/{run_id}/findings", params={"offset": 50}).json()
    assert empty["findings"] == [] and empty["total"] == 5

    jobs = {j["name"]: j for j in api.get("/api/admin/jobs").json()}
    outcome = jobs[JOB]["last_outcome"]
    assert outcome["run_id"] == run_id and outcome["completed"] is True
    assert outcome["pill"] == "data_loss" and outcome["finding_count"] == 5
    assert "active_run" not in jobs[JOB]
    assert api.get(f"/api/admin/jobs/other/runs/{run_id}").status_code == 404
    assert api.get(f"{ADMIN}/runs/{new_id()}").status_code == 404
    assert api.get(f"{ADMIN}/runs/{run_id}/findings", params={"limit": 0}).status_code == 422


def test_cancel_pauses_the_run_at_its_cursor_and_a_trigger_resumes_it(
    api: ApiServer, runtime: Runtime
) -> None:
    total = seed_ledger(runtime.db, good=200, corrupt=2)
    run_id = api.post(f"{ADMIN}/trigger", json={"args": SCAN}).json()["run_id"]
    wait_run(api, run_id, "a first checkpoint", lambda r: r["stats"]["scanned_count"] >= 20)

    cancel = api.post(f"{ADMIN}/cancel")

    assert cancel.status_code == 200, cancel.text
    assert cancel.json() == {"job_name": JOB, "run_id": run_id, "status": "CancelRequested"}
    paused = wait_run(api, run_id, "the run to pause", lambda r: r["status"] == "Paused")
    scanned = paused["stats"]["scanned_count"]
    assert 20 <= scanned < total and "error_message" not in paused
    cursor_job = bytes.fromhex(paused["cursor_hex"]).decode()
    assert cursor_job.startswith("0") and len(cursor_job) == 26  # a job id: where it got to
    again = api.post(f"{ADMIN}/cancel")
    assert again.status_code == 409 and "Paused" in again.json()["message"]

    resumed = api.post(f"{ADMIN}/trigger", json={"args": {"batch_delay": "0"}})

    assert resumed.status_code == 202, resumed.text
    assert resumed.json()["decision"] == "resumed" and resumed.json()["run_id"] == run_id
    done = wait_run(api, run_id, "the resumed run to end", lambda r: r["status"] == "Completed")
    assert done["stats"]["scanned_count"] == total  # resumed at the cursor: nothing twice
    assert done["params"]["batch_size"] == "10"  # kept from the first trigger


def test_purge_deletes_old_ended_runs_only(api: ApiServer, redis_url: str, ledger_url: str) -> None:
    from planq.store.runs_sql import SqlRunStoreProvider

    db = Database(ledger_url)
    try:
        api.get("/api/admin/jobs")  # the API's runtime migrates a fresh SQLite ledger
        runs = SqlRunStoreProvider(db)
        opened = {}
        for name in ("old_done", "old_failed", "recent_done", "old_paused", "old_running"):
            result = runs.open_or_start(name, owner="seed@test")
            assert isinstance(result, Fresh)
            opened[name] = result.store
        opened["old_done"].record_finding("thing", "anomaly", "r1", {"n": 1})
        opened["old_done"].mark_completed()
        opened["old_failed"].mark_failed("boom")
        opened["recent_done"].mark_completed()
        opened["old_paused"].mark_paused(b"cursor-1")
        ten_days_ago = utcnow() - timedelta(days=10)
        old = [opened[n].run_id for n in ("old_done", "old_failed", "old_paused", "old_running")]
        with db.engine.begin() as conn:
            conn.execute(
                update(RecoverableRunModel)
                .where(RecoverableRunModel.id.in_(old))
                .values(started_at=ten_days_ago, last_progress_at=ten_days_ago)
            )
            conn.execute(
                update(RecoverableRunModel)
                .where(RecoverableRunModel.completed_at.is_not(None))
                .where(RecoverableRunModel.id.in_(old))
                .values(completed_at=ten_days_ago)
            )

        purged = api.post("/api/admin/jobs/runs/purge", params={"retention_days": 0})

        assert purged.status_code == 200, purged.text
        assert purged.json() == {"purged": 2, "retention_days": 1.0}  # max(1, days)
        left = {name: runs.get_run_by_id(store.run_id) for name, store in opened.items()}
        assert left["old_done"] is None and left["old_failed"] is None
        kept = {name: run.status.value for name, run in left.items() if run is not None}
        assert kept == {
            "recent_done": "Completed",
            "old_paused": "Paused",
            "old_running": "Running",
        }
        assert counts(db)[3] == 0  # the purged run's finding went with it
        assert api.post("/api/admin/jobs/runs/purge").json()["purged"] == 0
    finally:
        db.close()


# -- the job ledger ---------------------------------------------------------------------------
def test_plans_and_phase_jobs_through_every_ledger_route(api: ApiServer, runtime: Runtime) -> None:
    created = api.post(
        "/api/ledger/plans", json={"name": "rebalance", "steps": ["a", {"name": "b", "seconds": 0}]}
    )
    assert created.status_code == 201, created.text
    plan_id = created.json()["plan_id"]
    assert created.json()["state"] == "New" and created.json()["steps"] == 2
    for phase in ("strategize", "execute", "apply"):
        queued = api.post(f"/api/ledger/plans/{plan_id}/{phase}")
        assert queued.status_code == 202, queued.text
        job = queued.json()["job"]
        assert job["phase"] == phase and job["dispatched"] is True
        wait_job(api, job["job_id"], "succeeded")
    plan = api.get(f"/api/ledger/plans/{plan_id}").json()
    assert plan["state"] == "Apply/COMPLETE" and len(plan["jobs"]) == 3
    assert [s["name"] for s in plan["step_list"]] == ["a", "b"]
    assert all(plan["phases"][p]["status"] == "succeeded" for p in plan["phases"])
    out_of_order = api.post(f"/api/ledger/plans/{plan_id}/execute")
    assert out_of_order.status_code == 409 and out_of_order.json()["error"] == "refused"

    slow = api.post(
        "/api/ledger/plans",
        json={"steps": [{"name": "quick", "seconds": 0.05}, {"name": "long", "seconds": 60}]},
    ).json()
    job_id = api.post(f"/api/ledger/plans/{slow['plan_id']}/strategize").json()["job"]["job_id"]
    running = wait_for(
        lambda: (d := api.get(f"/api/ledger/jobs/{job_id}").json())["progress"] and d,
        timeout=30,
        what="the slow job's first checkpoint",
    )
    assert running["status"] == "running" and running["checkpoint"] == {"next_step": 1}
    assert running["progress"] == 0.5 and running["last_heartbeat"]
    listed = api.get("/api/ledger/jobs", params={"status": "running"}).json()
    assert [j["job_id"] for j in listed["jobs"]] == [job_id]
    mine = api.get("/api/ledger/jobs", params={"plan_id": plan_id, "limit": 1, "offset": 1})
    assert [j["phase"] for j in mine.json()["jobs"]] == ["execute"]
    newest = api.get("/api/ledger/plans", params={"limit": 1}).json()["plans"]
    assert [p["plan_id"] for p in newest] == [slow["plan_id"]]

    cancelled = api.post(f"/api/ledger/jobs/{job_id}/cancel")
    assert cancelled.status_code == 200, cancelled.text
    # "cancel requested"; or "cancelled" when the broadcast stopped it before the read-back
    assert cancelled.json()["outcome"] in ("cancel requested", "cancelled")
    ended = wait_job(api, job_id, "cancelled")
    assert ended["checkpoint"] == {"next_step": 1}  # kept for the retry
    assert api.post(f"/api/ledger/jobs/{job_id}/cancel").status_code == 409
    retried = api.post(f"/api/ledger/jobs/{job_id}/retry")
    assert retried.status_code == 202, retried.text
    again = retried.json()["job"]
    assert again["attempt"] == 2 and again["retry_of"] == job_id and retried.json()["published"]
    assert again["checkpoint"] == {"next_step": 1}
    assert api.post(f"/api/ledger/jobs/{job_id}/retry").status_code == 409
    wait_job(api, again["job_id"], "running")
    assert api.post(f"/api/ledger/jobs/{again['job_id']}/cancel").status_code == 200
    wait_job(api, again["job_id"], "cancelled")
    succeeded = plan["jobs"][0]["job_id"]
    assert api.post(f"/api/ledger/jobs/{succeeded}/retry").status_code == 409

    for section in ("recoverable", "runs", "plans", "jobs"):  # the dashboard's fragments
        fragment = api.get(f"/dashboard/fragments/{section}")
        assert fragment.status_code == 200 and "error-box" not in fragment.text, fragment.text
    active = api.get("/dashboard/fragments/jobs", params={"status": "running"}).text
    assert again["job_id"] not in active  # ended
    assert f'data-plan="{slow["plan_id"]}"' in api.get("/dashboard/fragments/plans").text

    stuck = api.post("/api/ledger/stuck")
    assert stuck.status_code == 200 and stuck.json()["expired"] == []
    cleanup = api.post("/api/ledger/cleanup")
    assert cleanup.status_code == 200 and cleanup.json()["deleted"] == 0
    assert api.get(f"/api/ledger/jobs/{new_id()}").status_code == 404
    assert api.get(f"/api/ledger/plans/{new_id()}").status_code == 404


# -- auth -------------------------------------------------------------------------------------
def test_auth_refuses_requests_without_the_token(
    api: ApiServer, redis_url: str, ledger_url: str
) -> None:
    for method, path in [
        ("GET", "/api/admin/jobs"),
        ("GET", f"{ADMIN}/runs"),
        ("GET", "/api/ledger/plans"),
        ("GET", "/dashboard/fragments/plans"),
        ("POST", f"{ADMIN}/trigger"),
        ("POST", "/api/ledger/plans"),
        ("POST", "/api/admin/jobs/runs/purge"),
    ]:
        for token in (None, "wrong-token", TOKEN + "x"):
            refused = api.request(method, path, token=token, json={"steps": ["a"]})
            assert refused.status_code == 401, (method, path, token, refused.text)
            assert refused.headers["WWW-Authenticate"].startswith("Bearer")
    assert api.get("/api/admin/jobs", headers={"Authorization": f"bearer {TOKEN}"}, token=None)
    assert api.get("/api/ledger/plans").json()["plans"] == []  # nothing was created
    assert api.get("/api/admin/jobs/ledger_consistency/runs").json() == []
    assert api.get("/healthz", token=None).json() == {"ok": True}
    docs = api.get("/docs", token=None)  # the OpenAPI page, with nothing from a CDN
    assert docs.status_code == 200 and "/docs/assets/swagger-ui-bundle.js" in docs.text
    assert "cdn" not in docs.text.lower()
    assert api.get("/docs/assets/swagger-ui-bundle.js", token=None).status_code == 200
    paths = api.get("/openapi.json", token=None).json()["paths"]
    assert {
        "/api/admin/jobs",
        "/api/admin/jobs/{name}/trigger",
        "/api/admin/jobs/{name}/cancel",
        "/api/admin/jobs/{name}/runs",
        "/api/admin/jobs/{name}/runs/{run_id}",
        "/api/admin/jobs/{name}/runs/{run_id}/findings",
        "/api/admin/jobs/runs/purge",
    } <= set(paths)
    shell = api.get("/", token=None)
    assert shell.status_code == 200 and "loading" in shell.text  # the shell, no data

    open_reads = ApiServer(api_settings(redis_url, ledger_url, api_open_reads=True))
    try:
        assert open_reads.get("/api/ledger/plans", token=None).status_code == 200
        write = open_reads.post("/api/ledger/plans", token=None, json={"steps": ["a"]})
        assert write.status_code == 401
        assert open_reads.post("/api/ledger/plans", json={"steps": ["a"]}).status_code == 201
    finally:
        open_reads.close()


# -- bad input, outages -----------------------------------------------------------------------
def test_bad_input_is_422_and_writes_nothing(
    api: ApiServer, redis_url: str, ledger_url: str
) -> None:
    plan_id = api.post("/api/ledger/plans", json={"steps": ["a"]}).json()["plan_id"]
    db = Database(ledger_url)
    try:
        before = counts(db), queued_messages(redis_url)
        bad: list[tuple[str, str, dict[str, Any]]] = [
            ("POST", "/api/ledger/plans", {"json": {"steps": []}}),
            ("POST", "/api/ledger/plans", {"json": {"steps": ["  "]}}),
            ("POST", "/api/ledger/plans", {"json": {"steps": ["a"], "owner": "x"}}),
            ("POST", "/api/ledger/plans", {"json": {"steps": [{"name": "a", "seconds": -1}]}}),
            ("POST", "/api/ledger/plans", {"data": "not json"}),
            ("POST", "/api/ledger/plans/not-a-ulid/strategize", {}),
            ("POST", f"/api/ledger/plans/{plan_id}/deploy", {}),
            ("POST", "/api/ledger/jobs/not-a-ulid/cancel", {}),
            ("POST", "/api/ledger/jobs/not-a-ulid/retry", {}),
            ("GET", "/api/ledger/jobs?limit=0", {}),
            ("GET", "/api/ledger/jobs?offset=-1", {}),
            ("GET", "/api/ledger/jobs?status=bogus", {}),
            ("GET", "/api/ledger/jobs?plan_id=xyz", {}),
            ("GET", "/api/ledger/plans?limit=abc", {}),
            ("POST", f"{ADMIN}/trigger", {"json": {"args": {"batch_size": 5}}}),
            ("POST", f"{ADMIN}/trigger", {"json": {"args": {"batch_size": "0"}}}),
            ("POST", f"{ADMIN}/trigger", {"json": {"args": "batch_size=5"}}),
            ("POST", f"{ADMIN}/trigger", {"json": {"args": {"batch_sise": "5"}}}),
            ("GET", "/api/ledger/plans?after=xyz", {}),
            ("GET", f"/api/ledger/plans?after={new_id()}", {}),
            ("POST", f"{ADMIN}/trigger", {"json": {"arguments": {}}}),
            ("GET", f"{ADMIN}/runs?limit=0", {}),
            ("GET", f"{ADMIN}/runs/not-a-ulid", {}),
            ("GET", f"{ADMIN}/runs/{new_id()}/findings?offset=-1", {}),
            ("POST", "/api/admin/jobs/runs/purge?retention_days=abc", {}),
            ("POST", "/api/admin/jobs/runs/purge?retention_days=inf", {}),
        ]
        for method, path, kwargs in bad:
            response = api.request(method, path, **kwargs)
            assert response.status_code == 422, (method, path, response.text)
            assert response.json()["error"] == "bad_input"
            no_traceback(response)
        assert (counts(db), queued_messages(redis_url)) == before
        typo = api.post(f"{ADMIN}/trigger", json={"args": {"batch_sise": "5"}}).json()["message"]
        assert "did you mean batch_size?" in typo
        for path in ("/api/admin/jobs/nope/runs", "/api/ledger/plans/" + new_id()):
            missing = api.get(path)
            assert missing.status_code == 404 and missing.json()["error"] == "not_found"
        assert api.post("/api/admin/jobs/nope/trigger").status_code == 404
        assert (counts(db), queued_messages(redis_url)) == before
    finally:
        db.close()


def test_a_ledger_or_broker_outage_is_503_with_a_reason(redis_url: str, ledger_url: str) -> None:
    dead_ledger = ApiServer(
        api_settings(
            redis_url, f"postgresql+psycopg://planq:pw-SECRET-1@127.0.0.1:{free_port()}/gone"
        )
    )
    try:
        for path in ("/api/ledger/plans", f"{ADMIN}/runs", "/dashboard/fragments/runs"):
            down = dead_ledger.get(path)
            assert down.status_code == 503, down.text
            assert down.json()["message"].startswith("ledger: ")
            assert "pw-SECRET-1" not in down.text
            no_traceback(down)
        assert dead_ledger.post(f"{ADMIN}/trigger").status_code == 503
    finally:
        dead_ledger.close()

    dead_broker = ApiServer(api_settings(f"redis://127.0.0.1:{free_port()}/0", ledger_url))
    try:
        plan_id = dead_broker.post("/api/ledger/plans", json={"steps": ["a"]}).json()["plan_id"]
        for path in (f"/api/ledger/plans/{plan_id}/strategize", f"{ADMIN}/trigger"):
            down = dead_broker.post(path)
            assert down.status_code == 503, down.text
            assert down.json()["message"].startswith("broker: ")
            no_traceback(down)
        assert dead_broker.get(f"/api/ledger/plans/{plan_id}").json()["state"] == "New"
        assert dead_broker.get(f"{ADMIN}/runs").json() == []  # nothing was written
        assert dead_broker.get("/api/ledger/jobs").json()["jobs"] == []
    finally:
        dead_broker.close()


def test_planq_api_without_a_token_binds_loopback_only_and_says_so(
    redis_url: str, tmp_path: Any
) -> None:
    port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("PLANQ_API_")}
    env.update(
        PLANQ_DATABASE_URL=f"sqlite:///{tmp_path / 'cli.db'}",
        PLANQ_BROKER_URL=redis_url,
        PYTHONPATH=str(ROOT),
    )
    planq = str(Path(sys.executable).with_name("planq"))  # the installed console script
    proc = subprocess.Popen(
        [planq, "api", "--host", "0.0.0.0", "--port", str(port)],
        env=env,
        cwd=ROOT,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    try:

        def answers() -> bool:
            if proc.poll() is not None:
                pytest.fail(f"planq api exited with {proc.returncode}: {proc.stderr.read()}")
            try:
                return requests.get(f"http://127.0.0.1:{port}/healthz", timeout=2).ok
            except requests.ConnectionError:
                return False

        wait_for(answers, timeout=30, interval=0.1, what="planq api to answer")
        plans = requests.get(f"http://127.0.0.1:{port}/api/ledger/plans", timeout=10)
        assert plans.status_code == 200  # no token configured: open, on loopback only
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        _, stderr = proc.communicate(timeout=30)
    assert "PLANQ_API_TOKEN is not set" in stderr
    assert "listening on 127.0.0.1 only, not 0.0.0.0" in stderr
    assert "Uvicorn running on http://127.0.0.1:" in stderr


def test_jobs_listing_newest_first_by_key_with_unreadable_rows_named(
    api: ApiServer, runtime: Runtime
) -> None:
    """Issue 19 item 9: newest first like the CLI; a corrupt row is listed, not a 400."""
    seed_ledger(runtime.db, good=5, corrupt=2)  # the corrupt rows are the newest two
    first = api.get("/api/ledger/jobs", params={"limit": 4})
    assert first.status_code == 200, first.text
    page = first.json()
    assert (page["total"], page["total_is_lower_bound"]) == (7, False)
    times = [j["created_at"] for j in page["jobs"]]
    assert times == sorted(times, reverse=True)
    assert [bool(j["unreadable"]) for j in page["jobs"]] == [True, True, False, False]
    assert all("payload" in j["unreadable"] for j in page["jobs"][:2])
    rest = api.get("/api/ledger/jobs", params={"limit": 4, "after": page["next_after"]}).json()
    assert [j["job_id"] for j in rest["jobs"]] == [
        j["job_id"] for j in api.get("/api/ledger/jobs").json()["jobs"][4:]
    ]
    assert rest["next_after"] is None and len(rest["jobs"]) == 3
    unknown = api.get("/api/ledger/jobs", params={"after": new_id()})
    assert unknown.status_code == 422 and "after" in unknown.json()["message"]
    plans = api.get("/api/ledger/plans", params={"limit": 1}).json()
    assert (plans["total"], plans["total_is_lower_bound"]) == (7, False)
    every = [p["plan_id"] for p in api.get("/api/ledger/plans").json()["plans"]]
    after = plans["next_after"]
    assert after == every[0]  # a full page names its cursor
    keyed = api.get("/api/ledger/plans", params={"limit": 4, "after": after}).json()
    assert [p["plan_id"] for p in keyed["plans"]] == every[1:5] and keyed["total"] == 7
    last = api.get("/api/ledger/plans", params={"limit": 4, "after": every[4]}).json()
    assert [p["plan_id"] for p in last["plans"]] == every[5:] and last["next_after"] is None
