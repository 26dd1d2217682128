"""A site's own secret pattern, redacted wherever the ledger's text is stored or shown.

PLANQ_REDACTION_PATTERNS=["tok_[A-Za-z0-9]+"] (a pattern the built-ins never match). A
job whose executor raises with such a token, a run whose handler raises with one (Paused)
or returns Failed with one, a finding's detail and a run param carrying one: the ledger
rows hold only the redacted text, and so do `planq jobs|runs` and the admin API and
dashboard that read them. The real-process surfaces (worker log, Flower, AsyncResult) are
in tests/acceptance/test_custom_redaction.py.
"""

from __future__ import annotations

import io
import json
import logging
import os
import re
from collections.abc import Iterator, Mapping
from typing import Any

import pytest
from celery import Celery
from sqlalchemy import text
from sqlalchemy.exc import DBAPIError
from typer.testing import CliRunner

from planq.cli.main import app as cli_app
from planq.domain.errors import LedgerRejectedError
from planq.domain.jobs import AsyncJobStatus
from planq.domain.plans import Plan, PlanPhase
from planq.domain.redaction import REDACTED
from planq.domain.runs import Failed, RunStatus, RunStore
from planq.store import Database
from planq.store.database import as_rejection
from planq.tasks.recoverable import RunFailed, register_recoverable_job
from planq.tasks.runtime import Runtime, reset_runtime, runtime_for
from planq.worker_config.settings import load_settings
from tests.api_support import TOKEN, ApiServer
from tests.celery_support import embedded_runtime, make_app, wait_for_status
from tests.executors_for_tests import CHAINED_TOKEN, CUSTOM_TOKEN, LOGGED_TOKEN

PATTERNS = '["tok_[A-Za-z0-9]+"]'
PARAM_TOKEN = "tok_PARAMr5T1"
DETAIL_TOKEN = "tok_DETAILm2V6"
FAILED_TOKEN = "tok_FAILEDq8N3"
TOKENS = (CUSTOM_TOKEN, CHAINED_TOKEN, LOGGED_TOKEN, PARAM_TOKEN, DETAIL_TOKEN, FAILED_TOKEN)


def no_token(where: str, shown: str) -> None:
    """No token of this test, nor any tok_… at all, in shown."""
    leaked = [token for token in TOKENS if token in shown]
    assert not leaked, f"{where} shows {leaked}:\n{shown[-3000:]}"
    assert re.search(r"tok_[A-Za-z0-9]", shown) is None, f"{where}:\n{shown[-3000:]}"


class Panics:
    """Records a finding and a param with tokens in them, then raises with another."""

    name = "redaction_panics"

    def run_resumable(
        self, store: RunStore, args: Mapping[str, Any], resume_cursor: bytes | None
    ) -> Any:
        store.set_string_param("upstream_key", PARAM_TOKEN)
        store.record_finding("leak", "anomaly", "res-1", {"seen": f"header {DETAIL_TOKEN}"})
        raise RuntimeError(f"upstream refused {CUSTOM_TOKEN}")


class Fails:
    """Ends the run Failed with a token in its message."""

    name = "redaction_fails"

    def run_resumable(
        self, store: RunStore, args: Mapping[str, Any], resume_cursor: bytes | None
    ) -> Any:
        return Failed(f"cannot go on with {FAILED_TOKEN}")


@pytest.fixture
def app(ledger_url: str) -> Iterator[Celery]:
    """A planq app on settings with the custom pattern (memory broker: nothing consumes)."""
    app = make_app(
        "memory://",
        ledger_url,
        default_executor="tests.executors_for_tests:custom_token_chain",
        redaction_patterns=PATTERNS,
    )
    yield app
    reset_runtime(app)


@pytest.fixture
def written(app: Celery) -> dict[str, str]:
    """A failed job, a Paused run and a Failed run, all written through planq's own paths."""
    runtime = runtime_for(app)
    plan = Plan.with_steps(["one"], name="redaction")
    runtime.plans.add(plan)
    queued = runtime.lifecycle.queue_phase(plan.plan_id, PlanPhase.strategize)
    assert queued.job is not None
    runtime.worker.run_job(queued.job.job_id)  # the engine a Celery delivery runs
    panics = register_recoverable_job(app, Panics())
    fails = register_recoverable_job(app, Fails())
    paused = panics()  # the task body, in this process
    with pytest.raises(RunFailed) as failed:
        fails()
    no_token("the Paused trigger's result", repr(paused))
    no_token("the Failed trigger's exception", str(failed.value))
    return {
        "job": queued.job.job_id,
        "plan": plan.plan_id,
        "paused": paused["run_id"],
        "failed": runtime.runs.list_runs(Fails.name, limit=1)[0].id,
    }


