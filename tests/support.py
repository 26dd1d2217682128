"""Helpers the test tiers share: throw-away PostgreSQL databases, polling with a deadline."""

from __future__ import annotations

import datetime
import hashlib
import os
import time
import uuid
from collections.abc import Callable
from typing import TypeVar

import psycopg
import pytest
from sqlalchemy import text

from planq.domain.plans import Plan
from planq.store import Database
from planq.store.migrate import MIGRATIONS, upgrade
from tests.resources import REDIS_BASE

T = TypeVar("T")

PG_ADMIN_DSN = os.environ.get(
    "PLANQ_TEST_PG_ADMIN", "postgresql://postgres@127.0.0.1:5432/postgres"
)
REDIS_URL = REDIS_BASE


def _admin() -> psycopg.Connection[tuple[object, ...]]:
    try:
        return psycopg.connect(PG_ADMIN_DSN, autocommit=True, connect_timeout=5)
    except psycopg.OperationalError as exc:  # pragma: no cover - environment failure
        pytest.fail(f"PostgreSQL is required at {PG_ADMIN_DSN} and does not answer: {exc}")


def _url(name: str) -> str:
    return (
        PG_ADMIN_DSN.rsplit("/", 1)[0].replace("postgresql://", "postgresql+psycopg://")
        + "/"
        + name
    )


def create_pg_database(prefix: str = "planq_t", template: str = "template1") -> str:
    """Create a database (empty, or a copy of template) and return its SQLAlchemy URL."""
    name = f"{prefix}_{uuid.uuid4().hex[:10]}"
    with _admin() as conn:
        conn.execute(f'CREATE DATABASE "{name}" TEMPLATE "{template}"')
    return _url(name)


TEMPLATE_PREFIX = "planq_tpl_"


def _template_name() -> str:
    """The template's name: the migrations' digest and today's date (UTC).

    The date, because `upgrade` also lays out the job partitions ahead of today: a copy of
    a template from another day would have another day's partitions.
    """
    digest = hashlib.sha256()
    for path in sorted(MIGRATIONS.rglob("*")):
        if path.is_file() and "__pycache__" not in path.parts:
            digest.update(path.relative_to(MIGRATIONS).as_posix().encode())
            digest.update(path.read_bytes())
    today = datetime.datetime.now(datetime.UTC).strftime("%Y%m%d")
    return f"{TEMPLATE_PREFIX}{digest.hexdigest()[:12]}_{today}"


def _ensure_template() -> str:
    """A database at head to copy, built once for every xdist worker (an advisory lock).

    It is migrated once and kept while the migrations and the day stay the same; an older
    template is dropped when a new one is built.
    """
    name = _template_name()
    with _admin() as conn:
        conn.execute("SELECT pg_advisory_lock(hashtext('planq-test-template'))")
        try:
            found = conn.execute("SELECT 1 FROM pg_database WHERE datname = %s", (name,))
            if found.fetchone() is None:
                building = f"{name}_building"
                conn.execute(f'DROP DATABASE IF EXISTS "{building}" WITH (FORCE)')
                conn.execute(f'CREATE DATABASE "{building}"')
                upgrade(_url(building))
                conn.execute(
                    "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = %s",
                    (building,),
                )
                conn.execute(f'ALTER DATABASE "{building}" RENAME TO "{name}"')
                stale = conn.execute(
                    "SELECT datname FROM pg_database WHERE datname LIKE %s AND datname <> %s",
                    (TEMPLATE_PREFIX + "%", name),
                ).fetchall()
                for (old,) in stale:
                    conn.execute(f'DROP DATABASE IF EXISTS "{old}" WITH (FORCE)')
        finally:
            conn.execute("SELECT pg_advisory_unlock(hashtext('planq-test-template'))")
    return name


_template: str | None = None


def create_migrated_pg_database(prefix: str = "planq_t") -> str:
    """A new database at the migrations' head, copied from the template (not migrated)."""
    global _template
    if _template is None:
        _template = _ensure_template()
    return create_pg_database(prefix, template=_template)


def drop_pg_database(url: str) -> None:
    """Drop a database made by create_pg_database, even with connections left."""
    name = url.rsplit("/", 1)[1]
    with _admin() as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


