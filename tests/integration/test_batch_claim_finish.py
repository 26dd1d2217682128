"""The batch claim and finish (group commit) answer per row what the single statements do.

Each scenario is built twice in one ledger: one copy goes through the single statement,
the other through the batch with every other scenario's copy. Per job, both must agree on
who won and on the rows they leave (the job's and its plan's), on memory, SQLite and
PostgreSQL. On PostgreSQL a batch of each kind is ONE statement on the rows' partition,
and one more on the parent for the ids it did not win there (as the singles re-ask).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import pytest
from sqlalchemy import event

from planq.domain.clock import utcnow
from planq.domain.ids import new_id
from planq.domain.jobs import AsyncJob, AsyncJobStatus
from planq.domain.plans import Plan, PlanPhase
from planq.domain.ports import Finish, JobStore, PlanStore
from planq.store import Database, sql_ledger

A, B = "node-a/1", "node-b/2"


def queued(jobs: JobStore, plans: PlanStore) -> AsyncJob:
    """A fresh plan with its strategize job queued (the plan at strategize/queued)."""
    plan = Plan(name="batch")
    plans.add(plan)
    job = AsyncJob(plan_id=plan.plan_id, phase=PlanPhase.strategize)
    assert jobs.queue([job], utcnow()) is not None
    return job


def running(jobs: JobStore, plans: PlanStore, worker_id: str = A) -> AsyncJob:
    job = queued(jobs, plans)
    assert jobs.claim(job.job_id, worker_id, utcnow(), follow_plan=True) is not None
    return job


def cancelled(jobs: JobStore, plans: PlanStore) -> AsyncJob:
    job = queued(jobs, plans)
    assert jobs.cancel_queued(job.job_id, utcnow())
    return job


def succeeded(jobs: JobStore, plans: PlanStore) -> AsyncJob:
    job = running(jobs, plans)
    assert jobs.finish(job.job_id, AsyncJobStatus.succeeded, utcnow(), worker_id=A)
    return job


def unknown(jobs: JobStore, plans: PlanStore) -> AsyncJob:
    return AsyncJob(plan_id=new_id(), phase=PlanPhase.strategize)  # never stored


#: Rows a claim by A meets: it wins only the queued one.
CLAIM_SCENARIOS: dict[str, Callable[[JobStore, PlanStore], AsyncJob]] = {
    "queued": queued,
    "running under another worker": lambda j, p: running(j, p, B),
    "running under this worker": running,
    "cancelled while queued": cancelled,
    "ended": succeeded,
    "unknown": unknown,
}


def row_state(jobs: JobStore, plans: PlanStore, job: AsyncJob) -> tuple[Any, ...]:
    """What a claim or finish leaves: the job's status, holder, error; its plan's status."""
    row = jobs.get(job.job_id)
    plan = plans.get(job.plan_id)
    if row is None:
        return (None,)
    return (
        row.status,
        row.worker_id,
        row.error_message,
        row.error_traceback,
        row.finished_at is not None,
        None if plan is None else (plan.phase, plan.status),
    )


@contextmanager
def statements(jobs: JobStore) -> Iterator[list[str]]:
    """The SQL statements sent while inside (none on memory)."""
    sent: list[str] = []
    db: Database | None = getattr(jobs, "db", None)

    def on_statement(_conn: Any, _cursor: Any, statement: str, *_: Any) -> None:
        sent.append(" ".join(statement.split()))

    engines = db.engines if db is not None else ()
    for engine in engines:
        event.listen(engine, "before_cursor_execute", on_statement)
    try:
        yield sent
    finally:
        for engine in engines:
            event.remove(engine, "before_cursor_execute", on_statement)


def kinds(sent: list[str]) -> list[str]:
    """Each write sent: on a day's "partition" or on the "parent" (the map's read left out)."""
    writes = [s for s in sent if "relpartbound" not in s]
    return ["partition" if "UPDATE async_jobs_p" in s else "parent" for s in writes]


def dialect(jobs: JobStore) -> str:
    db: Database | None = getattr(jobs, "db", None)
    return "memory" if db is None else db.dialect


def test_a_batch_claim_agrees_with_the_single_claim_per_row(
    stores: tuple[JobStore, PlanStore],
) -> None:
    jobs, plans = stores
    alone = {name: make(jobs, plans) for name, make in CLAIM_SCENARIOS.items()}
    batched = {name: make(jobs, plans) for name, make in CLAIM_SCENARIOS.items()}
    now = utcnow()
    single = {name: jobs.claim(job.job_id, A, now, follow_plan=True) for name, job in alone.items()}
    with statements(jobs) as sent:
        many = jobs.claim_many([job.job_id for job in batched.values()], A, now, follow_plan=True)
    if dialect(jobs) == "postgresql":  # the partition's, then the parent's for the losers
        assert kinds(sent) == ["partition", "parent"], sent
    assert len(many) == len(batched)
    for (name, job), claimed in zip(batched.items(), many, strict=True):
        one = single[name]
        assert (claimed is None) == (one is None), name
        if claimed is not None and one is not None:
            assert claimed.job.job_id == job.job_id
            assert claimed.job.status is one.job.status is AsyncJobStatus.running
            assert claimed.job.worker_id == one.job.worker_id == A
            assert (claimed.plan is None) == (one.plan is None), name
            if claimed.plan is not None and one.plan is not None:
                assert claimed.plan.plan_id == job.plan_id
                assert claimed.plan.status is one.plan.status
        assert row_state(jobs, plans, job) == row_state(jobs, plans, alone[name]), name
    assert [c is not None for c in many] == [n == "queued" for n in batched]


def _finish_running(status: AsyncJobStatus, worker: str | None, error: str | None = None) -> Any:
    def make(jobs: JobStore, plans: PlanStore) -> tuple[AsyncJob, Finish]:
        job = running(jobs, plans, A)
        return job, Finish(job.job_id, status, error, "Traceback…" if error else None, worker)

    return make


def _finish_other(build: Callable[[JobStore, PlanStore], AsyncJob], worker: str | None = A) -> Any:
    def make(jobs: JobStore, plans: PlanStore) -> tuple[AsyncJob, Finish]:
        job = build(jobs, plans)
        return job, Finish(job.job_id, AsyncJobStatus.succeeded, None, None, worker)

    return make


#: Finishes by A (or unfenced): each wins only on a row still running under its worker.
FINISH_SCENARIOS: dict[str, Any] = {
    "succeeded": _finish_running(AsyncJobStatus.succeeded, A),
    "failed with its error": _finish_running(AsyncJobStatus.failed, A, "boom"),
    "cancelled": _finish_running(AsyncJobStatus.cancelled, A),
    "succeeded, an error given is dropped": _finish_running(AsyncJobStatus.succeeded, A, "x"),
    "unfenced": _finish_running(AsyncJobStatus.failed, None, "late"),
    "swept: another worker holds it": _finish_other(lambda j, p: running(j, p, B)),
    "still queued": _finish_other(queued),
    "cancelled while queued": _finish_other(cancelled),
    "already ended": _finish_other(succeeded),
    "unknown": _finish_other(unknown),
}


def test_a_batch_finish_agrees_with_the_single_finish_per_row(
    stores: tuple[JobStore, PlanStore],
) -> None:
    jobs, plans = stores
    alone = {name: make(jobs, plans) for name, make in FINISH_SCENARIOS.items()}
    batched = {name: make(jobs, plans) for name, make in FINISH_SCENARIOS.items()}
    now = utcnow()
    single = {
        name: jobs.finish(
            f.job_id,
            f.status,
            now,
            f.error,
            worker_id=f.worker_id,
            follow_plan=True,
            traceback=f.traceback,
        )
        for name, (_, f) in alone.items()
    }
    with statements(jobs) as sent:
        won = jobs.finish_many([f for _, f in batched.values()], now, follow_plan=True)
    if dialect(jobs) == "postgresql":
        assert kinds(sent) == ["partition", "parent"], sent
    for name, (job, _) in batched.items():
        assert (job.job_id in won) is single[name], name
        assert row_state(jobs, plans, job) == row_state(jobs, plans, alone[name][0]), name
    assert len(won) == 5  # the five rows running under their finisher (or unfenced)


def test_a_batch_refuses_an_id_twice_and_writes_nothing(
    stores: tuple[JobStore, PlanStore],
) -> None:
    jobs, plans = stores
    job = queued(jobs, plans)
    with statements(jobs) as sent, pytest.raises(ValueError, match="twice"):
        jobs.claim_many([job.job_id, job.job_id.lower()], A, utcnow())
    finish = Finish(job.job_id, AsyncJobStatus.succeeded, worker_id=A)
    with statements(jobs) as sent2, pytest.raises(ValueError, match="twice"):
        jobs.finish_many([finish, finish], utcnow())
    assert sent == sent2 == []
    stored = jobs.get(job.job_id)
    assert stored is not None and stored.status is AsyncJobStatus.queued


def test_an_empty_batch_sends_nothing(stores: tuple[JobStore, PlanStore]) -> None:
    jobs, _ = stores
    with statements(jobs) as sent:
        assert jobs.claim_many([], A, utcnow()) == []
        assert jobs.finish_many([], utcnow()) == set()
    assert sent == []


@pytest.mark.parametrize("size", [1, 200])
def test_a_batch_claims_and_finishes_every_row_of_a_large_batch(
    pg_database: Database, size: int
) -> None:
    """PostgreSQL: one statement each for 1 and for 200 jobs won (arrays of every size)."""
    jobs, plans = sql_ledger(pg_database)
    made = [queued(jobs, plans) for _ in range(size)]
    ids = [j.job_id for j in made]
    with statements(jobs) as sent:
        claimed = jobs.claim_many(ids, A, utcnow(), follow_plan=True)
        won = jobs.finish_many(
            [Finish(i, AsyncJobStatus.failed, None, None, A) for i in ids],  # all-NULL arrays
            utcnow(),
            follow_plan=True,
        )
    assert kinds(sent) == ["partition", "partition"], sent  # each on the rows' partition
    assert all(c is not None and c.plan is not None for c in claimed)
    assert won == set(ids)
    assert jobs.count(AsyncJobStatus.failed) == size
