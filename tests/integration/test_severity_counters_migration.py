"""Migration 0009: per-severity finding counters on the run row, backfilled, up and down.

Runs and findings written before the migration get their counters from their findings in
one statement; a run without findings stays at zero; the way down drops the columns with
every run and finding kept. SQLite and PostgreSQL.
"""

from __future__ import annotations

from alembic.script import ScriptDirectory
from sqlalchemy import inspect, text

from planq.store import Database
from planq.store.migrate import alembic_config, downgrade, upgrade

REVISION = "0009_severity_counters"
COUNTERS = ("data_loss_findings", "inconsistent_findings", "anomaly_findings")
RUN = (
    "INSERT INTO recoverable_runs (id, job_name, status, started_at, last_progress_at, "
    "completed_at, scanned_count, finding_count, params_json, lease_epoch) VALUES "
    "(:id, :name, 'Completed', CURRENT_TIMESTAMP, CURRENT_TIMESTAMP, CURRENT_TIMESTAMP, 0, "
    ":found, '{}', 1)"
)
FINDING = (
    "INSERT INTO run_findings (id, run_id, kind, severity, resource_id, detail_json, "
    "created_at) VALUES (:id, :run, 'k', :severity, 'r', '{}', CURRENT_TIMESTAMP)"
)


def _run_columns(db: Database) -> set[str]:
    with db.engine.connect() as conn:
        return {str(c["name"]) for c in inspect(conn).get_columns("recoverable_runs")}


def test_counters_are_backfilled_from_the_findings_and_dropped_on_the_way_down(
    migrated_url: str,
) -> None:
    before = ScriptDirectory.from_config(alembic_config(migrated_url)).get_revision(REVISION)
    assert before is not None and isinstance(before.down_revision, str)
    downgrade(migrated_url, before.down_revision)
    db = Database(migrated_url)
    try:
        assert not _run_columns(db) & set(COUNTERS)
        severities = ["data_loss"] * 2 + ["anomaly"] * 5
        with db.engine.begin() as conn:
            conn.execute(text(RUN), {"id": "R1".ljust(26, "0"), "name": "a", "found": 7})
            conn.execute(text(RUN), {"id": "R2".ljust(26, "0"), "name": "b", "found": 0})
            for n, severity in enumerate(severities):
                conn.execute(
                    text(FINDING),
                    {
                        "id": f"F{n}".ljust(26, "0"),
                        "run": "R1".ljust(26, "0"),
                        "severity": severity,
                    },
                )
        upgrade(migrated_url)
        with db.engine.connect() as conn:
            rows = conn.execute(
                text(f"SELECT id, {', '.join(COUNTERS)} FROM recoverable_runs ORDER BY id")
            ).all()
        assert [tuple(r) for r in rows] == [
            ("R1".ljust(26, "0"), 2, 0, 5),
            ("R2".ljust(26, "0"), 0, 0, 0),
        ]
        downgrade(migrated_url, before.down_revision)
        assert not _run_columns(db) & set(COUNTERS)
        with db.engine.connect() as conn:
            kept = conn.execute(text("SELECT count(*) FROM run_findings")).scalar_one()
        assert kept == len(severities)
        upgrade(migrated_url)
        assert set(COUNTERS) <= _run_columns(db)
    finally:
        db.close()
