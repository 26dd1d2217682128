"""Newest-first pages and their counts, on memory, SQLite and PostgreSQL (what listings read).

`list_recent` and `count` share one filter, so "showing N of M" can never disagree with the
rows shown; the oldest-first lists the dispatch poller reads are left as they were.
"""

from __future__ import annotations

from datetime import timedelta

from planq.domain.clock import utcnow
from planq.domain.jobs import AsyncJob, AsyncJobStatus
from planq.domain.plans import Plan, PlanPhase
from planq.domain.ports import JobStore, PlanStore
from planq.domain.runs import Fresh
from planq.store import Database, InMemoryRunStoreProvider, SqlRunStoreProvider


def _plans(plans: PlanStore, n: int) -> list[Plan]:
    """Make n plans, one second apart, oldest first."""
    start = utcnow() - timedelta(hours=1)
    made = []
    for i in range(n):
        plan = Plan.with_steps(["a"], name=f"p{i}")
        plan.created_at = plan.updated_at = start + timedelta(seconds=i)
        plans.add(plan)
        made.append(plan)
    return made


def _jobs(jobs: JobStore, plan: Plan, statuses: list[AsyncJobStatus]) -> list[AsyncJob]:
    """One job per status for plan, one second apart, oldest first."""
    start = utcnow() - timedelta(hours=1)
    made = []
    for i, status in enumerate(statuses):
        job = AsyncJob(plan_id=plan.plan_id, phase=PlanPhase.strategize)
        job.created_at = start + timedelta(seconds=i)
        jobs.add(job)
        if status is not AsyncJobStatus.queued:
            stored = jobs.get(job.job_id)
            assert stored is not None
            stored.status = status
            stored.worker_id = "w-1"
            stored.started_at = stored.created_at
            if status is not AsyncJobStatus.running:
                stored.finished_at = stored.created_at
            jobs.update(stored)
        made.append(job)
    return made


def test_plans_page_newest_first_with_the_total(plans: PlanStore) -> None:
    made = _plans(plans, 5)
    newest = [p.plan_id for p in reversed(made)]
    assert [p.plan_id for p in plans.list_recent(2)] == newest[:2]
    assert [p.plan_id for p in plans.list_recent(2, offset=2)] == newest[2:4]
    assert [p.plan_id for p in plans.list_recent(10, offset=4)] == newest[4:]
    assert plans.list_recent(3, offset=5) == []
    assert plans.count() == 5
    assert [p.plan_id for p in plans.list_all()] == [p.plan_id for p in made]  # unchanged


def test_plans_page_by_key(plans: PlanStore) -> None:
    made = _plans(plans, 7)
    newest = [p.plan_id for p in reversed(made)]
    pages, after = [], None
    while True:  # walk the whole listing three rows at a time by its cursor
        page = plans.list_recent(3, after=after)
        if not page:
            break
        pages.append([p.plan_id for p in page])
        after = page[-1].plan_id
    assert pages == [newest[0:3], newest[3:6], newest[6:]]
    assert [p.plan_id for p in plans.list_recent(2, after=newest[1].lower())] == newest[2:4]
    assert [p.plan_id for p in plans.list_recent(1, 1, newest[0])] == [newest[2]]
    newer = Plan.with_steps(["a"], name="newer")  # a plan added meanwhile shifts no page
    plans.add(newer)
    assert [p.plan_id for p in plans.list_recent(3, after=newest[2])] == newest[3:6]
    assert plans.remove(newest[2])
    assert plans.list_recent(3, after=newest[2]) == []  # the cursor's row is gone


def test_jobs_page_and_count_share_one_filter(jobs: JobStore, plans: PlanStore) -> None:
    first, second = _plans(plans, 2)
    q, r, f = AsyncJobStatus.queued, AsyncJobStatus.running, AsyncJobStatus.failed
    mine = _jobs(jobs, first, [q, f, q, r])
    other = _jobs(jobs, second, [f])
    everything = sorted(mine + other, key=lambda j: (j.created_at, j.job_id), reverse=True)

    assert [j.job_id for j in jobs.list_recent()] == [j.job_id for j in everything]
    assert jobs.count() == 5
    queued = jobs.list_recent(q)
    assert [j.job_id for j in queued] == [mine[2].job_id, mine[0].job_id]
    assert jobs.count(q) == 2
    of_first = jobs.list_recent(plan_id=first.plan_id.lower(), limit=2, offset=1)
    assert [j.job_id for j in of_first] == [mine[2].job_id, mine[1].job_id]
    assert jobs.count(plan_id=first.plan_id) == 4
    both = jobs.list_recent(f, first.plan_id)
    assert [j.job_id for j in both] == [mine[1].job_id]
    assert jobs.count(f, first.plan_id) == 1 and jobs.count(f) == 2
    assert (
        jobs.list_recent(AsyncJobStatus.cancelled) == []
        and jobs.count(AsyncJobStatus.cancelled) == 0
    )


def test_jobs_page_by_key_and_bounded_counts(jobs: JobStore, plans: PlanStore) -> None:
    (plan,) = _plans(plans, 1)
    q, f = AsyncJobStatus.queued, AsyncJobStatus.failed
    statuses = [q, f, q, f, q, f, q]
    made = _jobs(jobs, plan, statuses)
    newest = [j.job_id for j in reversed(made)]

    pages, after = [], None
    while True:  # walk the whole listing three rows at a time by its cursor
        page = jobs.list_recent(limit=3, after=after)
        if not page:
            break
        pages.append([j.job_id for j in page])
        after = page[-1].job_id
    assert pages == [newest[0:3], newest[3:6], newest[6:]]
    failed = [j.job_id for j, s in reversed(list(zip(made, statuses, strict=True))) if s is f]
    assert [j.job_id for j in jobs.list_recent(f, after=failed[0].lower())] == failed[1:]
    assert [j.job_id for j in jobs.list_recent(q, plan.plan_id, 1, 1, newest[0])] == [newest[4]]
    assert jobs.list_recent(after=newest[-1]) == []
    gone = made[-1].job_id
    assert jobs.remove(gone)
    assert jobs.list_recent(after=gone) == []  # a cursor whose row is gone: nothing follows

    assert jobs.count(at_most=3) == 3 and jobs.count(at_most=100) == 6 == jobs.count()
    assert jobs.count(f, at_most=2) == 2 and jobs.count(q, plan.plan_id, at_most=10) == 3
    assert plans.count(at_most=1) == 1 and plans.count(at_most=5) == 1 == plans.count()


def test_runs_count_matches_list_runs(sqlite_database: Database) -> None:
    for provider in (SqlRunStoreProvider(sqlite_database), InMemoryRunStoreProvider()):
        for name in ("scan_a", "scan_a", "scan_b"):
            opened = provider.open_or_start(name, owner="node@host")
            assert isinstance(opened, Fresh)
            assert opened.store.mark_completed()
        assert provider.count_runs() == 3 == len(provider.list_runs(limit=10))
        assert provider.count_runs("scan_a") == 2 == len(provider.list_runs("scan_a", limit=10))
        assert provider.count_runs("nothing") == 0
