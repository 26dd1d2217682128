"""Which processes group their writes: a threads or gevent pool does, prefork and solo don't.

The choice is made at worker_init from the WorkController's pool and concurrency
(`tasks/signals.pool_holds_many`); the runtime's runner takes the window from
PLANQ_GROUP_COMMIT_MS only there. The embedded worker (a real Celery threads pool) shows
the whole path: its jobs' claims and finishes go through the group commit.
"""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import pytest
from celery.concurrency.gevent import TaskPool as GeventPool
from celery.concurrency.prefork import TaskPool as PreforkPool

from planq.domain.jobs import AsyncJobStatus
from planq.domain.plans import Plan
from planq.tasks.runtime import runtime_for
from planq.tasks.signals import pool_holds_many
from tests.celery_support import embedded_runtime, make_app, wait_for_status


@pytest.mark.parametrize(
    ("pool", "concurrency", "grouped"),
    [
        ("threads", 16, True),
        ("gevent", 100, True),
        ("eventlet", 100, True),
        (GeventPool, 8, True),  # named by class, as `-P` may resolve it
        ("threads", 1, False),  # one job at a time: nothing to group
        ("prefork", 16, False),  # each child holds one job
        (PreforkPool, 16, False),
        ("solo", 1, False),
        ("custom.module:Pool", 16, False),  # unknown: the single statements
    ],
)
def test_only_a_pool_of_many_jobs_per_process_groups_its_writes(
    pool: object, concurrency: int, grouped: bool
) -> None:
    # The two attributes a WorkController carries at worker_init (before Celery resolves
    # the alias): a real controller's would fire worker_init and its boot sweep here.
    controller = SimpleNamespace(pool_cls=pool, concurrency=concurrency)
    assert pool_holds_many(controller) is grouped


def test_an_embedded_threads_worker_claims_and_finishes_through_the_group_commit(
    redis_url: str, tmp_path: Path
) -> None:
    app = make_app(redis_url, f"sqlite:///{tmp_path / 'pools.db'}", default_executor="noop")
    runtime = runtime_for(app)
    assert runtime.worker.commits.window == 0.0  # built before the node said its pool
    with embedded_runtime(app) as rt:
        assert rt is runtime and rt.holds_many  # max_workers threads in this process
        assert rt.worker.commits.window == pytest.approx(0.002)  # the default 2 ms
        plans = [Plan.with_steps(["a"], name=f"pooled-{i}") for i in range(6)]
        for plan in plans:
            rt.plans.add(plan)
        task = app.tasks["planq.strategize_plan"]
        ids = [task.delay(plan.plan_id).id for plan in plans]
        for job_id in ids:
            wait_for_status(rt.jobs, job_id, AsyncJobStatus.succeeded)
        stats = rt.worker.commits.stats  # a lone job's writes are batches of one
        assert stats.claimed_jobs == len(ids) and stats.finished_jobs == len(ids), stats


def test_a_settings_window_of_zero_turns_it_off_in_a_threads_pool(
    redis_url: str, tmp_path: Path
) -> None:
    app = make_app(
        redis_url,
        f"sqlite:///{tmp_path / 'off.db'}",
        default_executor="noop",
        group_commit_ms=0,
    )
    with embedded_runtime(app) as rt:
        assert rt.holds_many and not rt.worker.commits.enabled
        plan = Plan.with_steps(["a"], name="alone")
        rt.plans.add(plan)
        job_id = app.tasks["planq.strategize_plan"].delay(plan.plan_id).id
        wait_for_status(rt.jobs, job_id, AsyncJobStatus.succeeded)
        assert rt.worker.commits.stats.claimed_jobs == 0  # every write went alone
