"""Shared fixtures: real PostgreSQL (a throw-away database per session), SQLite files, memory.

A missing service fails the run loudly: nothing here skips.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from pathlib import Path

import pytest
from sqlalchemy import text

from planq.domain.log_redaction import RedactingFilter
from planq.domain.outage import PROCESS_OUTAGES
from planq.domain.ports import JobStore, PlanStore
from planq.store import Database, in_memory_ledger, sql_ledger
from planq.store.migrate import upgrade
from planq.store.models import Base
from tests.support import (
    REDIS_TEST_URL,
    create_migrated_pg_database,
    drop_pg_database,
    flush_redis,
)

#: Markers of the modules that start processes: the long ones, scheduled first.
LONG_MODULE_MARKERS = ("processes", "heavy")


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Modules that start worker processes first, each module's tests kept together in order.

    Under `--dist loadfile` xdist hands modules out in collection order: a 40 s module
    handed out last would run alone at the end while the other workers sit idle (the
    longest-first rule of scheduling). The order is the same in every xdist worker.
    """

    def module(item: pytest.Item) -> str:
        return item.nodeid.split("::", 1)[0]

    long: dict[str, bool] = {}
    for item in items:
        marked = any(item.get_closest_marker(name) for name in LONG_MODULE_MARKERS)
        long[module(item)] = long.get(module(item), False) or marked
    rank = {name: i for i, name in enumerate(long)}
    items.sort(key=lambda item: (not long[module(item)], rank[module(item)]))


@pytest.fixture(autouse=True)
def fresh_outage_monitor() -> None:
    """Each test starts with this process's outage monitor clear, as a fresh process would.

    An outage an earlier test staged (a flaky fake ledger) would otherwise hold this test's
    sweeps off for a timeout (domain/availability.py).
    """
    PROCESS_OUTAGES.reset()


@pytest.fixture(autouse=True)
def root_handlers_unguarded() -> Iterator[None]:
    """Remove the redacting filters a test's Celery logging setup put on the root handlers.

    Those handlers include pytest's own, which live for the session: a filter left on one
    would rewrite every later test's records (exc_info rendered to text) before caplog.
    """
    yield
    for handler in logging.getLogger().handlers:
        for guard in [f for f in handler.filters if isinstance(f, RedactingFilter)]:
            handler.removeFilter(guard)


@pytest.fixture(scope="session")
def pg_url() -> Iterator[str]:
    """A PostgreSQL database at head for the whole session (one per xdist worker)."""
    url = create_migrated_pg_database()
    yield url
    drop_pg_database(url)


@pytest.fixture
def pg_database(pg_url: str) -> Iterator[Database]:
    """The session database, emptied before each test."""
    db = Database(pg_url)
    with db.engine.begin() as conn:
        tables = ", ".join(t.name for t in Base.metadata.sorted_tables)
        conn.execute(text(f"TRUNCATE {tables} CASCADE"))
    yield db
    db.close()


@pytest.fixture
def sqlite_url(tmp_path: Path) -> str:
    """A fresh SQLite ledger file (schema created from the models)."""
    url = f"sqlite:///{tmp_path / 'ledger.db'}"
    db = Database(url)
    Base.metadata.create_all(db.engine)
    db.close()
    return url


@pytest.fixture(params=["sqlite", "postgres"])
def migrated_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    """A fresh database of its own at head: migrated (SQLite) or the migrated template's copy."""
    if request.param == "sqlite":
        made = f"sqlite:///{tmp_path / 'ledger.db'}"
        upgrade(made)
        yield made
        return
    made = create_migrated_pg_database()
    try:
        yield made
    finally:
        drop_pg_database(made)


@pytest.fixture(params=["sqlite", "postgres"])
def ledger_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """A SQLite file (migrated on first use) or the emptied session PostgreSQL database."""
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'ledger-file.db'}"
    request.getfixturevalue("pg_database")
    return str(request.getfixturevalue("pg_url"))


@pytest.fixture
def sqlite_database(sqlite_url: str) -> Iterator[Database]:
    """A Database over a fresh SQLite file."""
    db = Database(sqlite_url)
    yield db
    db.close()


@pytest.fixture(params=["memory", "sqlite", "postgres"])
def stores(request: pytest.FixtureRequest) -> tuple[JobStore, PlanStore]:
    """(job store, plan store) on each backend: one contract, three implementations."""
    if request.param == "memory":
        return in_memory_ledger()
    fixture = "sqlite_database" if request.param == "sqlite" else "pg_database"
    db: Database = request.getfixturevalue(fixture)
    return sql_ledger(db)


@pytest.fixture
def jobs(stores: tuple[JobStore, PlanStore]) -> JobStore:
    """The job store of the current backend."""
    return stores[0]


@pytest.fixture
def plans(stores: tuple[JobStore, PlanStore]) -> PlanStore:
    """The plan store of the current backend."""
    return stores[1]


@pytest.fixture
def redis_url() -> str:
    """The test Redis database, emptied (stale messages from earlier tests removed)."""
    flush_redis(REDIS_TEST_URL)
    return REDIS_TEST_URL
