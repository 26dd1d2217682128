"""The availability rule (domain/availability.py): when a sweep may call a lease expired."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from sqlalchemy import select

from planq.domain.availability import (
    Availability,
    allowed_gap,
    check_sweep,
    next_availability,
    stale_sweep_gap,
)
from planq.domain.errors import BoundsError, WrongTypeError
from planq.domain.ledger import JobLedger
from planq.store import Database, sql_ledger
from planq.store.models import LedgerAvailabilityModel

T0 = datetime(2026, 1, 1, tzinfo=UTC)


def at(seconds: float) -> datetime:
    return T0 + timedelta(seconds=seconds)


def test_the_allowed_gap_is_the_interval_plus_half_of_it_and_at_least_a_second() -> None:
    assert allowed_gap(30) == 45.0  # the default schedule: a sweep may run 15 s late
    assert allowed_gap(1) == 2.0  # a fast schedule: beat's tick and a queue hop
    assert allowed_gap(0.5) == 1.5
    assert stale_sweep_gap(300) == 225.0  # runs: swept every stale_after / 2
    assert stale_sweep_gap(0.001) == 1.001  # any stale_after the sweep accepts has a gap
    for bad in (0, -1.0, float("nan"), float("inf"), 10**400):
        with pytest.raises(BoundsError, match="sweep_interval"):
            allowed_gap(bad)
    for wrong in (True, "30", None):
        with pytest.raises(WrongTypeError, match="sweep_interval"):
            allowed_gap(wrong)  # type: ignore[arg-type]


def test_a_bad_sweep_interval_is_refused_before_the_sighting(sqlite_database: Database) -> None:
    jobs, plans = sql_ledger(sqlite_database)
    with pytest.raises(BoundsError, match="sweep_interval"):
        JobLedger(jobs, plans).expire_stuck(60, sweep_interval=0)
    with sqlite_database.session() as s:
        assert s.scalars(select(LedgerAvailabilityModel)).all() == []  # nothing written


def test_with_no_sighting_on_record_the_ledger_counts_as_available() -> None:
    seen = next_availability(None, None, at(0), 45)
    assert seen == Availability(at(0), None)
    assert seen.available_for(300) and seen.waits(300) == 0.0


def test_sightings_on_schedule_keep_the_stretch_going() -> None:
    seen = next_availability(at(0), at(-600), at(45), 45)  # on the edge: still on schedule
    assert seen.available_since == at(-600) and seen.available_for(600)


def test_a_late_sweep_or_an_outage_starts_the_stretch_again() -> None:
    """Late by more than the allowance: whatever happened meanwhile is unknown: hold off."""
    seen = next_availability(at(0), at(-600), at(45.1), 45)
    assert seen.available_since == at(45.1)
    assert not seen.available_for(10) and seen.waits(10) == 10.0
    later = next_availability(seen.now, seen.available_since, at(75.1), 45)
    assert later.available_since == at(45.1) and later.available_for(10)


def test_a_clock_that_went_backwards_holds_off() -> None:
    seen = next_availability(at(100), None, at(90), 45)
    assert seen.available_since == at(90)


def test_a_server_restart_counts_from_the_restart() -> None:
    seen = next_availability(at(0), None, at(30), 45, restarted_at=at(25))
    assert seen.available_since == at(25) and not seen.available_for(10)
    old = next_availability(at(0), at(-100), at(30), 45, restarted_at=at(-3600))
    assert old.available_since == at(-100)  # an old restart adds nothing


def test_an_outage_the_sweeping_process_saw_counts_from_its_recovery() -> None:
    seen = next_availability(at(0), None, at(30), 45, recovered_ago=4.0)
    assert seen.available_since == at(26)
    during = next_availability(at(0), None, at(30), 45, recovered_ago=0.0)
    assert during.available_since == at(30)
    newest = next_availability(at(0), None, at(30), 45, restarted_at=at(20), recovered_ago=20)
    assert newest.available_since == at(20)


def test_an_unknown_sweep_kind_is_refused() -> None:
    assert check_sweep("jobs") == "jobs"
    for bad in ("nightly", None, 1):
        with pytest.raises(ValueError, match="sweep must be one of"):
            check_sweep(bad)