def test_ledger_rows_hold_only_redacted_text(app: Celery, written: dict[str, str]) -> None:
    runtime: Runtime = runtime_for(app)
    job = runtime.jobs.get(written["job"])
    assert job is not None and job.status is AsyncJobStatus.failed
    assert job.error_message == f"RuntimeError: upstream refused {REDACTED}"
    # The executor's traceback, its cause chain with it, redacted (issue 19, item 2).
    assert job.error_traceback is not None and "in custom_token_chain" in job.error_traceback
    assert f"KeyError: 'credential {REDACTED} not accepted'" in job.error_traceback
    assert job.error_traceback.rstrip().endswith(job.error_message)
    paused = runtime.runs.get_run_by_id(written["paused"])
    assert paused is not None and paused.status is RunStatus.Paused
    assert paused.error_message == f"RuntimeError: upstream refused {REDACTED}"
    assert paused.params == {"upstream_key": REDACTED}
    failed = runtime.runs.get_run_by_id(written["failed"])
    assert failed is not None and failed.status is RunStatus.Failed
    assert failed.error_message == f"cannot go on with {REDACTED}"
    (finding,) = runtime.runs.list_findings(written["paused"])
    assert finding.detail == {"seen": f"header {REDACTED}"}
    for row in (job, paused, failed, finding):
        no_token(f"the ledger row {row!r}", repr(row))


