"""A SQLite ledger's findings survive every migration's table rebuild.

SQLite cannot alter most of a table in place: Alembic's batch mode copies it, drops the old
one and renames the copy. With foreign keys on, that drop cascades into the rows that point
at the table (a run's findings: `ON DELETE CASCADE`). The migration environment turns
foreign keys off for the migration, as SQLite's own rebuild procedure says, and checks them
after. This walks a ledger from 0002 (the first revision with runs) to head and back.
"""

from __future__ import annotations

from pathlib import Path

from sqlalchemy import text

from planq.store import Database
from planq.store.migrate import downgrade, upgrade

RUN = (
    "INSERT INTO recoverable_runs (id, job_name, status, started_at, last_progress_at, "
    "completed_at, scanned_count, finding_count, params_json) VALUES "
    "('R0000000000000000000000001', 'scan', 'Completed', CURRENT_TIMESTAMP, CURRENT_TIMESTAMP, "
    "CURRENT_TIMESTAMP, 0, 3, '{}')"
)
FINDING = (
    "INSERT INTO run_findings (id, run_id, kind, severity, resource_id, detail_json, "
    "created_at) VALUES (:id, 'R0000000000000000000000001', 'k', 'anomaly', 'r', '{}', "
    "CURRENT_TIMESTAMP)"
)


def _findings(db: Database) -> int:
    with db.engine.connect() as conn:
        return int(conn.execute(text("SELECT count(*) FROM run_findings")).scalar_one())


def test_findings_survive_the_upgrade_from_the_first_runs_revision_and_back(
    tmp_path: Path,
) -> None:
    url = f"sqlite:///{tmp_path / 'old.db'}"
    upgrade(url, "0002_runs")
    db = Database(url)
    try:
        with db.engine.begin() as conn:
            conn.execute(text(RUN))
            for n in range(3):
                conn.execute(text(FINDING), {"id": f"F{n}".ljust(26, "0")})
        upgrade(url)
        assert _findings(db) == 3
        downgrade(url, "0002_runs")
        assert _findings(db) == 3
    finally:
        db.close()
