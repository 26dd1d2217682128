"""The user's traceback is kept (issue 19, item 2), redacted and bounded, on every surface.

A real in-process Celery worker (threads pool, the demo's EmbeddedWorker) runs a job whose
executor calls a user's helper that raises with a built-in-pattern secret and a custom
PLANQ_REDACTION_PATTERNS one in its message. The helper's name and line are in the row's
`error_traceback`, in what Celery hands its task-failed event (Flower's task page), in
`AsyncResult.traceback`, in `planq jobs show` (table and `--json`), in the admin API's job
and in the worker's log, once, with the stack; neither secret is in any of them. A traceback
far over the bound (deep recursion) is stored within it, head and last frames kept. The
real-process Flower page is checked in tests/acceptance/test_custom_redaction.py.
"""

from __future__ import annotations

import html
import inspect
import json
import logging
import os
import re
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from celery import Celery
from celery.signals import task_failure
from celery.utils.saferepr import saferepr
from typer.testing import CliRunner

from planq.cli.main import app as cli_app
from planq.domain.bounds import MAX_TRACEBACK_LENGTH
from planq.domain.jobs import AsyncJob, AsyncJobStatus
from planq.domain.plans import Plan
from planq.domain.redaction import REDACTED
from planq.tasks.runtime import reset_runtime
from planq.worker_config.settings import load_settings
from tests import executors_for_tests
from tests.api_support import TOKEN, ApiServer
from tests.celery_support import embedded_runtime, make_app, wait_for_status
from tests.executors_for_tests import DEEP, TRACEBACK_PASSWORD, TRACEBACK_TOKEN

PATTERNS = '["tok_[A-Za-z0-9]+"]'
EXEC = "tests.executors_for_tests"
STRATEGIZE = "planq.strategize_plan"


def raise_line() -> int:
    """The line of parse_user_row's `raise`: what the stored traceback must point at."""
    lines, first = inspect.getsourcelines(executors_for_tests.parse_user_row)
    return first + next(i for i, line in enumerate(lines) if "raise ValueError(" in line)


USER_FRAME = f'executors_for_tests.py", line {raise_line()}, in parse_user_row'


def no_secret(where: str, shown: str) -> None:
    """Neither secret, nor any tok_… at all, in shown."""
    leaked = [s for s in (TRACEBACK_PASSWORD, TRACEBACK_TOKEN) if s in shown]
    assert not leaked, f"{where} shows {leaked}:\n{shown[-3000:]}"
    assert re.search(r"tok_[A-Za-z0-9]", shown) is None, f"{where}:\n{shown[-3000:]}"


def shows_the_user_frame(where: str, shown: str) -> None:
    """The user's helper (file, line, name), its caller, and the redacted message."""
    assert USER_FRAME in shown, f"{where} lacks {USER_FRAME!r}:\n{shown[-3000:]}"
    assert "in user_bug" in shown, where
    assert f"password={REDACTED} token {REDACTED}" in shown, where
    no_secret(where, shown)


@pytest.fixture
def apps(ledger_url: str) -> Iterator[Callable[[str], Celery]]:
    """Apps (planq) whose executor is the named user one; the custom pattern on."""
    made: list[Celery] = []

    def build(executor: str) -> Celery:
        app = make_app(
            "memory://",
            ledger_url,
            redaction_patterns=PATTERNS,
            default_executor=f"{EXEC}:{executor}",
        )
        made.append(app)
        return app

    yield build
    for app in made:
        reset_runtime(app)


@pytest.fixture
def failed_events() -> Iterator[list[Any]]:
    """Every task failure Celery reports: its einfo is what the task-failed event carries."""
    seen: list[Any] = []

    def record(sender: Any = None, einfo: Any = None, **_: Any) -> None:
        seen.append(einfo)

    task_failure.connect(record, weak=False)
    yield seen
    task_failure.disconnect(record)


def run_failing(app: Celery, name: str) -> AsyncJob:
    """Queue a plan's strategize through the producer; the row once the worker failed it."""
    with embedded_runtime(app) as runtime:
        plan = Plan.with_steps(["one"], name=name)
        runtime.plans.add(plan)
        job_id = app.tasks[STRATEGIZE].delay(plan.plan_id).id
        row: AsyncJob = wait_for_status(runtime.jobs, job_id, AsyncJobStatus.failed)
    return row