@pytest.fixture
def cli_env(ledger_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """PLANQ_* for the CLI: this ledger and the custom pattern, nothing from outside."""
    for key in list(os.environ):
        if key.startswith("PLANQ_"):
            monkeypatch.delenv(key)
    monkeypatch.setenv("PLANQ_DATABASE_URL", ledger_url)
    monkeypatch.setenv("PLANQ_BROKER_URL", "memory://")
    monkeypatch.setenv("PLANQ_REDACTION_PATTERNS", PATTERNS)


def test_the_cli_shows_only_redacted_text(cli_env: None, written: dict[str, str]) -> None:
    commands = [
        ["plans", "show", written["plan"]],
        ["plans", "show", written["plan"], "--json"],
        ["plans", "list", "--json"],
        ["jobs", "show", written["job"]],
        ["jobs", "show", written["job"], "--json"],
        ["jobs", "list"],
        ["jobs", "list", "--json"],
        ["runs", "show", written["paused"], "--json"],
        ["runs", "show", written["failed"]],
        ["runs", "list"],
        ["runs", "list", "--json"],
        ["runs", "findings", written["paused"], "--json"],
    ]
    for args in commands:
        result = CliRunner().invoke(cli_app, args)
        assert result.exit_code == 0, (args, result.output)
        if ("show" in args and args[0] != "plans") or "findings" in args:
            assert REDACTED in result.output, (args, result.output)
        no_token(f"planq {' '.join(args)}", result.output)
    shown = CliRunner().invoke(cli_app, ["jobs", "show", written["job"], "--json"]).output
    assert json.loads(shown)["error_message"] == f"RuntimeError: upstream refused {REDACTED}"
    assert "in custom_token_chain" in json.loads(shown)["error_traceback"]
    table = CliRunner().invoke(cli_app, ["jobs", "show", written["job"]]).output
    assert "error traceback (redacted):" in table and "in custom_token_chain" in table


def test_the_admin_api_and_dashboard_show_only_redacted_text(
    ledger_url: str,
    written: dict[str, str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from planq.cli import context as cli_context

    build = cli_context.build_app

    def with_handlers(settings: Any) -> Any:  # the API's app knows the test's two jobs
        api_app = build(settings)
        register_recoverable_job(api_app, Panics())
        register_recoverable_job(api_app, Fails())
        return api_app

    monkeypatch.setattr(cli_context, "build_app", with_handlers)
    # A handler of the API process's root logger, there before the API is built.
    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    logging.getLogger().addHandler(handler)
    api_logger = logging.getLogger("planq.api")
    monkeypatch.setattr(api_logger, "level", logging.INFO)
    monkeypatch.setattr(api_logger, "disabled", False)
    settings = load_settings(
        broker_url="memory://",
        database_url=ledger_url,
        api_token=TOKEN,
        redaction_patterns=PATTERNS,
    )
    api = ApiServer(settings)
    try:
        paths = [
            f"/api/ledger/jobs/{written['job']}",
            "/api/ledger/jobs",
            f"/api/ledger/plans/{written['plan']}",
            f"/api/admin/jobs/{Panics.name}/runs",
            f"/api/admin/jobs/{Panics.name}/runs/{written['paused']}",
            f"/api/admin/jobs/{Panics.name}/runs/{written['paused']}/findings",
            f"/api/admin/jobs/{Fails.name}/runs/{written['failed']}",
            "/dashboard",
            "/dashboard/fragments/runs",
            f"/dashboard/fragments/findings?run={Panics.name}/{written['paused']}",
        ]
        for path in paths:
            response = api.get(path)
            assert response.status_code == 200, (path, response.text[:500])
            no_token(f"GET {path}", response.text)
        job = api.get(f"/api/ledger/jobs/{written['job']}").json()
        assert REDACTED in json.dumps(job)
        assert "in custom_token_chain" in job["error_traceback"]
        # The API process's log handlers redact with the same patterns (message and args).
        api_logger.warning("upstream said %s", CUSTOM_TOKEN)
        assert f"upstream said {REDACTED}" in stream.getvalue()
        no_token("the API process's log", stream.getvalue())
    finally:
        api.close()
        logging.getLogger().removeHandler(handler)


def test_a_row_the_schema_refuses_is_a_typed_error_naming_the_constraint_not_the_sql(
    ledger_url: str,
) -> None:
    app = make_app("memory://", ledger_url)  # migrates a SQLite file on first use
    try:
        runtime = runtime_for(app)
        plan = Plan.with_steps(["one"], name="refused")
        runtime.plans.add(plan)
        queued = runtime.lifecycle.queue_phase(plan.plan_id, PlanPhase.strategize)
        assert queued.job is not None
        # A terminal row without finished_at passes the domain's field checks; the schema's
        # CHECK refuses it.
        broken = queued.job.model_copy(update={"status": AsyncJobStatus.succeeded})
        with pytest.raises(LedgerRejectedError) as raised:
            runtime.jobs.update(broken)
        assert str(raised.value) == "ledger rejected the write: ck_async_jobs_terminal_finished"
        assert raised.value.__cause__ is None and not raised.value.retryable
        stored = runtime.jobs.get(queued.job.job_id)
        assert stored is not None and stored.status is AsyncJobStatus.queued  # nothing written
    finally:
        reset_runtime(app)


def test_an_embedded_worker_logs_only_redacted_text(
    ledger_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    # The in-process worker (the demo's) sets Celery's logging up too: the filter goes on
    # the handlers it finds (here pytest's), and the executor's logged chain is redacted.
    caplog.set_level(logging.INFO)
    app = make_app(
        "memory://",
        ledger_url,
        default_executor="tests.executors_for_tests:custom_token_chain",
        redaction_patterns=PATTERNS,
    )
    with embedded_runtime(app) as runtime:
        plan = Plan.with_steps(["one"], name="embedded")
        runtime.plans.add(plan)
        job_id = app.tasks["planq.strategize_plan"].delay(plan.plan_id).id
        row = wait_for_status(runtime.jobs, job_id, AsyncJobStatus.failed)
    assert row.error_message == f"RuntimeError: upstream refused {REDACTED}"
    text = caplog.text
    assert "upstream call failed with" in text
    assert "The above exception was the direct cause" in text
    # The engine's own record of the failure: once, ERROR, with the executor's stack.
    (failed,) = [r for r in caplog.records if r.getMessage().startswith(f"job {job_id} failed:")]
    assert failed.levelno == logging.ERROR and "in custom_token_chain" in failed.getMessage()
    no_token("the embedded worker's log", text)


def test_a_rejection_names_the_constraint_or_column_never_the_values(ledger_url: str) -> None:
    db = Database(ledger_url)
    try:
        with db.engine.begin() as conn:
            table = "refusals (a int NOT NULL, b text CONSTRAINT ck_b CHECK (b <> 'refused'))"
            conn.execute(text(f"CREATE TEMP TABLE {table}"))
            reasons = []
            for values in (f"(NULL, '{CUSTOM_TOKEN}')", "(1, 'refused')"):
                with pytest.raises(DBAPIError) as raised, conn.begin_nested():
                    conn.execute(text(f"INSERT INTO refusals VALUES {values}"))
                reasons.append(str(as_rejection(raised.value, "write")))
    finally:
        db.close()
    not_null = "refusals.a" if ledger_url.startswith("sqlite") else "NotNullViolation on a"
    assert reasons == [f"ledger rejected the write: {not_null}", "ledger rejected the write: ck_b"]
    no_token("a rejection", " ".join(reasons))
