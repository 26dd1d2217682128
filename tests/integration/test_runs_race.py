"""Concurrent triggers: one non-terminal run per job name, and the losers read the winner."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from datetime import datetime
from typing import Any

import pytest
from sqlalchemy import insert, select

from planq.domain.clock import utcnow
from planq.domain.ids import new_id
from planq.domain.runs import AlreadyActive, Fresh, OpenResult, Resumed, RunStatus, RunStoreProvider
from planq.store.database import Database
from planq.store.models import RecoverableRunModel
from planq.store.runs_memory import InMemoryRunStoreProvider
from planq.store.runs_sql import SqlRunStoreProvider

THREADS = 20


@pytest.fixture(params=["memory", "sqlite", "postgres"])
def provider(request: pytest.FixtureRequest) -> Iterator[RunStoreProvider]:
    """Each backend; PostgreSQL gets a pool big enough for every thread at once."""
    if request.param == "memory":
        yield InMemoryRunStoreProvider()
    elif request.param == "sqlite":
        yield SqlRunStoreProvider(request.getfixturevalue("sqlite_database"))
    else:
        request.getfixturevalue("pg_database")  # empties the tables
        db = Database(request.getfixturevalue("pg_url"), pool_size=THREADS + 2, max_overflow=0)
        yield SqlRunStoreProvider(db)
        db.close()


def race(call: Callable[[int], OpenResult]) -> list[OpenResult]:
    """Run call(i) on THREADS threads released together; every thread must answer."""
    barrier = threading.Barrier(THREADS)
    results: list[OpenResult] = []
    errors: list[BaseException] = []
    lock = threading.Lock()

    def worker(i: int) -> None:
        try:
            barrier.wait(timeout=30)
            result = call(i)
        except BaseException as exc:  # reported below, with the others
            with lock:
                errors.append(exc)
            return
        with lock:
            results.append(result)

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(THREADS)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    assert not any(t.is_alive() for t in threads), "a thread is still blocked"
    assert errors == []
    return results


def test_concurrent_starts_make_exactly_one_run(provider: RunStoreProvider) -> None:
    results = race(lambda i: provider.open_or_start("race", owner=f"w{i}"))

    fresh = [r for r in results if isinstance(r, Fresh)]
    active = [r for r in results if isinstance(r, AlreadyActive)]
    assert len(fresh) == 1 and len(active) == THREADS - 1
    assert {a.run_id for a in active} == {fresh[0].store.run_id}
    assert {a.status for a in active} == {RunStatus.Running}
    assert [r.id for r in provider.list_runs("race")] == [fresh[0].store.run_id]


def test_concurrent_resumes_resume_once(provider: RunStoreProvider) -> None:
    opened = provider.open_or_start("race")
    assert isinstance(opened, Fresh) and opened.store.mark_paused(b"cur")

    results = race(lambda i: provider.open_or_start("race", owner=f"w{i}"))

    resumed = [r for r in results if isinstance(r, Resumed)]
    active = [r for r in results if isinstance(r, AlreadyActive)]
    assert len(resumed) == 1 and len(active) == THREADS - 1
    assert resumed[0].cursor == b"cur" and resumed[0].store.run_id == opened.store.run_id
    assert {a.run_id for a in active} == {opened.store.run_id}
    assert len(provider.list_runs("race")) == 1


class _LosesTheInsertRace(SqlRunStoreProvider):
    """Lets a rival commit a run for the same job name just before this one inserts."""

    def __init__(self, database: Database, rival: Database, rival_status: RunStatus) -> None:
        super().__init__(database)
        self.rival = rival
        self.rival_status = rival_status
        self.rival_id: str | None = None

    def _new_row(
        self, run_id: str, job_name: str, owner: str | None, now: datetime
    ) -> dict[str, Any]:
        if self.rival_id is None:
            self.rival_id = new_id()
            with self.rival.session() as s:
                s.execute(
                    insert(RecoverableRunModel).values(
                        id=self.rival_id,
                        job_name=job_name,
                        status=self.rival_status.value,
                        owner="rival",
                        started_at=utcnow(),
                        last_progress_at=utcnow(),
                        cursor=b"rival",
                        scanned_count=0,
                        finding_count=0,
                        params_json="{}",
                    )
                )
        return super()._new_row(run_id, job_name, owner, now)


@pytest.mark.parametrize(
    ("rival_status", "expected"),
    [(RunStatus.Running, AlreadyActive), (RunStatus.Paused, Resumed)],
)
def test_the_loser_of_the_insert_reads_the_winner_inside_a_transaction(
    pg_database: Database, pg_url: str, rival_status: RunStatus, expected: type
) -> None:
    rival = Database(pg_url)
    provider = _LosesTheInsertRace(pg_database, rival, rival_status)
    try:
        with pg_database.transaction():  # the savepoint keeps the caller's transaction usable
            opened = provider.open_or_start("race", owner="me")
            with pg_database.session() as s:
                rows = s.execute(select(RecoverableRunModel.id, RecoverableRunModel.status))
                stored = {run_id: status for run_id, status in rows}
    finally:
        rival.close()

    assert isinstance(opened, expected)
    assert stored == {provider.rival_id: RunStatus.Running.value}
    if isinstance(opened, Resumed):
        assert opened.store.run_id == provider.rival_id and opened.cursor == b"rival"
    else:
        assert isinstance(opened, AlreadyActive) and opened.run_id == provider.rival_id
