"""The runner under group commit, on SQLite and PostgreSQL: 16 jobs on 16 threads at once.

Each test runs sixteen jobs through one `AsyncWorker` whose claims and finishes go through
its group commit (window 50 ms, the most allowed, so a loaded machine still groups them).
The executor holds every job at a barrier until all sixteen run, so their finishes reach
the group commit together. What is asserted is per job, as the single statements would leave
it: who won, what the row says, and that a job that lost its row wrote nothing.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest
from sqlalchemy import event, text

from planq.domain.clock import utcnow
from planq.domain.config import AsyncWorkerConfig
from planq.domain.jobs import AsyncJob, AsyncJobStatus
from planq.domain.plans import Plan, PlanPhase
from planq.domain.ports import JobStore, PlanStore
from planq.store import Database, sql_ledger
from planq.tasks.engine import AsyncWorker, PickupResult
from planq.tasks.executors import JobContext

JOBS = 16
OTHER = "node-b/2"
#: A word an operator's own rule refuses in an error (the refused row of the last test).
FORBIDDEN = "forbidden-word"


@pytest.fixture
def db(migrated_url: str) -> Iterator[Database]:
    """A database of this test's own (a constraint may be added to it)."""
    database = Database(migrated_url)
    yield database
    database.close()


def queue_jobs(jobs: JobStore, plans: PlanStore, count: int = JOBS) -> list[AsyncJob]:
    queued = []
    for i in range(count):
        plan = Plan(name=f"grouped-{i}")
        plans.add(plan)
        job = AsyncJob(plan_id=plan.plan_id, phase=PlanPhase.strategize)
        assert jobs.queue([job], utcnow()) is not None
        queued.append(job)
    return queued


def runner(db: Database, executor: Callable[[JobContext], None]) -> AsyncWorker:
    """A runner on db whose claims and finishes are grouped (window 50 ms)."""
    jobs, plans = sql_ledger(db)
    return AsyncWorker(
        AsyncWorkerConfig(max_workers=JOBS), jobs, executor, plans, group_commit_ms=50.0
    )


def run_all(worker: AsyncWorker, queued: list[AsyncJob]) -> dict[str, PickupResult]:
    with ThreadPoolExecutor(JOBS) as pool:
        results = pool.map(worker.run_job, [job.job_id for job in queued])
    return dict(zip((job.job_id for job in queued), results, strict=True))


class Barrier:
    """Holds every job's body until all have started, then lets `before` act first."""

    def __init__(
        self, before: Callable[[], None] = lambda: None, fail: frozenset[str] = frozenset()
    ) -> None:
        self.barrier = threading.Barrier(JOBS, action=before, timeout=60)
        self.fail = fail  #: job ids whose body raises, its error holding the FORBIDDEN word

    def __call__(self, ctx: JobContext) -> None:
        self.barrier.wait()
        if ctx.job.job_id in self.fail:
            raise RuntimeError(f"upstream said {FORBIDDEN}")


@pytest.fixture
def statements(db: Database) -> Iterator[list[str]]:
    """Every SQL statement sent from here on (first 70 characters, whitespace folded)."""
    sent: list[str] = []
    lock = threading.Lock()

    def on_statement(_conn: Any, _cursor: Any, statement: str, *_: Any) -> None:
        with lock:
            sent.append(" ".join(statement.split())[:70])

    for engine in db.engines:
        event.listen(engine, "before_cursor_execute", on_statement)
    yield sent
    for engine in db.engines:
        event.remove(engine, "before_cursor_execute", on_statement)


def test_sixteen_jobs_claim_and_finish_in_batches_of_one_statement_each(
    db: Database, statements: list[str]
) -> None:
    """The statement guard of the batched path: one statement per batch, per kind.

    PostgreSQL: each claim batch and each finish batch is ONE statement, whatever its size;
    SQLite: one BEGIN IMMEDIATE around the singles' two statements per job.
    """
    worker = runner(db, Barrier())
    queued = queue_jobs(worker.job_store, worker.plan_store)  # type: ignore[arg-type]
    statements.clear()
    try:
        results = run_all(worker, queued)
    finally:
        worker.close()
    sent = list(statements)  # the runner's, before this test reads the rows back
    assert set(results.values()) == {PickupResult.succeeded}
    for job in queued:
        row = worker.job_store.get(job.job_id)
        assert row is not None and row.status is AsyncJobStatus.succeeded
    stats = worker.commits.stats
    claims, finishes = stats.claim_batches, stats.finish_batches
    # Released together, the finishes meet in one batch (mostly all sixteen in one; a
    # loaded machine may let the window close on fewer).
    assert finishes < JOBS and stats.largest >= JOBS // 2, stats
    writes = [s for s in sent if s.startswith(("WITH", "UPDATE", "BEGIN"))]
    reads = [s for s in sent if "relpartbound" in s]  # the partition map, once per process
    assert len(sent) == len(writes) + len(reads) and len(reads) <= 1, sent
    # A batch of one (the first job to claim may find itself alone) is its single statement.
    if db.dialect == "postgresql":  # each on the jobs' partition: per job (claims + 1) / 16
        assert len(writes) == claims + finishes, writes
        assert all("UPDATE async_jobs_p" in s or "unnest" in s for s in writes), writes
    else:  # BEGIN IMMEDIATE per write + the job's CAS + the plan's, per job and kind
        assert len(writes) == claims + finishes + 2 * 2 * JOBS, writes


