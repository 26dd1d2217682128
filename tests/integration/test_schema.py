"""The database itself refuses invalid rows, and migrations equal the models."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext
from sqlalchemy import text
from sqlalchemy.exc import IntegrityError

from planq.store import Database
from planq.store.migrate import upgrade
from planq.store.models import Base
from planq.store.partitions import compare_filters
from tests.support import create_pg_database, drop_pg_database


@pytest.fixture(params=["sqlite", "postgres"])
def migrated_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    if request.param == "sqlite":
        url = f"sqlite:///{tmp_path / 'migrated.db'}"
        upgrade(url)
        yield url
        return
    url = create_pg_database()
    try:
        upgrade(url)
        yield url
    finally:
        drop_pg_database(url)


def test_migrated_schema_equals_models(migrated_url: str) -> None:
    db = Database(migrated_url)
    with db.engine.connect() as conn:
        context = MigrationContext.configure(conn, opts=compare_filters(conn.dialect.name))
        diff = compare_metadata(context, Base.metadata)
    db.close()
    assert diff == []


INSERT = (
    "INSERT INTO async_jobs (job_id, plan_id, phase, status, schema_version, payload_json, "
    "created_at, attempt, dispatch_count, finished_at, worker_id) VALUES "
    "(:id, :plan, :phase, :status, :sv, '{}', CURRENT_TIMESTAMP, :attempt, 0, :fin, :worker)"
)


@pytest.mark.parametrize(
    ("override", "reason"),
    [
        ({"status": "exploded"}, "status"),
        ({"phase": "deploy"}, "phase"),
        ({"sv": 0}, "schema_version"),
        ({"attempt": 0}, "attempt"),
        ({"status": "succeeded", "fin": None}, "terminal without finished_at"),
        ({"status": "running", "worker": None}, "running without a worker"),
    ],
)
def test_check_constraints_reject_invalid_rows(
    migrated_url: str, override: dict[str, object], reason: str
) -> None:
    params: dict[str, object] = {
        "id": "01J00000000000000000000000",
        "plan": "01J00000000000000000000001",
        "phase": "execute",
        "status": "queued",
        "sv": 1,
        "attempt": 1,
        "fin": None,
        "worker": None,
    }
    params.update(override)
    db = Database(migrated_url)
    with pytest.raises(IntegrityError), db.engine.begin() as conn:
        conn.execute(text(INSERT), params)
    with db.engine.connect() as conn:
        assert conn.execute(text("SELECT count(*) FROM async_jobs")).scalar() == 0, reason
    db.close()


@pytest.mark.postgres
def test_a_postgres_scheme_url_opens_the_ledger(pg_url: str) -> None:
    """`postgres://…` (what many hosts hand out) reaches the same PostgreSQL ledger."""
    from planq.worker_config.ledger import LedgerReader
    from planq.worker_config.preflight import check_ledger

    short = "postgres://" + pg_url.split("://", 1)[1]
    check_ledger(short)  # the worker's preflight: reachable and migrated
    reader = LedgerReader(short)  # what the CLI's listings read through
    try:
        assert reader.db.dialect == "postgresql"
        assert reader.db.engine.url.drivername == "postgresql+psycopg"
        assert reader.plans.list_all() is not None
    finally:
        reader.close()
