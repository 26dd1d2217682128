"""Migration 0008: the plan pipeline's columns and plan_events, up and down, every plan kept.

test_schema compares the whole schema with the models; this checks the change itself on
SQLite and PostgreSQL: a plan and its events written at head, the columns and the table
gone on the way down with the plan kept, back (NULL: no pipeline) on the way up.
"""

from __future__ import annotations

import pytest
from sqlalchemy import inspect, text

from planq.store import Database
from planq.store.migrate import downgrade, upgrade

PLAN = (
    "INSERT INTO plans (plan_id, name, phase, status, spec_json, created_at, updated_at, "
    "version{extra}) VALUES ('P0000000000000000000000000', 'p', 'execute', 'complete', "
    "'{{}}', CURRENT_TIMESTAMP, CURRENT_TIMESTAMP, 3{value})"
)
EVENT = (
    "INSERT INTO plan_events (event_id, plan_id, at, kind, phase, actor, note) VALUES "
    "('E0000000000000000000000000', 'P0000000000000000000000000', CURRENT_TIMESTAMP, "
    "'awaiting_approval', 'apply', NULL, NULL)"
)
PIPELINE = ["pipeline_through", "pipeline_gate", "pipeline_state"]


def _plan_columns(db: Database) -> list[str]:
    with db.engine.connect() as conn:
        return [str(c["name"]) for c in inspect(conn).get_columns("plans")]


def _tables(db: Database) -> list[str]:
    with db.engine.connect() as conn:
        return list(inspect(conn).get_table_names())


def test_the_pipeline_comes_and_goes_with_every_plan_kept(migrated_url: str) -> None:
    db = Database(migrated_url)
    try:
        assert all(c in _plan_columns(db) for c in PIPELINE) and "plan_events" in _tables(db)
        with db.engine.begin() as conn:
            extra = ", " + ", ".join(PIPELINE)
            conn.execute(text(PLAN.format(extra=extra, value=", 'apply', 'apply', 'done'")))
            conn.execute(text(EVENT))
            bad = EVENT.replace("'awaiting_approval'", "'teleported'").replace("E000", "E001")
            with pytest.raises(Exception, match="ck_plan_events_kind"), conn.begin_nested():
                conn.execute(text(bad))

        downgrade(migrated_url, "0006_error_traceback")
        assert not any(c in _plan_columns(db) for c in PIPELINE)
        assert "plan_events" not in _tables(db)

        upgrade(migrated_url)
        with db.engine.connect() as conn:
            rows = conn.execute(
                text("SELECT plan_id, version, pipeline_state, pipeline_through FROM plans")
            ).all()
            events = conn.execute(text("SELECT count(*) FROM plan_events")).scalar_one()
        assert [tuple(r) for r in rows] == [("P0000000000000000000000000", 3, None, None)]
        assert events == 0
    finally:
        db.close()
