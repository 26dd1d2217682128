"""Every invalid PLANQ_* value is one line naming the variable and the rule (issue #13).

Values come from the real environment (monkeypatch.setenv), as an operator gives them.
"""

from __future__ import annotations

import logging
import os
import subprocess
import sys
from pathlib import Path

import pytest

from planq.domain.availability import STALE_SWEEPS_PER_WINDOW, stale_sweep_gap
from planq.domain.config import MAX_DURATION, AsyncWorkerConfig
from planq.domain.errors import ConfigurationError
from planq.domain.outage import retry_period
from planq.domain.runs.heartbeat import interval_for
from planq.worker_config import settings as settings_module
from planq.worker_config.settings import load_settings

ROOT = Path(__file__).resolve().parents[2]
SECONDS_RULE = "must be a finite number of seconds above 0 and at most 315360000 (ten years)"
DURATIONS = [
    "job_timeout",
    "job_ttl",
    "heartbeat_interval",
    "poll_interval",
    "dispatch_grace",
    "visibility_timeout",
    "stuck_check_interval",
    "cleanup_interval",
    "relay_interval",
]


@pytest.fixture(autouse=True)
def clean_env(monkeypatch: pytest.MonkeyPatch) -> None:
    """Only what the test sets: no PLANQ_* from the outer environment."""
    for key in [k for k in os.environ if k.startswith("PLANQ_")]:
        monkeypatch.delenv(key)
    monkeypatch.setenv("PLANQ_DATABASE_URL", "sqlite:///unused.db")


def error_for(monkeypatch: pytest.MonkeyPatch, **env: str) -> str:
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    with pytest.raises(ConfigurationError) as caught:
        load_settings()
    message = str(caught.value)
    assert "\n" not in message
    return message


@pytest.mark.parametrize(
    ("env", "line"),
    [
        (
            {"PLANQ_HEARTBEAT_INTERVAL": "400"},
            "PLANQ_HEARTBEAT_INTERVAL=400: must be below PLANQ_JOB_TIMEOUT (300), "
            "or every job looks stuck",
        ),
        (
            {"PLANQ_EXECUTORS": "notjson"},
            'PLANQ_EXECUTORS: must be a JSON object of phase → "module:function" '
            "(phases: strategize, execute, apply), got 'notjson'",
        ),
        (
            {"PLANQ_EXECUTORS": '{"deploy": "pkg:run"}'},
            'PLANQ_EXECUTORS: must be a JSON object of phase → "module:function" '
            '(phases: strategize, execute, apply), got \'{"deploy": "pkg:run"}\'',
        ),
        (
            {"PLANQ_DATABASE_URL": "mysql://x"},
            "PLANQ_DATABASE_URL=mysql://x: the ledger runs on SQLite or PostgreSQL "
            "(sqlite:///path, or postgresql:// or postgres://user@host/db), not 'mysql'",
        ),
        (
            {"PLANQ_DATABASE_URL": "planq.db"},
            "PLANQ_DATABASE_URL=planq.db: must be a database URL, sqlite:///path/planq.db "
            "or postgresql://user@host:5432/planq",
        ),
        (
            {"PLANQ_BROKER_URL": "localhost"},
            "PLANQ_BROKER_URL=localhost: must be a broker URL such as redis://127.0.0.1:6379/0 "
            "or amqp://user@host:5672//",
        ),
        ({"PLANQ_JOB_TIMEOUT": "inf"}, f"PLANQ_JOB_TIMEOUT=inf: {SECONDS_RULE}"),
        ({"PLANQ_JOB_TIMEOUT": "nan"}, f"PLANQ_JOB_TIMEOUT=nan: {SECONDS_RULE}"),
        ({"PLANQ_JOB_TTL": "1e12"}, f"PLANQ_JOB_TTL=1e12: {SECONDS_RULE}"),
        ({"PLANQ_POLL_INTERVAL": "0"}, f"PLANQ_POLL_INTERVAL=0: {SECONDS_RULE}"),
        ({"PLANQ_RELAY_INTERVAL": "soon"}, f"PLANQ_RELAY_INTERVAL=soon: {SECONDS_RULE}"),
        (
            {"PLANQ_MAX_WORKERS": "100000"},
            "PLANQ_MAX_WORKERS=100000: must be a whole number from 1 to 1024",
        ),
        (
            {"PLANQ_MAX_WORKERS": "2.5"},
            "PLANQ_MAX_WORKERS=2.5: must be a whole number from 1 to 1024",
        ),
        ({"PLANQ_MAX_ATTEMPTS": "0"}, "PLANQ_MAX_ATTEMPTS=0: must be a whole number from 1 to 100"),
        (
            {"PLANQ_MAX_DISPATCHES": "5000"},
            "PLANQ_MAX_DISPATCHES=5000: must be a whole number from 1 to 1000",
        ),
        (
            {"PLANQ_METRICS_PORT": "http"},
            "PLANQ_METRICS_PORT=http: must be a whole number from 0 to 65535",
        ),
        (
            {"PLANQ_TASK_SENT_EVENTS": "maybe"},
            "PLANQ_TASK_SENT_EVENTS=maybe: must be true or false",
        ),
        (
            {"PLANQ_RUN_STALE_AFTER": "4.9"},
            "PLANQ_RUN_STALE_AFTER=4.9: must be a finite number of seconds at least 5 "
            "and at most 315360000 (ten years)",
        ),
        (
            {"PLANQ_VISIBILITY_TIMEOUT": "100"},
            "PLANQ_VISIBILITY_TIMEOUT=100: must be above PLANQ_JOB_TIMEOUT (300), "
            "or a long job is delivered twice",
        ),
        (
            {"PLANQ_REDACTION_PATTERNS": "token=.*"},
            "PLANQ_REDACTION_PATTERNS: must be a JSON list of regular expressions, got 'token=.*'",
        ),
        (
            {"PLANQ_REDACTION_PATTERNS": '["("]'},
            "PLANQ_REDACTION_PATTERNS: invalid redaction pattern '(': "
            "missing ), unterminated subpattern at position 0",
        ),
    ],
)
def test_an_invalid_value_is_one_line_naming_the_variable_and_the_rule(
    monkeypatch: pytest.MonkeyPatch, env: dict[str, str], line: str
) -> None:
    assert error_for(monkeypatch, **env) == line


