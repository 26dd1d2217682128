"""A CLI command that finds and then writes opens one database pool, and closes it (issue 35).

Counted, not timed: every `Database` (one engine pool each, two on PostgreSQL's hot path)
a command builds is recorded, and after the command each must have no connection checked
out and its engines disposed. Before, `jobs cancel` built a LedgerReader to find the job
and the runtime's own Database to write, and closed only the second.
"""

from __future__ import annotations

from typing import Any

import pytest

from planq.domain.jobs import AsyncJobStatus
from planq.store import database as database_module
from tests.integration import test_cli as cli_tests

ledger = cli_tests.ledger
env = cli_tests.env
Ledger = cli_tests.Ledger


@pytest.fixture
def databases(monkeypatch: pytest.MonkeyPatch) -> list[Any]:
    """Every Database built while the test runs (the real class, only recorded)."""
    built: list[Any] = []
    original = database_module.Database.__init__

    def recording(self: Any, *args: Any, **kwargs: Any) -> None:
        original(self, *args, **kwargs)
        built.append(self)

    monkeypatch.setattr(database_module.Database, "__init__", recording)
    return built


def closed(db: Any) -> bool:
    """No connection of any of its engines is checked out, and each pool holds none."""
    return all(e.pool.checkedout() == 0 and e.pool.checkedin() == 0 for e in db.engines)


def test_a_find_then_cancel_opens_one_pool_and_closes_it(
    env: dict[str, str], ledger: Ledger, databases: list[Any]
) -> None:
    job = ledger.queued()
    out = cli_tests.ok_json("jobs", "cancel", job.job_id)
    assert out["outcome"] == "cancelled"
    assert ledger.get(job.job_id).status is AsyncJobStatus.cancelled
    assert len(databases) == 1, databases
    assert all(closed(db) for db in databases)


def test_a_find_then_retry_opens_one_pool_and_closes_it(
    env: dict[str, str], ledger: Ledger, databases: list[Any]
) -> None:
    job = ledger.queued()
    cli_tests.ok("jobs", "cancel", job.job_id)
    databases.clear()
    out = cli_tests.ok_json("jobs", "retry", job.job_id)
    assert out["job"]["status"] == "queued"
    assert len(databases) == 1, databases
    assert all(closed(db) for db in databases)


def test_a_listing_opens_one_pool_and_closes_it(
    env: dict[str, str], ledger: Ledger, databases: list[Any]
) -> None:
    ledger.queued()
    assert len(cli_tests.ok_json("jobs", "list")["jobs"]) == 1
    assert len(databases) == 1 and closed(databases[0])
