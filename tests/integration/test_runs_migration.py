"""Migrations 0002/0003 build exactly the run tables of the models; the schema keeps the rules."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path

import pytest
from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext
from sqlalchemy import inspect, text, update
from sqlalchemy.exc import IntegrityError

from planq.domain.clock import utcnow
from planq.domain.runs import Resumed, RunStatus
from planq.store.database import Database
from planq.store.migrate import downgrade, upgrade
from planq.store.models import Base, RecoverableRunModel
from planq.store.partitions import compare_filters
from planq.store.runs_sql import SqlRunStoreProvider
from tests.support import create_pg_database, drop_pg_database

RUN_TABLES = {"recoverable_runs", "run_findings"}

INSERT_RUN = (
    "INSERT INTO recoverable_runs (id, job_name, status, started_at, last_progress_at, "
    "completed_at, scanned_count, finding_count, params_json) VALUES "
    "(:id, :job, :status, CURRENT_TIMESTAMP, CURRENT_TIMESTAMP, :done, 0, 0, '{}')"
)
INSERT_FINDING = (
    "INSERT INTO run_findings (id, run_id, kind, severity, detail_json, created_at) VALUES "
    "(:id, :run, 'k', :severity, '{}', CURRENT_TIMESTAMP)"
)


@pytest.fixture(params=["sqlite", "postgres"])
def migrated(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Database]:
    """A fresh database brought to head by the migrations (not by create_all)."""
    if request.param == "sqlite":
        url = f"sqlite:///{tmp_path / 'runs.db'}"
        upgrade(url)
        db = Database(url)
        yield db
        db.close()
        return
    url = create_pg_database()
    try:
        upgrade(url)
        db = Database(url)
        yield db
        db.close()
    finally:
        drop_pg_database(url)


def uptime(db: Database) -> float:
    """Seconds since the ledger's server started (SQLite: no server, forever)."""
    if db.dialect != "postgresql":
        return float("inf")
    with db.engine.connect() as conn:
        started = conn.execute(text("SELECT pg_postmaster_start_time()")).scalar_one()
    return float((utcnow() - started).total_seconds())


def _run(id_: str, job: str, status: str, done: bool = False) -> dict[str, object]:
    return {"id": id_, "job": job, "status": status, "done": "2026-01-01" if done else None}


def test_autogenerate_finds_no_difference(migrated: Database) -> None:
    with migrated.engine.connect() as conn:
        context = MigrationContext.configure(conn, opts=compare_filters(conn.dialect.name))
        diff = compare_metadata(context, Base.metadata)
        tables = set(inspect(conn).get_table_names())
    assert diff == []
    assert tables >= RUN_TABLES


def test_one_non_terminal_run_per_job_name(migrated: Database) -> None:
    with migrated.engine.begin() as conn:
        conn.execute(text(INSERT_RUN), _run("R1", "scan", "Completed", done=True))
        conn.execute(text(INSERT_RUN), _run("R2", "scan", "Failed", done=True))
        conn.execute(text(INSERT_RUN), _run("R3", "scan", "Paused"))
        conn.execute(text(INSERT_RUN), _run("R4", "other", "Running"))
    for status in ("Running", "Paused", "CancelRequested"):
        with pytest.raises(IntegrityError), migrated.engine.begin() as conn:
            conn.execute(text(INSERT_RUN), _run("R9", "scan", status))
    with migrated.engine.connect() as conn:
        assert conn.execute(text("SELECT count(*) FROM recoverable_runs")).scalar() == 4


@pytest.mark.parametrize(
    ("row", "reason"),
    [
        (_run("R1", "scan", "Exploded"), "unknown status"),
        (_run("R1", "scan", "Completed"), "terminal without completed_at"),
    ],
)
def test_check_constraints_refuse_bad_runs(
    migrated: Database, row: dict[str, object], reason: str
) -> None:
    with pytest.raises(IntegrityError), migrated.engine.begin() as conn:
        conn.execute(text(INSERT_RUN), row)
    with migrated.engine.connect() as conn:
        assert conn.execute(text("SELECT count(*) FROM recoverable_runs")).scalar() == 0, reason


def test_findings_check_severity_and_cascade(migrated: Database) -> None:
    with migrated.engine.begin() as conn:
        conn.execute(text(INSERT_RUN), _run("R1", "scan", "Completed", done=True))
        conn.execute(text(INSERT_FINDING), {"id": "F1", "run": "R1", "severity": "anomaly"})
    with pytest.raises(IntegrityError), migrated.engine.begin() as conn:
        conn.execute(text(INSERT_FINDING), {"id": "F2", "run": "R1", "severity": "meh"})
    with pytest.raises(IntegrityError), migrated.engine.begin() as conn:
        conn.execute(text(INSERT_FINDING), {"id": "F3", "run": "nope", "severity": "anomaly"})
    with migrated.engine.begin() as conn:
        conn.execute(text("DELETE FROM recoverable_runs WHERE id = 'R1'"))
    with migrated.engine.connect() as conn:
        assert conn.execute(text("SELECT count(*) FROM run_findings")).scalar() == 0


def test_downgrade_to_0001_drops_only_the_run_tables(migrated: Database) -> None:
    downgrade(migrated.url, "0001_ledger")
    with migrated.engine.connect() as conn:
        tables = set(inspect(conn).get_table_names())
    assert not tables & RUN_TABLES and {"async_jobs", "plans"} <= tables
    upgrade(migrated.url)
    with migrated.engine.connect() as conn:
        assert set(inspect(conn).get_table_names()) >= RUN_TABLES


def test_0003_adds_the_lease_to_existing_runs_and_downgrades(migrated: Database) -> None:
    downgrade(migrated.url, "0002_runs")
    with migrated.engine.begin() as conn:
        conn.execute(text(INSERT_RUN), _run("R1", "paused_scan", "Paused"))
        conn.execute(text(INSERT_RUN), _run("R2", "old_scan", "Running"))
    upgrade(migrated.url)
    with migrated.engine.connect() as conn:
        rows = conn.execute(
            text("SELECT id, lease_epoch, heartbeat_at FROM recoverable_runs ORDER BY id")
        ).all()
    assert [tuple(r) for r in rows] == [("R1", 0, None), ("R2", 0, None)]

    runs = SqlRunStoreProvider(migrated)
    resumed = runs.open_or_start("paused_scan", owner="w@h")
    assert isinstance(resumed, Resumed) and resumed.store.lease_epoch == 1
    resumed.store.checkpoint(b"c", 1)
    # A pre-0003 run has no heartbeat: its last progress alone decides (old = stale).
    with migrated.session() as s:
        s.execute(
            update(RecoverableRunModel)
            .where(RecoverableRunModel.id == "R2")
            .values(last_progress_at=utcnow() - timedelta(hours=2))
        )
    # Within the ledger's uptime: a stale sweep holds off for stale_after after a server
    # (re)start (domain/availability.py), and PostgreSQL here may have started minutes ago.
    stale = min(3600.0, uptime(migrated) / 2)
    assert runs.boot_recovery_sweep(None, stale_after=stale).run_ids == ("R2",)
    swept = runs.get_run_by_id("R2")
    assert swept is not None and swept.lease_epoch == 1 and swept.status is RunStatus.Paused

    downgrade(migrated.url, "0002_runs")
    with migrated.engine.connect() as conn:
        columns = {c["name"] for c in inspect(conn).get_columns("recoverable_runs")}
    assert "lease_epoch" not in columns and "heartbeat_at" not in columns
    upgrade(migrated.url)
