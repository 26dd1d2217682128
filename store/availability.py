"""SIGHT: a sweep's sighting of the ledger, read and written in one locked transaction.

The rule is the domain's (`domain.availability.next_availability`); this is its storage.
PostgreSQL: the row is locked (SELECT … FOR UPDATE) before the ledger's own clock is read,
so two concurrent sweepers queue on it and the second sees the first's sighting. SQLite:
the block is one BEGIN IMMEDIATE (one writer at a time); the clock is the host's.
"""

from __future__ import annotations

import threading
from datetime import datetime

from sqlalchemy import select, text, update
from sqlalchemy.dialects.postgresql import insert as pg_insert
from sqlalchemy.dialects.sqlite import insert as sqlite_insert
from sqlalchemy.orm import Session

from planq.domain.availability import Availability, check_sweep, next_availability
from planq.domain.clock import as_utc, utcnow
from planq.store.database import Database
from planq.store.models import LedgerAvailabilityModel

A = LedgerAvailabilityModel


def sight_ledger(
    db: Database, sweep: str, max_gap: float, recovered_ago: float | None = None
) -> Availability:
    """Record this sweep's sighting of the ledger; since when the ledger has been available."""
    check_sweep(sweep)
    pg = db.dialect == "postgresql"
    insert = pg_insert if pg else sqlite_insert
    with db.session() as s:
        s.execute(insert(A).values(sweep=sweep).on_conflict_do_nothing())
        row = s.execute(
            select(A.last_seen_at, A.available_since)
            .where(A.sweep == sweep)
            .with_for_update()  # PostgreSQL; SQLite's BEGIN IMMEDIATE already serialises
        ).one()
        now, restarted_at = _clock(s, pg)
        seen = next_availability(
            row.last_seen_at, row.available_since, now, max_gap, restarted_at, recovered_ago
        )
        s.execute(
            update(A)
            .where(A.sweep == sweep)
            .values(last_seen_at=now, available_since=seen.available_since)
        )
        return seen


def last_sighting(db: Database, sweep: str) -> datetime | None:
    """When sweep last sighted the ledger (its row's last_seen_at); None if never."""
    with db.session() as s:
        at = s.scalar(select(A.last_seen_at).where(A.sweep == sweep))
    return None if at is None else as_utc(at)


def _clock(session: Session, pg: bool) -> tuple[datetime, datetime | None]:
    """The ledger's now, and its server's start time (PostgreSQL; SQLite has neither)."""
    if not pg:
        return utcnow(), None
    now, started = session.execute(
        text("SELECT clock_timestamp(), pg_postmaster_start_time()")
    ).one()
    return as_utc(now), as_utc(started)


class MemorySightings:
    """The sighting rows of an in-memory ledger (its process's clock; no server to restart)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._rows: dict[str, tuple[datetime | None, datetime | None]] = {}

    def sight(self, sweep: str, max_gap: float, recovered_ago: float | None = None) -> Availability:
        """Record a sighting now; since when the ledger is available (as `sight_ledger`)."""
        check_sweep(sweep)
        with self._lock:
            last_seen, since = self._rows.get(sweep, (None, None))
            seen = next_availability(last_seen, since, utcnow(), max_gap, None, recovered_ago)
            self._rows[sweep] = (seen.now, seen.available_since)
            return seen

    def last(self, sweep: str) -> datetime | None:
        """When sweep last sighted this ledger; None if never."""
        with self._lock:
            return self._rows.get(sweep, (None, None))[0]
