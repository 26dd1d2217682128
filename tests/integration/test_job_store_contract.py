"""One contract, three job stores: memory, SQLite and PostgreSQL behave the same."""

from __future__ import annotations

import threading
from datetime import timedelta

import pytest

from planq.domain.availability import JOB_SWEEP, RUN_SWEEP
from planq.domain.clock import utcnow
from planq.domain.errors import DuplicateJobError
from planq.domain.ids import new_id
from planq.domain.jobs import AsyncJob, AsyncJobStatus
from planq.domain.ledger import JobLedger
from planq.domain.plans import PlanPhase
from planq.domain.ports import CancelOutcome, JobStore, PlanStore


def make_job(**kw: object) -> AsyncJob:
    return AsyncJob(plan_id=kw.pop("plan_id", new_id()), phase=kw.pop("phase", "execute"), **kw)  # type: ignore[arg-type]


def test_add_get_roundtrip_keeps_every_field(jobs: JobStore) -> None:
    job = make_job(attempt=2, checkpoint_json='{"step": 3}')
    jobs.add(job)
    got = jobs.get(job.job_id)
    assert got is not None
    assert got.model_dump() == job.model_dump()
    assert got.created_at.tzinfo is not None


def test_add_rejects_wrong_type_and_duplicates(jobs: JobStore) -> None:
    with pytest.raises(TypeError):
        jobs.add({"job_id": new_id()})  # type: ignore[arg-type]
    job = make_job()
    jobs.add(job)
    with pytest.raises(ValueError):
        jobs.add(job)
    with pytest.raises(DuplicateJobError):
        jobs.add(job)
    assert jobs.count() == 1


def test_get_validates_id(jobs: JobStore) -> None:
    with pytest.raises(ValueError):
        jobs.get("")
    assert jobs.get(new_id()) is None


def test_update_and_remove(jobs: JobStore) -> None:
    job = make_job()
    with pytest.raises(TypeError):
        jobs.update("nope")  # type: ignore[arg-type]
    with pytest.raises(ValueError):
        jobs.update(job)
    jobs.add(job)
    job.mark_running("worker-a")
    jobs.update(job)
    stored = jobs.get(job.job_id)
    assert stored is not None and stored.status is AsyncJobStatus.running
    with pytest.raises(ValueError):
        jobs.remove("")
    assert jobs.remove(job.job_id) is True
    assert jobs.remove(job.job_id) is False
    assert jobs.get(job.job_id) is None


def test_listing_and_counts(jobs: JobStore) -> None:
    plan_id = new_id()
    made = [make_job(plan_id=plan_id) for _ in range(3)] + [make_job()]
    for job in made:
        jobs.add(job)
    assert jobs.claim(made[0].job_id, "w", utcnow())
    assert [j.job_id for j in jobs.list_all()] == [j.job_id for j in made]
    assert len(jobs.list_all(limit=2)) == 2
    assert [j.job_id for j in jobs.list_by_plan(plan_id)] == [j.job_id for j in made[:3]]
    assert [j.job_id for j in jobs.list_by_status(AsyncJobStatus.running)] == [made[0].job_id]
    assert jobs.count() == 4
    assert jobs.count(AsyncJobStatus.queued) == 3
    with pytest.raises(TypeError):
        jobs.list_by_status("queued")  # type: ignore[arg-type]


def test_claim_is_compare_and_set(jobs: JobStore) -> None:
    job = make_job()
    jobs.add(job)
    assert jobs.claim(job.job_id, "worker-a", utcnow()) is not None
    assert jobs.claim(job.job_id, "worker-b", utcnow()) is None
    stored = jobs.get(job.job_id)
    assert stored is not None
    assert stored.worker_id == "worker-a" and stored.started_at and stored.last_heartbeat
    assert jobs.claim(new_id(), "worker-a", utcnow()) is None


