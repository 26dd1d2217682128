"""Riding out a ledger outage: transient errors are retried within a budget, nothing else is."""

from __future__ import annotations

import pytest
from sqlalchemy import text

from domain.errors import LedgerUnavailableError
from domain.outage import ride_out_outage
from store import Database


def test_a_transient_error_is_retried_until_it_clears() -> None:
    calls: list[int] = []
    slept: list[float] = []

    def flaky() -> str:
        calls.append(1)
        if len(calls) < 3:
            raise LedgerUnavailableError("connection refused")
        return "written"

    assert ride_out_outage(flaky, "test write", budget=10, sleep=slept.append) == "written"
    assert len(calls) == 3 and slept == [0.2, 0.4]


def test_any_other_error_is_raised_at_once() -> None:
    calls: list[int] = []

    def broken() -> None:
        calls.append(1)
        raise AttributeError("'int' object has no attribute 'upper'")

    with pytest.raises(AttributeError):
        ride_out_outage(broken, "test write", budget=10, sleep=lambda _: None)
    assert calls == [1]


def test_a_spent_budget_says_the_ledger_was_unavailable() -> None:
    def down() -> None:
        raise LedgerUnavailableError("connection refused")

    with pytest.raises(LedgerUnavailableError, match="ledger unavailable for 0s during finish X"):
        ride_out_outage(down, "finish X", budget=0.0, sleep=lambda _: None)


def test_an_unreachable_database_is_a_ledger_outage_without_its_password() -> None:
    db = Database(
        "postgresql://planq:s3cr3t@127.0.0.1:1/nowhere", connect_args={"connect_timeout": 2}
    )
    try:
        with pytest.raises(LedgerUnavailableError) as caught, db.session() as s:
            s.execute(text("SELECT 1"))
        assert "s3cr3t" not in str(caught.value)
    finally:
        db.close()


def test_a_data_error_is_not_an_outage(sqlite_database: Database) -> None:
    from sqlalchemy.exc import OperationalError

    with pytest.raises(OperationalError), sqlite_database.session() as s:
        s.execute(text("SELEC 1"))  # sqlite3 reports this as an OperationalError