def test_the_users_frame_is_kept_and_redacted_on_every_surface(
    apps: Callable[[str], Celery],
    ledger_url: str,
    failed_events: list[Any],
    caplog: pytest.LogCaptureFixture,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    caplog.set_level(logging.INFO)
    app = apps("user_bug")
    row = run_failing(app, "user bug")
    stored = row.error_traceback
    assert stored is not None and stored.startswith("Traceback (most recent call last):")
    assert stored.rstrip().endswith(row.error_message or "-")  # the line, as the row has it
    shows_the_user_frame("the row's error_traceback", stored)

    # Flower: the task-failed event's traceback shows the user's frames above planq's,
    # and its one-line exception stays the row's error.
    (einfo,) = failed_events
    shows_the_user_frame("the task-failed event's traceback", einfo.traceback)
    assert stored.rstrip() in einfo.traceback
    assert einfo.traceback.rstrip().endswith(f"PhaseJobFailed: {row.error_message}")
    assert saferepr(einfo.exception) == f"PhaseJobFailed({row.error_message!r})"

    # AsyncResult.traceback is the row's.
    assert app.AsyncResult(row.job_id).traceback == stored

    # The worker logged the failure once, with the stack.
    failures = [r for r in caplog.records if r.name == "planq.worker" and "failed:" in r.msg]
    assert len(failures) == 1 and failures[0].levelno == logging.ERROR, failures
    shows_the_user_frame("the worker's log record", failures[0].getMessage())
    no_secret("the whole log", caplog.text)

    # planq jobs show, as a table and as JSON.
    for key in [k for k in os.environ if k.startswith("PLANQ_")]:
        monkeypatch.delenv(key)
    monkeypatch.setenv("PLANQ_DATABASE_URL", ledger_url)
    monkeypatch.setenv("PLANQ_BROKER_URL", "memory://")
    monkeypatch.setenv("PLANQ_REDACTION_PATTERNS", PATTERNS)
    shown = CliRunner().invoke(cli_app, ["jobs", "show", row.job_id])
    assert shown.exit_code == 0, shown.output
    assert "error traceback (redacted):" in shown.output
    shows_the_user_frame("planq jobs show", shown.output)
    as_json = CliRunner().invoke(cli_app, ["jobs", "show", row.job_id, "--json"])
    assert as_json.exit_code == 0, as_json.output
    assert json.loads(as_json.output)["error_traceback"] == stored
    listed = CliRunner().invoke(cli_app, ["jobs", "list", "--json"])
    assert "error_traceback" not in listed.output  # one job's view only: up to 16 KiB each

    # The admin API's job view.
    settings = load_settings(
        broker_url="memory://",
        database_url=ledger_url,
        api_token=TOKEN,
        redaction_patterns=PATTERNS,
    )
    api = ApiServer(settings)
    try:
        response = api.get(f"/api/ledger/jobs/{row.job_id}")
        assert response.status_code == 200, response.text[:500]
        assert response.json()["error_traceback"] == stored
        no_secret("GET /api/ledger/jobs/{id}", response.text)
        # The dashboard's job page shows it too, escaped, under its label.
        page = api.get(f"/dashboard/fragments/job/{row.job_id}")  # the page loads it
        assert page.status_code == 200, page.text[:500]
        assert "Traceback (redacted)" in page.text
        shows_the_user_frame("the dashboard's job page", html.unescape(page.text))
    finally:
        api.close()


def test_a_deep_recursion_traceback_is_stored_within_the_bound(
    apps: Callable[[str], Celery], failed_events: list[Any]
) -> None:
    app = apps("deep_user_bug")
    row = run_failing(app, "deep")
    stored = row.error_traceback
    assert stored is not None and len(stored) <= MAX_TRACEBACK_LENGTH
    # Far more was raised: 2 frames (4 lines) per level, none folded by Python.
    assert stored.count("in _descend") + stored.count("in _ascend") < DEEP
    assert re.search(r"\[\.\.\. \d+ characters \(\d+ lines\) of the traceback cut", stored)
    head, tail = stored.split(" of the traceback cut by planq ...]")
    assert head.startswith("Traceback (most recent call last):")
    assert "in deep_user_bug" in head  # the outermost frames: where the user's code starts
    assert USER_FRAME in tail  # the innermost: where it went wrong, and the error itself
    assert tail.rstrip().endswith(f"password={REDACTED} token {REDACTED}")
    no_secret("the bounded traceback", stored)
    assert app.AsyncResult(row.job_id).traceback == stored
    (einfo,) = failed_events  # Flower's traceback: the same bounded text, then planq's frames
    assert stored.rstrip() in einfo.traceback
