"""The operator's own redaction pattern holds on every kind of CLI error line (issue 35).

Each kind reaches stderr by its own road: a usage error (click quotes the bad value), bad
input (a domain error echoing an id), a refusal, a four-eyes denial, the ledger or the
broker unreachable (the driver's message names the database or the host), and a library
warning line. Each carries a `tok_…` secret that only PLANQ_REDACTION_PATTERNS knows; none
may reach stderr, on SQLite and PostgreSQL.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import Result

from planq.domain.redaction import REDACTED
from tests.integration import test_cli as cli_tests
from tests.integration.test_cli_pipeline import run_queued

ledger = cli_tests.ledger
env = cli_tests.env
Ledger = cli_tests.Ledger

SECRET = "tok_abc123secret"
PATTERNS = '["tok_[A-Za-z0-9]+"]'


@pytest.fixture(autouse=True)
def site_patterns(env: dict[str, str], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PLANQ_REDACTION_PATTERNS", PATTERNS)


def refused_line(result: Result, code: int) -> str:
    """The command failed with `code` and its stderr never shows the secret; stderr."""
    assert result.exit_code == code, (result.exit_code, result.stdout, result.stderr)
    assert SECRET not in result.stderr and SECRET not in result.stdout
    assert "Traceback" not in result.output
    return result.stderr


def test_a_usage_error_quoting_the_value_is_redacted() -> None:
    shown = refused_line(cli_tests.planq("jobs", "list", "--status", SECRET), 2)
    assert "--status" in shown and REDACTED in shown


def test_bad_input_echoing_an_id_is_redacted() -> None:
    shown = refused_line(cli_tests.planq("plans", "show", SECRET), 2)
    assert REDACTED in shown


def test_a_refusal_naming_the_input_is_redacted() -> None:
    shown = refused_line(cli_tests.planq("tokens", "revoke", SECRET), 1)
    assert "no active principal" in shown and REDACTED in shown


def test_a_four_eyes_denial_naming_the_actor_is_redacted(
    ledger: Ledger, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("LOGNAME", SECRET)  # the actor is cli:USER@HOST
    plan_id = cli_tests.ok_json("plans", "create", "--steps", "a")["plan_id"]
    cli_tests.ok("plans", "run", plan_id, "--through", "execute", "--approve-before", "execute")
    run_queued(ledger, plan_id)
    shown = refused_line(cli_tests.planq("plans", "approve", plan_id), 1)
    assert "forbidden" in shown and "four-eyes" in shown and REDACTED in shown
    assert f"@{socket.gethostname()}" in shown


def test_an_unreachable_ledger_naming_its_database_is_redacted(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("PLANQ_DATABASE_URL", f"postgresql+psycopg://postgres@127.0.0.1/{SECRET}")
    shown = refused_line(cli_tests.planq("plans", "list"), 3)
    assert "ledger" in shown and REDACTED in shown


def test_an_unreachable_broker_naming_its_host_is_redacted(
    ledger: Ledger, monkeypatch: pytest.MonkeyPatch
) -> None:
    plan_id = cli_tests.ok_json("plans", "create", "--steps", "a")["plan_id"]
    monkeypatch.setenv("PLANQ_BROKER_URL", f"redis://{SECRET}.invalid:6379/0")
    shown = refused_line(cli_tests.planq("plans", "run", plan_id), 3)
    assert "broker" in shown and REDACTED in shown


def test_a_warning_line_naming_a_path_is_redacted(tmp_path: Path) -> None:
    """The default ledger's warning names its file: here in a folder called like a secret."""
    folder = tmp_path / SECRET
    folder.mkdir()
    environ = {k: v for k, v in os.environ.items() if k != "PLANQ_DATABASE_URL"}
    planq = Path(sys.executable).parent / "planq"  # a real process: its own log handler
    done = subprocess.run(
        [str(planq), "plans", "list"], cwd=folder, env=environ, capture_output=True, text=True
    )
    assert SECRET not in done.stderr and SECRET not in done.stdout
    assert "PLANQ_DATABASE_URL is unset" in done.stderr and REDACTED in done.stderr