#: A plan row as every revision's `plans` takes it (migration 0001's columns): for tests that
#: write at an old revision, where the stores' newer plan columns do not exist yet.
_OLD_PLAN = (
    "INSERT INTO plans (plan_id, name, phase, status, spec_json, created_at, updated_at, "
    "version) VALUES (:plan_id, :name, NULL, NULL, :spec_json, :at, :at, 0)"
)


def add_plan_at_any_revision(db: Database, plan: Plan) -> None:
    """Store a new plan (no phase yet) with plain SQL, whatever revision the ledger is at."""
    with db.engine.begin() as conn:
        conn.execute(
            text(_OLD_PLAN),
            {
                "plan_id": plan.plan_id,
                "name": plan.name,
                "spec_json": plan.spec_json,
                "at": plan.created_at,
            },
        )


def wait_for(
    condition: Callable[[], T], timeout: float = 30.0, interval: float = 0.05, what: str = ""
) -> T:
    """Poll condition until it returns something truthy, or fail after timeout seconds."""
    deadline = time.monotonic() + timeout
    while True:
        result = condition()
        if result:
            return result
        if time.monotonic() > deadline:
            pytest.fail(f"timed out after {timeout}s waiting for {what or condition}")
        time.sleep(interval)


#: This xdist worker's main test database (tests/resources.py sets it).
REDIS_TEST_URL = os.environ["PLANQ_TEST_REDIS_URL"]


def flush_redis(url: str = REDIS_TEST_URL) -> None:
    """Empty the test Redis database (fail loudly if Redis does not answer)."""
    import redis

    try:
        redis.Redis.from_url(url, socket_connect_timeout=5).flushdb()
    except redis.RedisError as exc:  # pragma: no cover - environment failure
        pytest.fail(f"Redis is required at {url} and does not answer: {exc}")


def record_reliability(fault: str, jobs: int, lost: int, ran_twice: int, recover_s: float) -> None:
    """Append one fault test's result to $PLANQ_RELIABILITY_LOG (docs/reliability.md's source)."""
    import json

    path = os.environ.get("PLANQ_RELIABILITY_LOG")
    if not path:
        return
    row = {
        "fault": fault,
        "jobs": jobs,
        "lost": lost,
        "ran_twice": ran_twice,
        "time_to_recover_s": round(recover_s, 2),
    }
    with open(path, "a", encoding="utf-8") as fh:
        fh.write(json.dumps(row) + "\n")


def _answers(cmd: list[str], expect: str = "") -> bool:
    import subprocess

    out = subprocess.run(cmd, capture_output=True, text=True, check=False, timeout=10)
    return out.returncode == 0 and expect in out.stdout


def restart_redis() -> None:
    """Stop Redis (it keeps nothing on disk here: every message is lost) and start it again."""
    import subprocess

    subprocess.run(
        ["redis-cli", "-h", "127.0.0.1", "-p", "6379", "shutdown", "nosave"],
        capture_output=True,
        check=False,
        timeout=10,
    )
    wait_for(
        lambda: not _answers(["redis-cli", "-h", "127.0.0.1", "ping"], "PONG"),
        timeout=10,
        what="Redis to stop",
    )
    subprocess.run(
        [
            "redis-server",
            "--daemonize",
            "yes",
            "--bind",
            "127.0.0.1",
            "-::1",
            "--port",
            "6379",
            "--save",
            "",
            "--appendonly",
            "no",
            "--dir",
            "/var/lib/redis",
            "--logfile",
            "/var/log/redis/ci.log",
        ],
        check=True,
        timeout=30,
    )
    wait_for(
        lambda: _answers(["redis-cli", "-h", "127.0.0.1", "ping"], "PONG"),
        timeout=30,
        what="Redis to answer again",
    )


def restart_postgres() -> None:
    """Restart the PostgreSQL cluster (every open connection is cut)."""
    import subprocess

    version = sorted(os.listdir("/etc/postgresql"))[-1]
    subprocess.run(
        ["pg_ctlcluster", "--skip-systemctl-redirect", version, "main", "restart"],
        check=True,
        capture_output=True,
        timeout=120,
    )
    wait_for(
        lambda: _answers(["pg_isready", "-h", "127.0.0.1", "-p", "5432"]),
        timeout=60,
        what="PostgreSQL to answer again",
    )
