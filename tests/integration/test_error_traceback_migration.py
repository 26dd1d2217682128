"""Migration 0006: async_jobs.error_traceback, up and down, on SQLite and PostgreSQL.

test_schema compares the whole schema with the models; this checks the change itself: a
nullable TEXT column that holds a long traceback, gone on the way down with every row
kept, back (NULL for the rows that failed before it) on the way up.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from sqlalchemy import inspect, text

from planq.domain.bounds import MAX_TRACEBACK_LENGTH
from planq.store import Database
from planq.store.migrate import HEAD_REVISION, downgrade, upgrade
from tests.support import create_pg_database, drop_pg_database

INSERT = (
    "INSERT INTO async_jobs (job_id, plan_id, phase, status, schema_version, payload_json, "
    "created_at, finished_at, attempt, dispatch_count, error_message{extra}) VALUES "
    "(:id, 'P0000000000000000000000000', 'execute', 'failed', 1, '{{}}', CURRENT_TIMESTAMP, "
    "CURRENT_TIMESTAMP, 1, 0, 'ValueError: boom'{value})"
)
STACK = "Traceback (most recent call last):\n" + "x" * (MAX_TRACEBACK_LENGTH - 40) + "\n"


@pytest.fixture(params=["sqlite", "postgres"])
def url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    """A fresh database brought to head by the migrations."""
    if request.param == "sqlite":
        made = f"sqlite:///{tmp_path / 'ledger.db'}"
        upgrade(made)
        yield made
        return
    made = create_pg_database()
    try:
        upgrade(made)
        yield made
    finally:
        drop_pg_database(made)


def _columns(db: Database) -> dict[str, dict[str, object]]:
    with db.engine.connect() as conn:
        return {str(c["name"]): dict(c) for c in inspect(conn).get_columns("async_jobs")}


def test_error_traceback_comes_and_goes_with_every_row_kept(url: str) -> None:
    assert HEAD_REVISION >= "0006_error_traceback"  # this migration, or a later head
    db = Database(url)
    try:
        column = _columns(db)["error_traceback"]
        assert column["nullable"] is True
        with db.engine.begin() as conn:
            insert = INSERT.format(extra=", error_traceback", value=", :stack")
            conn.execute(text(insert), {"id": "J1", "stack": STACK})

        downgrade(url, "0005_live_indexes")
        assert "error_traceback" not in _columns(db)
        with db.engine.begin() as conn:  # a row failed before the column existed
            conn.execute(text(INSERT.format(extra="", value="")), {"id": "J2"})

        upgrade(url)
        with db.engine.connect() as conn:
            rows = conn.execute(
                text("SELECT job_id, error_message, error_traceback FROM async_jobs ORDER BY 1")
            ).all()
        assert [tuple(r) for r in rows] == [
            ("J1", "ValueError: boom", None),  # the column was dropped with its text
            ("J2", "ValueError: boom", None),
        ]
    finally:
        db.close()