@pytest.mark.parametrize("name", DURATIONS)
@pytest.mark.parametrize("value", ["inf", "-inf", "nan", "1e12", str(MAX_DURATION * 2), "-1"])
def test_every_duration_is_finite_and_bounded(
    monkeypatch: pytest.MonkeyPatch, name: str, value: str
) -> None:
    message = error_for(monkeypatch, **{f"PLANQ_{name.upper()}": value})
    assert message.startswith(f"PLANQ_{name.upper()}={value}: must be")


def test_the_largest_durations_still_load(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in DURATIONS:
        if name != "heartbeat_interval":
            monkeypatch.setenv(f"PLANQ_{name.upper()}", str(MAX_DURATION))
    monkeypatch.setenv("PLANQ_JOB_TIMEOUT", str(MAX_DURATION - 1))
    settings = load_settings()
    assert settings.worker_config().job_ttl == MAX_DURATION
    assert settings.worker_config().job_timeout == MAX_DURATION - 1


def test_a_huge_integer_is_clipped_not_printed_whole(monkeypatch: pytest.MonkeyPatch) -> None:
    message = error_for(monkeypatch, PLANQ_MAX_ATTEMPTS="9" * 4000)
    assert message.startswith("PLANQ_MAX_ATTEMPTS=999")
    assert message.endswith("…: must be a whole number from 1 to 100")
    assert len(message) < 200


def test_a_secret_in_a_url_is_never_echoed(monkeypatch: pytest.MonkeyPatch) -> None:
    message = error_for(monkeypatch, PLANQ_DATABASE_URL="mysql://admin:hunter2@db/planq")
    assert "hunter2" not in message
    assert message.startswith("PLANQ_DATABASE_URL=mysql://admin:")
    assert message.endswith("not 'mysql'")


def test_several_bad_values_are_still_one_line_that_counts_the_rest(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    message = error_for(
        monkeypatch, PLANQ_MAX_WORKERS="0", PLANQ_JOB_TTL="inf", PLANQ_MAX_ATTEMPTS="x"
    )
    assert message.endswith("(and 2 more invalid PLANQ_* settings)")


def test_valid_values_load(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PLANQ_EXECUTORS", '{"execute": "mypkg.jobs:execute", "apply": "noop"}')
    monkeypatch.setenv("PLANQ_REDACTION_PATTERNS", '["token=\\\\S+"]')
    monkeypatch.setenv("PLANQ_DATABASE_URL", "postgresql+psycopg://planq@127.0.0.1:5432/planq")
    monkeypatch.setenv("PLANQ_MAX_WORKERS", "1024")
    settings = load_settings()
    assert settings.executors == {"execute": "mypkg.jobs:execute", "apply": "noop"}
    assert settings.redaction_patterns == ["token=\\S+"]
    assert settings.max_workers == 1024


def test_the_stale_run_bound_keeps_its_default_and_its_floor_keeps_the_heartbeat_meaningful(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    assert load_settings().run_stale_after == 300.0
    monkeypatch.setenv("PLANQ_RUN_STALE_AFTER", "5")
    floor = load_settings().run_stale_after
    assert floor == 5.0
    beat, sweep_every = interval_for(floor), floor / STALE_SWEEPS_PER_WINDOW
    assert beat == pytest.approx(floor / 6) and retry_period(beat) == beat
    gap = stale_sweep_gap(floor)
    assert gap == pytest.approx(0.75 * floor) and gap > sweep_every
    # a run outage the sweep cannot see (shorter than its gap) leaves a beat to renew
    assert gap + beat < floor


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("max_workers", 10**400),
        ("max_workers", 1025),
        ("max_attempts", 101),
        ("max_dispatches", 1001),
        ("job_ttl", 1e12),
        ("job_timeout", float("inf")),
        ("poll_interval", float("nan")),
        ("dispatch_grace", 10**30),
    ],
)
def test_async_worker_config_bounds_every_number(field: str, value: float) -> None:
    with pytest.raises(ConfigurationError, match=field) as caught:
        AsyncWorkerConfig(**{field: value})  # type: ignore[arg-type]
    assert len(str(caught.value)) < 120  # 10**400 is summarised, not printed


def test_unset_database_url_warns_once_naming_the_absolute_sqlite_file(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.delenv("PLANQ_DATABASE_URL")
    monkeypatch.setenv("PLANQ_BROKER_URL", "redis://127.0.0.1:6379/9")
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(settings_module, "_warned_default_ledger", False)
    with caplog.at_level(logging.WARNING, logger="planq.settings"):
        load_settings()
        load_settings()
    warnings = [r.getMessage() for r in caplog.records if r.name == "planq.settings"]
    assert len(warnings) == 1
    assert f"the ledger is the SQLite file {tmp_path / 'planq.db'}" in warnings[0]
    assert warnings[0].startswith("PLANQ_DATABASE_URL is unset")


@pytest.mark.parametrize(
    "env",
    [
        {"PLANQ_BROKER_URL": "memory://"},  # the demo: one process, nothing to share
        {
            "PLANQ_BROKER_URL": "redis://127.0.0.1:6379/9",
            "PLANQ_DATABASE_URL": "sqlite:///planq.db",
        },
    ],
)
def test_no_warning_when_the_ledger_is_chosen_or_private(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture, env: dict[str, str]
) -> None:
    monkeypatch.delenv("PLANQ_DATABASE_URL")
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    monkeypatch.setattr(settings_module, "_warned_default_ledger", False)
    with caplog.at_level(logging.WARNING, logger="planq.settings"):
        load_settings()
    assert not [r for r in caplog.records if r.name == "planq.settings"]


def test_importing_worker_config_with_a_bad_setting_never_exits() -> None:
    """A web app importing planq gets a ConfigurationError it can report, not SystemExit."""
    script = (
        "from planq import worker_config\n"
        "from planq.domain.errors import ConfigurationError\n"
        "try:\n"
        "    worker_config.app\n"
        "except ConfigurationError as exc:\n"
        "    print('caught:', exc)\n"
        "from planq.worker_config import client\n"
        "print('still running')\n"
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith("PLANQ_")}
    env |= {"PLANQ_HEARTBEAT_INTERVAL": "400", "PYTHONPATH": str(ROOT)}
    done = subprocess.run(
        [sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == [
        "caught: PLANQ_HEARTBEAT_INTERVAL=400: must be below PLANQ_JOB_TIMEOUT (300), "
        "or every job looks stuck",
        "still running",
    ]


def test_a_ledger_url_of_ones_own_is_checked_by_the_same_rule() -> None:
    """`planq db upgrade --url` and other callers with a URL of their own."""
    from planq.worker_config.settings import check_database_url

    url = "postgresql://planq@127.0.0.1:5432/planq"
    assert check_database_url(url) == url
    assert check_database_url("sqlite:///ledger.db") == "sqlite:///ledger.db"
    with pytest.raises(ConfigurationError, match=r"^PLANQ_DATABASE_URL=mysql://x: .* not 'mysql'$"):
        check_database_url("mysql://x")


@pytest.mark.parametrize(
    ("given", "read_as"),
    [
        (
            "postgres://planq:pw@db.example:5432/planq",
            "postgresql://planq:pw@db.example:5432/planq",
        ),
        ("POSTGRES://planq@db/planq", "postgresql://planq@db/planq"),
        ("postgres+psycopg://planq@db/planq", "postgresql+psycopg://planq@db/planq"),
        ("postgresql://planq@db/planq", "postgresql://planq@db/planq"),
    ],
)
def test_the_postgres_scheme_hosts_hand_out_is_read_as_postgresql(
    monkeypatch: pytest.MonkeyPatch, given: str, read_as: str
) -> None:
    """Heroku, Render, Supabase, Fly… hand out postgres://; SQLAlchemy knows only postgresql."""
    from planq.store.database import normalise_url
    from planq.worker_config.settings import check_database_url

    monkeypatch.setenv("PLANQ_DATABASE_URL", given)
    assert load_settings().database_url == read_as
    assert check_database_url(given) == read_as
    assert normalise_url(given).startswith("postgresql+psycopg://")  # a Database built directly


def test_a_misspelt_variable_is_warned_about_once_with_the_setting_it_meant(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setattr(settings_module, "_warned_unknown", set())
    monkeypatch.setenv("PLANQ_JOB_TIMOUT", "5")
    monkeypatch.setenv("PLANQ_API_TOKN", "s3cret-value")
    for unrelated in ("PLANQ_WORKER_QUEUES", "PLANQ_TEST_REDIS_URL", "PLANQ_RELIABILITY_LOG"):
        monkeypatch.setenv(unrelated, "x")  # compose's and the harness's own: not typos
    with caplog.at_level(logging.WARNING, logger="planq.settings"):
        settings = load_settings()
        load_settings()  # once per process, not once per load
    assert settings.job_timeout == AsyncWorkerConfig().job_timeout  # ignored, as it says
    lines = [r.getMessage() for r in caplog.records if r.name == "planq.settings"]
    assert lines == [
        "PLANQ_API_TOKN is not a planq setting and is ignored; did you mean PLANQ_API_TOKEN?",
        "PLANQ_JOB_TIMOUT is not a planq setting and is ignored; did you mean PLANQ_JOB_TIMEOUT?",
    ]
    assert "s3cret" not in caplog.text  # the value is never shown


def test_the_cli_says_so_on_one_line(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("PLANQ_")}
    env |= {"PLANQ_DATABASE_URL": f"sqlite:///{tmp_path / 'l.db'}", "PLANQ_MAX_WORKER": "8"}
    planq = Path(sys.executable).with_name("planq")
    done = subprocess.run(
        [str(planq), "plans", "list"], env=env, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    assert done.stderr.strip().splitlines() == [
        "planq: warning: PLANQ_MAX_WORKER is not a planq setting and is ignored; "
        "did you mean PLANQ_MAX_WORKERS?"
    ]