def test_concurrent_claims_have_one_winner(jobs: JobStore) -> None:
    job = make_job()
    jobs.add(job)
    wins: list[str] = []
    barrier = threading.Barrier(8)

    def contend(name: str) -> None:
        barrier.wait()
        if jobs.claim(job.job_id, name, utcnow()):
            wins.append(name)

    threads = [threading.Thread(target=contend, args=(f"w{i}",)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert len(wins) == 1
    stored = jobs.get(job.job_id)
    assert stored is not None and stored.worker_id == wins[0]


@pytest.mark.parametrize(
    "status", [AsyncJobStatus.succeeded, AsyncJobStatus.failed, AsyncJobStatus.cancelled]
)
def test_finish_only_from_running_and_only_once(jobs: JobStore, status: AsyncJobStatus) -> None:
    job = make_job()
    jobs.add(job)
    assert jobs.finish(job.job_id, status, utcnow(), "boom") is False  # still queued
    jobs.claim(job.job_id, "w", utcnow())
    assert jobs.finish(job.job_id, status, utcnow(), "boom") is True
    assert jobs.finish(job.job_id, AsyncJobStatus.succeeded, utcnow()) is False
    stored = jobs.get(job.job_id)
    assert stored is not None
    assert stored.status is status and stored.finished_at is not None
    assert stored.error_message == ("boom" if status is AsyncJobStatus.failed else None)


@pytest.mark.parametrize(
    "status", [AsyncJobStatus.succeeded, AsyncJobStatus.failed, AsyncJobStatus.cancelled]
)
def test_finish_keeps_a_failed_jobs_traceback_only(jobs: JobStore, status: AsyncJobStatus) -> None:
    job = make_job()
    jobs.add(job)
    jobs.claim(job.job_id, "w", utcnow())
    stack = 'Traceback (most recent call last):\n  File "u.py", line 3, in f\nValueError: x\n'
    assert jobs.finish(job.job_id, status, utcnow(), "ValueError: x", traceback=stack)
    stored = jobs.get(job.job_id)
    assert stored is not None
    assert stored.error_traceback == (stack if status is AsyncJobStatus.failed else None)


def test_finish_rejects_non_terminal_status(jobs: JobStore) -> None:
    with pytest.raises(ValueError):
        jobs.finish(new_id(), AsyncJobStatus.running, utcnow())


def test_cancel_outcomes(jobs: JobStore) -> None:
    queued, running, done = make_job(), make_job(), make_job()
    for job in (queued, running, done):
        jobs.add(job)
    jobs.claim(running.job_id, "w", utcnow())
    jobs.claim(done.job_id, "w", utcnow())
    jobs.finish(done.job_id, AsyncJobStatus.succeeded, utcnow())

    assert jobs.cancel(queued.job_id, utcnow()) is CancelOutcome.cancelled
    assert jobs.claim(queued.job_id, "w", utcnow()) is None
    assert jobs.cancel(running.job_id, utcnow()) is CancelOutcome.requested
    assert jobs.cancel(running.job_id, utcnow()) is CancelOutcome.already_requested
    assert jobs.cancel(done.job_id, utcnow()) is CancelOutcome.already_terminal
    assert jobs.cancel(new_id(), utcnow()) is CancelOutcome.not_found
    with pytest.raises(ValueError):
        jobs.cancel("", utcnow())
    stored = jobs.get(queued.job_id)
    assert stored is not None and stored.status is AsyncJobStatus.cancelled
    stored = jobs.get(running.job_id)
    assert stored is not None
    assert stored.status is AsyncJobStatus.running and stored.cancel_requested_at is not None


def test_cancel_queued_ends_only_a_queued_job_once(jobs: JobStore) -> None:
    """What a node that does not run the job does with a revoke nobody recorded."""
    queued, running = make_job(), make_job()
    for job in (queued, running):
        jobs.add(job)
    jobs.claim(running.job_id, "w", utcnow())

    assert jobs.cancel_queued(queued.job_id.lower(), utcnow()) is True
    assert jobs.cancel_queued(queued.job_id, utcnow()) is False  # one winner
    assert jobs.cancel_queued(running.job_id, utcnow()) is False
    assert jobs.cancel_queued(new_id(), utcnow()) is False
    with pytest.raises(ValueError):
        jobs.cancel_queued("", utcnow())
    stored = jobs.get(queued.job_id)
    assert stored is not None and stored.status is AsyncJobStatus.cancelled
    assert stored.cancel_requested_at is not None and stored.finished_at is not None
    untouched = jobs.get(running.job_id)
    assert untouched is not None and untouched.status is AsyncJobStatus.running
    assert untouched.cancel_requested_at is None


def test_heartbeat_stamps_many_running_jobs_and_reports_cancel_requests(jobs: JobStore) -> None:
    running = [make_job() for _ in range(5)]
    idle = make_job()
    for job in [*running, idle]:
        jobs.add(job)
    start = utcnow() - timedelta(minutes=5)
    for job in running:
        jobs.claim(job.job_id, "w", start)
    jobs.cancel(running[1].job_id, utcnow())
    later = utcnow()
    asked = jobs.heartbeat([j.job_id for j in running] + [idle.job_id, new_id()], later)
    assert asked == {running[1].job_id}
    for job in running:
        stored = jobs.get(job.job_id)
        assert stored is not None and stored.last_heartbeat == later
    stored_idle = jobs.get(idle.job_id)
    assert stored_idle is not None and stored_idle.last_heartbeat is None


def test_save_progress_only_while_running(jobs: JobStore) -> None:
    job = make_job()
    jobs.add(job)
    assert jobs.save_progress(job.job_id, 0.5, '{"step": 1}') is False
    jobs.claim(job.job_id, "w", utcnow())
    assert jobs.save_progress(job.job_id, 0.5, '{"step": 1}') is True
    assert jobs.save_progress(job.job_id, 0.75, None) is True
    stored = jobs.get(job.job_id)
    assert stored is not None
    assert stored.progress == 0.75 and stored.checkpoint == {"step": 1}


def test_stuck_listing_and_expiry_cas(jobs: JobStore) -> None:
    old, fresh = make_job(), make_job()
    for job in (old, fresh):
        jobs.add(job)
    now = utcnow()
    jobs.claim(old.job_id, "w", now - timedelta(minutes=10))
    jobs.claim(fresh.job_id, "w", now)
    cutoff = now - timedelta(minutes=1)
    assert [j.job_id for j in jobs.list_stuck(cutoff)] == [old.job_id]
    assert jobs.expire(fresh.job_id, cutoff, now, "heartbeat expired") is False
    assert jobs.expire(old.job_id, cutoff, now, "heartbeat expired") is True
    assert jobs.expire(old.job_id, cutoff, now, "heartbeat expired") is False
    stored = jobs.get(old.job_id)
    assert stored is not None
    assert stored.status is AsyncJobStatus.failed and stored.error_message == "heartbeat expired"
    assert jobs.list_stuck(cutoff) == []


def test_expire_loses_to_a_fresh_heartbeat(jobs: JobStore) -> None:
    job = make_job()
    jobs.add(job)
    now = utcnow()
    jobs.claim(job.job_id, "w", now - timedelta(minutes=10))
    cutoff = now - timedelta(minutes=1)
    assert len(jobs.list_stuck(cutoff)) == 1
    jobs.heartbeat([job.job_id], now)  # the worker was alive after all
    assert jobs.expire(job.job_id, cutoff, now, "heartbeat expired") is False


def test_delete_terminal_before_in_batches(jobs: JobStore) -> None:
    now = utcnow()
    old = [make_job() for _ in range(7)]
    keep_recent, keep_running = make_job(), make_job()
    for job in [*old, keep_recent, keep_running]:
        jobs.add(job)
        jobs.claim(job.job_id, "w", now)
    for job in old:
        jobs.finish(job.job_id, AsyncJobStatus.succeeded, now - timedelta(days=10))
    jobs.finish(keep_recent.job_id, AsyncJobStatus.failed, now, "x")
    assert jobs.delete_terminal_before(now - timedelta(days=1), batch_size=3) == 7
    assert {j.job_id for j in jobs.list_all()} == {keep_recent.job_id, keep_running.job_id}
    assert jobs.delete_terminal_before(now - timedelta(days=1), batch_size=3) == 0


def test_dispatch_bookkeeping(jobs: JobStore) -> None:
    now = utcnow()
    never = make_job(created_at=now - timedelta(minutes=5))
    young = make_job()
    sent_long_ago = make_job(created_at=now - timedelta(minutes=5))
    for job in (never, young, sent_long_ago):
        jobs.add(job)
    assert jobs.mark_dispatched([sent_long_ago.job_id], now - timedelta(minutes=4)) == 1
    cutoff = now - timedelta(minutes=1)
    due = [j.job_id for j in jobs.list_dispatch_due(cutoff, cutoff)]
    assert due == [never.job_id, sent_long_ago.job_id]
    assert jobs.mark_dispatched([never.job_id], now) == 1
    stored = jobs.get(never.job_id)
    assert stored is not None and stored.dispatch_count == 1 and stored.dispatched_at == now
    assert [j.job_id for j in jobs.list_dispatch_due(cutoff, cutoff)] == [sent_long_ago.job_id]
    assert jobs.fail_queued(sent_long_ago.job_id, now, "never picked up") is True
    assert jobs.mark_dispatched([sent_long_ago.job_id], now) == 0
    assert jobs.list_dispatch_due(cutoff, cutoff) == []


def test_a_stamp_that_trails_a_fast_worker_still_counts_the_message(jobs: JobStore) -> None:
    """The stamp lands ~100 ms after the publish: a worker may have run the job by then.

    A row some worker claimed got its message, so it is stamped whatever its status now; a
    row that ended without ever being claimed (never picked up, cancelled while queued) is not.
    """
    now = utcnow()
    ran, never = make_job(), make_job()
    for job in (ran, never):
        jobs.add(job)
    assert jobs.claim(ran.job_id, "worker-a", now)
    assert jobs.finish(ran.job_id, AsyncJobStatus.failed, now, "boom", worker_id="worker-a")
    assert jobs.fail_queued(never.job_id, now, "never picked up") is True
    assert jobs.mark_dispatched([ran.job_id, never.job_id], now) == 1
    stamped, unstamped = jobs.get(ran.job_id), jobs.get(never.job_id)
    assert stamped is not None and (stamped.dispatched_at, stamped.dispatch_count) == (now, 1)
    assert stamped.status is AsyncJobStatus.failed  # the stamp moves nothing else
    assert unstamped is not None and (unstamped.dispatched_at, unstamped.dispatch_count) == (
        None,
        0,
    )


def test_second_retry_of_same_job_is_refused(jobs: JobStore) -> None:
    original = make_job()
    jobs.add(original)
    jobs.add(make_job(plan_id=original.plan_id, retry_of=original.job_id, attempt=2))
    with pytest.raises(DuplicateJobError):
        jobs.add(make_job(plan_id=original.plan_id, retry_of=original.job_id, attempt=2))


def test_transaction_rolls_back_both_on_error(jobs: JobStore) -> None:
    first = make_job()
    with pytest.raises(RuntimeError), jobs.transaction():
        jobs.add(first)
        raise RuntimeError("abort")
    assert jobs.get(first.job_id) is None


def test_phase_enum_survives_storage(jobs: JobStore) -> None:
    job = make_job(phase="apply")
    jobs.add(job)
    stored = jobs.get(job.job_id)
    assert stored is not None and stored.phase is PlanPhase.apply


def test_stuck_detection_waits_out_a_ledger_restart(
    stores: tuple[JobStore, PlanStore], request: pytest.FixtureRequest
) -> None:
    """No heartbeat can be written while the ledger is down: wait a job_timeout after it."""
    jobs, plans = stores
    ledger = JobLedger(jobs, plans)
    up_since = jobs.sight_ledger(JOB_SWEEP, 60.0).available_since  # the first sighting
    backend = request.node.callspec.params["stores"]
    assert (up_since is not None) == (backend == "postgres")
    job = make_job()
    jobs.add(job)
    jobs.claim(job.job_id, "w", utcnow() - timedelta(days=30))
    if up_since is not None:
        assert up_since < utcnow()
        just_after_restart = (utcnow() - up_since).total_seconds() + 3600
        assert ledger.expire_stuck(just_after_restart) == []
        stored = jobs.get(job.job_id)
        assert stored is not None and stored.status is AsyncJobStatus.running
    # a job_timeout shorter than the ledger's uptime: now the stale heartbeat counts
    timeout = 60.0 if up_since is None else (utcnow() - up_since).total_seconds() / 2
    assert [j.job_id for j in ledger.expire_stuck(timeout)] == [job.job_id]


def test_last_sighting_is_the_sweeps_own_last_time(stores: tuple[JobStore, PlanStore]) -> None:
    """What `planq schedule` shows as the stuck sweep's last run."""
    jobs, _ = stores
    assert jobs.last_sighting(JOB_SWEEP) is None  # never swept
    first = jobs.sight_ledger(JOB_SWEEP, 60.0)
    assert jobs.last_sighting(JOB_SWEEP) == first.now
    second = jobs.sight_ledger(JOB_SWEEP, 60.0)
    assert jobs.last_sighting(JOB_SWEEP) == second.now >= first.now
    assert jobs.last_sighting(RUN_SWEEP) is None  # each sweep kind its own row
    with pytest.raises(ValueError, match="sweep must be one of"):
        jobs.last_sighting("nope")
