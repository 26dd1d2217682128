"""A real `celery -A worker_config worker` refuses to start: one line, a non-zero exit.

Without a usable ledger (PostgreSQL port closed, or an empty database never migrated) a
worker used to print `ready` and take tasks off the shared queues that then failed; with
a bad setting it printed Celery's 20-line "Unable to load celery application" traceback.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from planq.store.migrate import upgrade
from planq.tasks.runtime import reset_runtime
from tests.celery_support import WorkerProcess, make_app, worker_env
from tests.support import REDIS_TEST_URL, create_pg_database, drop_pg_database, flush_redis

pytestmark = pytest.mark.processes

ROOT = Path(__file__).resolve().parents[2]


def celery(args: list[str], **env: str) -> subprocess.CompletedProcess[str]:
    """Run `celery -A worker_config <args>` to its end with only these PLANQ_* settings."""
    base = {k: v for k, v in os.environ.items() if not k.startswith("PLANQ_")}
    base |= {"PYTHONPATH": str(ROOT), "PLANQ_BROKER_URL": REDIS_TEST_URL, **env}
    return subprocess.run(
        [sys.executable, "-m", "celery", "-A", "planq.worker_config", *args],
        env=base,
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )


def worker(**env: str) -> subprocess.CompletedProcess[str]:
    return celery(["worker", "--pool=solo", "--without-mingle", "--without-gossip"], **env)


def only_line(done: subprocess.CompletedProcess[str]) -> str:
    """The process printed exactly one line, on stderr, and nothing on stdout."""
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, done.stderr
    assert done.stdout.strip() == "", done.stdout
    return lines[0]


@pytest.fixture
def empty_pg() -> Iterator[str]:
    """A PostgreSQL database nobody has migrated."""
    url = create_pg_database("planq_preflight")
    yield url
    drop_pg_database(url)


def test_unreachable_ledger_refuses_the_worker(tmp_path: Path) -> None:
    done = worker(PLANQ_DATABASE_URL="postgresql://planq:s3cret@127.0.0.1:1/planq")
    assert done.returncode == 3
    line = only_line(done)
    assert line.startswith(
        "planq worker: cannot start: the ledger at "
        "postgresql://planq:***REDACTED***@127.0.0.1:1/planq cannot be reached: "
    )
    assert "s3cret" not in done.stderr and "ready" not in done.stderr


def test_unmigrated_ledger_refuses_the_worker(empty_pg: str) -> None:
    done = worker(PLANQ_DATABASE_URL=empty_pg)
    assert done.returncode == 3
    name = empty_pg.rsplit("/", 1)[1]
    assert only_line(done) == (
        f"planq worker: cannot start: the ledger at postgresql+psycopg://postgres@127.0.0.1:5432/"
        f"{name} is not migrated (no planq schema): run `planq db upgrade` with this "
        "PLANQ_DATABASE_URL"
    )


def test_the_same_database_once_migrated_starts_a_worker(empty_pg: str, tmp_path: Path) -> None:
    upgrade(empty_pg)
    flush_redis(REDIS_TEST_URL)
    app = make_app(REDIS_TEST_URL, empty_pg)
    process = WorkerProcess(
        worker_env(REDIS_TEST_URL, empty_pg), "preflight", "solo", 1, log_path=tmp_path / "w.log"
    )
    try:
        process.wait_ready(app)  # answers a ping: past the check, consuming
        assert "cannot start" not in process.log_tail()
    finally:
        process.close()
        reset_runtime(app)


def test_a_sqlite_ledger_that_cannot_be_created_refuses_the_worker(tmp_path: Path) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    done = worker(PLANQ_DATABASE_URL=f"sqlite:///{blocker}/ledger.db")
    assert done.returncode == 3
    line = only_line(done)
    assert line == (
        f"planq worker: cannot start: the ledger at sqlite:///{blocker}/ledger.db "
        f"cannot be created: File exists: {blocker}"
    )


def test_an_unknown_executor_refuses_the_worker(tmp_path: Path) -> None:
    done = worker(
        PLANQ_DATABASE_URL=f"sqlite:///{tmp_path / 'ledger.db'}",
        PLANQ_EXECUTORS='{"execute": "no_such_module:run"}',
    )
    assert done.returncode == 2
    line = only_line(done)
    assert line.startswith("planq worker: cannot start: PLANQ_EXECUTORS / PLANQ_DEFAULT_EXECUTOR: ")
    assert "no_such_module" in line


@pytest.mark.parametrize("command", ["worker", "beat", "flower"])
def test_a_bad_setting_is_one_line_and_exit_2_not_celerys_traceback(
    command: str, tmp_path: Path
) -> None:
    done = celery(
        [command],
        PLANQ_DATABASE_URL=f"sqlite:///{tmp_path / 'ledger.db'}",
        PLANQ_HEARTBEAT_INTERVAL="400",
    )
    assert done.returncode == 2
    assert only_line(done) == (
        "planq: invalid setting: PLANQ_HEARTBEAT_INTERVAL=400: must be below "
        "PLANQ_JOB_TIMEOUT (300), or every job looks stuck"
    )


def test_an_unknown_database_driver_is_one_line(tmp_path: Path) -> None:
    done = worker(PLANQ_DATABASE_URL="mysql://x")
    assert done.returncode == 2
    assert only_line(done) == (
        "planq: invalid setting: PLANQ_DATABASE_URL=mysql://x: the ledger runs on SQLite or "
        "PostgreSQL (sqlite:///path, or postgresql:// or postgres://user@host/db), not 'mysql'"
    )
