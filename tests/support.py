"""Helpers the test tiers share: throw-away PostgreSQL databases, polling with a deadline."""

from __future__ import annotations

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

T = TypeVar("T")

PG_ADMIN_DSN = os.environ.get(
    "PLANQ_TEST_PG_ADMIN", "postgresql://postgres@127.0.0.1:5432/postgres"
)
REDIS_URL = os.environ.get("PLANQ_TEST_REDIS", "redis://127.0.0.1:6379")


def _admin() -> psycopg.Connection[tuple[object, ...]]:
    try:
        return psycopg.connect(PG_ADMIN_DSN, autocommit=True, connect_timeout=5)
    except psycopg.OperationalError as exc:  # pragma: no cover - environment failure
        pytest.fail(f"PostgreSQL is required at {PG_ADMIN_DSN} and does not answer: {exc}")


def create_pg_database(prefix: str = "planq_t") -> str:
    """Create an empty database and return its SQLAlchemy URL."""
    name = f"{prefix}_{uuid.uuid4().hex[:10]}"
    with _admin() as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    return (
        PG_ADMIN_DSN.rsplit("/", 1)[0].replace("postgresql://", "postgresql+psycopg://")
        + "/"
        + name
    )


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


REDIS_TEST_URL = os.environ.get("PLANQ_TEST_REDIS_URL", "redis://127.0.0.1:6379/13")


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