def test_swept_revoked_and_taken_over_jobs_in_a_batch_learn_they_lost_and_write_nothing(
    db: Database,
) -> None:
    jobs, plans = sql_ledger(db)
    queued = queue_jobs(jobs, plans)
    swept, taken, revoked = queued[3], queued[7], queued[11]
    holder: list[AsyncWorker] = []

    def sweep_and_take_over() -> None:  # while every job is held: the sweeper, a revoke, B
        worker = holder[0]
        assert jobs.finish(swept.job_id, AsyncJobStatus.failed, utcnow(), "heartbeat expired")
        # A terminate-revoke ends the row itself (revoke_bridge), the runner still holding it.
        assert jobs.finish(revoked.job_id, AsyncJobStatus.cancelled, utcnow())
        with db.engine.begin() as conn:  # taken over: B holds the row now (its new claim)
            conn.execute(
                text("UPDATE async_jobs SET worker_id = :b WHERE job_id = :id"),
                {"b": OTHER, "id": taken.job_id},
            )
        assert worker.commits.stats.finish_batches == 0

    worker = runner(db, Barrier(sweep_and_take_over))
    holder.append(worker)
    try:
        results = run_all(worker, queued)
    finally:
        worker.close()
    stats = worker.commits.stats  # every finish went through the group commit, in batches
    assert stats.finished_jobs == JOBS and stats.largest >= JOBS // 2, stats
    assert results[swept.job_id] is PickupResult.finished_elsewhere
    assert results[taken.job_id] is PickupResult.finished_elsewhere
    assert results[revoked.job_id] is PickupResult.finished_elsewhere
    row = jobs.get(revoked.job_id)
    assert row is not None and row.status is AsyncJobStatus.cancelled and row.error_message is None
    row = jobs.get(swept.job_id)
    assert row is not None and row.status is AsyncJobStatus.failed
    assert row.error_message == "heartbeat expired"  # the sweeper's, not overwritten
    row = jobs.get(taken.job_id)
    assert row is not None and row.status is AsyncJobStatus.running and row.worker_id == OTHER
    assert row.finished_at is None
    for job in queued:
        if job not in (swept, taken, revoked):
            assert results[job.job_id] is PickupResult.succeeded
            done = jobs.get(job.job_id)
            assert done is not None and done.status is AsyncJobStatus.succeeded


def refuse(db: Database, word: str) -> None:
    """An operator's own rule the schema enforces: no error may contain word."""
    with db.engine.begin() as conn:
        if db.dialect == "postgresql":
            conn.execute(
                text(
                    "ALTER TABLE async_jobs ADD CONSTRAINT ck_async_jobs_no_word "
                    f"CHECK (error_message IS NULL OR error_message NOT LIKE '%{word}%')"
                )
            )
        else:
            conn.execute(
                text(
                    "CREATE TRIGGER no_word BEFORE UPDATE ON async_jobs "
                    f"WHEN NEW.error_message LIKE '%{word}%' "
                    "BEGIN SELECT RAISE(ABORT, 'CHECK constraint failed: ck_async_jobs_no_word'); "
                    "END"
                )
            )


def test_a_row_the_ledger_refuses_fails_only_its_own_job_in_the_batch(
    db: Database, caplog: pytest.LogCaptureFixture
) -> None:
    refuse(db, FORBIDDEN)
    jobs, plans = sql_ledger(db)
    *queued, refused = queue_jobs(jobs, plans)
    worker = runner(db, Barrier(fail=frozenset({refused.job_id})))
    try:
        results = run_all(worker, [*queued, refused])
    finally:
        worker.close()
    # The refused row's batch held other jobs too; it was written again job by job (the
    # ledger's door), and the refused job's second write (its failure) went through the
    # committer too (a batch of one, if every other job had ended by then).
    failed = [r.getMessage() for r in caplog.records if "writing each job alone" in r.getMessage()]
    assert len(failed) == 1 and not failed[0].startswith("finish of 1 jobs"), failed
    assert worker.commits.stats.finished_jobs == JOBS + 1, worker.commits.stats
    # The batch failed on that one row; each job then wrote alone: fifteen succeeded, and
    # the refused one's second write ended it failed with the refusal, not left running.
    assert results[refused.job_id] is PickupResult.failed
    row = jobs.get(refused.job_id)
    assert row is not None and row.status is AsyncJobStatus.failed
    assert row.error_message == "ledger rejected the finish: ck_async_jobs_no_word"
    for job in queued:
        assert results[job.job_id] is PickupResult.succeeded
        done = jobs.get(job.job_id)
        assert done is not None and done.status is AsyncJobStatus.succeeded
