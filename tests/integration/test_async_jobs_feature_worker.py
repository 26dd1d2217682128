"""async_jobs.feature, part 2: the worker (pickup, cancel, stuck, TTL, loop, health).

"an async worker is initialised with <x>" is `AsyncWorker(AsyncWorkerConfig(x), store,
executor)`, the spec's own constructor, with no broker and no plan store, on memory,
SQLite and PostgreSQL (the `jobs` fixture). Each test carries its scenario's title as a
`spec` marker and its steps as comments. Where planq deliberately differs (worker ids,
what a stop writes), the comment says so and docs/architecture.md lists it.
"""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor

import pytest

from planq.domain.cancellation import CancellationToken
from planq.domain.config import AsyncWorkerConfig
from planq.domain.ids import new_id
from planq.domain.jobs import AsyncJob, AsyncJobStatus
from planq.domain.plans import PlanPhase
from planq.domain.ports import JobStore
from planq.tasks.engine import AsyncWorker, PickupResult
from planq.tasks.executors import JobContext
from tests.feature_support import (
    PLAN_ID,
    create_job,
    processed,
    running_with_expired_heartbeat,
    spec_worker,
    stored,
)
from tests.support import wait_for

S = AsyncJobStatus


def failing(ctx: JobContext) -> None:
    """A failing executor."""
    raise RuntimeError("boom")


class Blocking:
    """A blocking executor: blocks until its job's token is signalled."""

    def __init__(self) -> None:
        self.entered = threading.Event()
        self.tokens: list[CancellationToken] = []

    def __call__(self, ctx: JobContext) -> None:
        self.tokens.append(ctx.token)
        self.entered.set()
        ctx.token.wait(60)


def force_terminal(jobs: JobStore, ctx: JobContext) -> None:
    """Move the running job to a terminal state behind the worker's back."""
    row = jobs.get(ctx.job.job_id)
    assert row is not None
    row.mark_cancelled()
    jobs.update(row)


# ---- Worker Pickup and Execution ----


@pytest.mark.spec("async_jobs: Worker picks up and executes a queued job")
def test_worker_picks_up_and_executes_a_queued_job(jobs: JobStore) -> None:
    # Given an async worker is initialised with max_workers 2
    worker = spec_worker(jobs, max_workers=2)
    # And a queued async job exists
    job = create_job(jobs)
    # When the worker picks up and executes the job
    assert worker.pickup_and_execute(job) is PickupResult.succeeded
    # Then the async job status should be "succeeded"
    assert stored(jobs, job).status == "succeeded"
    # And the worker health should show 1 job processed
    assert processed(worker) == 1


@pytest.mark.spec("async_jobs: Worker marks job as failed on execution error")
def test_worker_marks_job_as_failed_on_execution_error(jobs: JobStore) -> None:
    # Given an async worker is initialised with a failing executor
    worker = spec_worker(jobs, failing)
    # And a queued async job exists
    job = create_job(jobs)
    # When the worker picks up and executes the job
    worker.pickup_and_execute(job)
    # Then the async job status should be "failed"
    assert stored(jobs, job).status == "failed"
    # And the worker health should show 1 job failed
    assert worker.health_report()["jobs_failed"] == 1


# ---- Job Cancellation ----


@pytest.mark.spec("async_jobs: Cancel a running job via cancellation token")
def test_cancel_a_running_job_via_cancellation_token(jobs: JobStore) -> None:
    # Given an async worker is initialised with max_workers 2
    worker = spec_worker(jobs, max_workers=2)
    # And a queued async job exists
    job = create_job(jobs)
    # When I cancel the async job
    assert worker.cancel_job(job.job_id) is True
    # Then the async job status should be "cancelled"
    assert stored(jobs, job).status == "cancelled"


# ---- Stuck Job Detection ----


@pytest.mark.spec("async_jobs: Detect and fail stuck jobs with expired heartbeat")
def test_detect_and_fail_stuck_jobs_with_expired_heartbeat(jobs: JobStore) -> None:
    # Given an async worker is initialised with job_timeout 1
    worker = spec_worker(jobs, job_timeout=1)
    # And a running async job with expired heartbeat exists
    job = running_with_expired_heartbeat(jobs)
    # When the worker detects stuck jobs
    report = worker.detect_stuck_jobs()
    # Then the stuck job should be marked as "failed"
    assert report.expired == [job.job_id]
    row = stored(jobs, job)
    assert row.status == "failed"
    assert row.error_message is not None and "heartbeat" in row.error_message


@pytest.mark.spec("async_jobs: Detect and fail stuck jobs with expired heartbeat")
def test_detect_stuck_jobs_returns_the_failed_jobs_in_the_spec_form(jobs: JobStore) -> None:
    # Given an async worker is initialised with job_timeout 1
    worker = spec_worker(jobs, job_timeout=1)
    # And a running async job with expired heartbeat exists
    job = running_with_expired_heartbeat(jobs)
    # When the worker detects stuck jobs
    stuck = worker.detect_stuck_jobs()
    # Then the stuck job should be marked as "failed": the spec's caller iterates the
    # jobs the sweep failed, each as the ledger now keeps it
    assert stuck and len(stuck) == 1
    for failed in stuck:
        assert failed.job_id == job.job_id
        assert failed.status == "failed"
        assert failed == stored(jobs, job)
    assert stuck.expired == [job.job_id] and stuck.retried == {}  # planq's richer form


# ---- Job TTL and Cleanup ----


@pytest.mark.spec("async_jobs: Cleanup completed jobs older than retention TTL")
def test_cleanup_completed_jobs_older_than_retention_ttl(jobs: JobStore) -> None:
    # Given an async worker is initialised with job_ttl 1
    worker = spec_worker(jobs, job_ttl=1)
    # And a completed async job older than TTL exists
    old = AsyncJob(plan_id=PLAN_ID, phase=PlanPhase.execute)
    old.mark_running("worker-001")
    old.mark_succeeded()
    assert old.finished_at is not None
    old.finished_at = old.started_at = old.finished_at.replace(year=old.finished_at.year - 1)
    jobs.add(old)
    # When the worker runs job cleanup
    assert worker.cleanup_expired_jobs() == 1
    # Then the completed job should be removed from the store
    assert jobs.get(old.job_id) is None
    assert jobs.count() == 0


# ---- Graceful Shutdown ----


@pytest.mark.spec("async_jobs: Worker stops gracefully on shutdown request")
def test_worker_stops_gracefully_on_shutdown_request(jobs: JobStore) -> None:
    # Given an async worker is initialised with max_workers 2
    worker = spec_worker(jobs, max_workers=2)
    # When the worker is started
    worker.start()
    assert worker.is_running
    # And a shutdown is requested  (planq: stop(), what a warm shutdown calls)
    worker.stop()
    # Then the worker should stop running
    assert not worker.is_running
    assert worker.health_report()["running"] is False


# ---- Worker Health Report ----


@pytest.mark.spec("async_jobs: Worker health report contains expected fields")
def test_worker_health_report_contains_expected_fields(jobs: JobStore) -> None:
    # Given an async worker is initialised with max_workers 4
    worker = spec_worker(jobs, max_workers=4)
    # When I request the worker health report
    report = worker.health_report()
    # Then the health report should contain worker_id
    assert report["worker_id"] == worker.worker_id
    # And the health report should contain config details
    assert report["config"] == AsyncWorkerConfig(max_workers=4).as_dict()
    assert report["config"]["max_workers"] == 4


# ---- Additional Coverage: Validation Guards ----


@pytest.mark.spec("async_jobs: AsyncWorker with invalid config type raises error")
def test_async_worker_with_invalid_config_type_raises_error(jobs: JobStore) -> None:
    # When I try to create AsyncWorker with invalid config
    # Then a TypeError should be raised for async worker config
    with pytest.raises(TypeError, match="config"):
        AsyncWorker({"max_workers": 2}, jobs, "noop")  # type: ignore[arg-type]


@pytest.mark.spec("async_jobs: AsyncWorker with invalid job_store type raises error")
def test_async_worker_with_invalid_job_store_type_raises_error() -> None:
    # When I try to create AsyncWorker with invalid job_store
    # Then a TypeError should be raised for async worker store
    with pytest.raises(TypeError, match="job_store"):
        AsyncWorker(AsyncWorkerConfig(), {"jobs": []}, "noop")  # type: ignore[arg-type]


@pytest.mark.spec("async_jobs: AsyncWorker pickup with non-AsyncJob raises error")
def test_async_worker_pickup_with_non_async_job_raises_error(jobs: JobStore) -> None:
    # Given an async worker is initialised with max_workers 2
    worker = spec_worker(jobs, max_workers=2)
    # When I try to pickup a non-AsyncJob
    # Then a TypeError should be raised for async worker pickup
    with pytest.raises(TypeError, match="AsyncJob"):
        worker.pickup_and_execute({"job_id": new_id()})  # type: ignore[arg-type]
    assert processed(worker) == 0


@pytest.mark.spec("async_jobs: AsyncWorker cancel_job with empty job_id raises error")
def test_async_worker_cancel_job_with_empty_job_id_raises_error(jobs: JobStore) -> None:
    # Given an async worker is initialised with max_workers 2
    worker = spec_worker(jobs, max_workers=2)
    # When I try to cancel a job with empty job_id
    # Then a ValueError should be raised for async worker cancel
    with pytest.raises(ValueError, match="job_id"):
        worker.cancel_job("")


@pytest.mark.spec("async_jobs: AsyncWorker worker_id property returns value")
def test_async_worker_worker_id_property_returns_value(jobs: JobStore) -> None:
    # Given an async worker is initialised with max_workers 2
    worker = spec_worker(jobs, max_workers=2)
    # Then the worker should have a worker_id starting with "worker-"
    assert worker.worker_id.startswith("worker-")
    # planq: unique per standalone worker (claims are fenced by it), and every claim,
    # health report and heartbeat carries it; an explicit worker_id still wins.
    assert spec_worker(jobs, max_workers=2).worker_id != worker.worker_id
    assert worker.health_report()["worker_id"] == worker.worker_id
    job = create_job(jobs)
    worker.pickup_and_execute(job)
    assert stored(jobs, job).worker_id == worker.worker_id
    named = AsyncWorker(AsyncWorkerConfig(max_workers=2), jobs, "noop", worker_id="worker-001")
    other = create_job(jobs)
    named.pickup_and_execute(other)
    assert stored(jobs, other).worker_id == "worker-001"


@pytest.mark.spec("async_jobs: AsyncWorker config property returns config")
def test_async_worker_config_property_returns_config(jobs: JobStore) -> None:
    # Given an async worker is initialised with max_workers 2
    worker = spec_worker(jobs, max_workers=2)
    # Then the worker config max_workers should be 2
    assert worker.config.max_workers == 2


@pytest.mark.spec("async_jobs: AsyncWorker start when already running does nothing")
def test_async_worker_start_when_already_running_does_nothing(jobs: JobStore) -> None:
    # Given an async worker is initialised with max_workers 2
    worker = spec_worker(jobs, max_workers=2)
    try:
        # When I start the worker
        worker.start()
        # And I start the worker again
        worker.start()
        # Then the worker should still be running
        assert worker.is_running
    finally:
        worker.stop()
    assert not worker.is_running  # one stop ends it: the second start made nothing new


@pytest.mark.spec("async_jobs: AsyncWorker stop after start stops cleanly")
def test_async_worker_stop_after_start_stops_cleanly(jobs: JobStore) -> None:
    # Given an async worker is initialised with max_workers 2
    worker = spec_worker(jobs, max_workers=2)
    # When I start the worker
    worker.start()
    # And I stop the worker
    worker.stop()
    # Then the worker should not be running
    assert not worker.is_running


@pytest.mark.spec("async_jobs: AsyncWorker stop when not running does nothing")
def test_async_worker_stop_when_not_running_does_nothing(jobs: JobStore) -> None:
    # Given an async worker is initialised with max_workers 2
    worker = spec_worker(jobs, max_workers=2)
    # When I stop the worker
    worker.stop()
    # Then the worker should not be running
    assert not worker.is_running


@pytest.mark.spec("async_jobs: AsyncWorker cancel job that does not exist returns false")
def test_async_worker_cancel_job_that_does_not_exist_returns_false(jobs: JobStore) -> None:
    # Given an async worker is initialised with max_workers 2
    worker = spec_worker(jobs, max_workers=2)
    # Then cancelling a non-existent job should return false
    assert worker.cancel_job(new_id()) is False


# ---- Review Fixes: Concurrent Execution (T2) ----


@pytest.mark.spec("async_jobs: Worker executes multiple jobs concurrently")
def test_worker_executes_multiple_jobs_concurrently(jobs: JobStore) -> None:
    together = threading.Barrier(3, timeout=30)  # passes only if all 3 run at once

    def meet(ctx: JobContext) -> None:
        together.wait()

    # Given an async worker is initialised with max_workers 4
    worker = spec_worker(jobs, meet, max_workers=4)
    # And 3 queued async jobs exist
    created = [create_job(jobs) for _ in range(3)]
    # When the worker executes all queued jobs concurrently
    with ThreadPoolExecutor(worker.config.max_workers) as pool:
        results = list(pool.map(worker.pickup_and_execute, created))
    assert results == [PickupResult.succeeded] * 3
    # Then all 3 jobs should be in a terminal state
    assert all(stored(jobs, j).is_terminal for j in created)
    # And the worker health should show 3 jobs processed total
    assert processed(worker) == 3


# ---- Review Fixes: Cancel records cancelled counter (B2) ----


@pytest.mark.spec("async_jobs: Cancelled job increments cancelled counter not processed counter")
def test_cancelled_job_increments_cancelled_counter_not_processed_counter(jobs: JobStore) -> None:
    # Given an async worker is initialised with max_workers 2
    worker = spec_worker(jobs, max_workers=2)
    # And a queued async job exists
    job = create_job(jobs)
    # When I cancel the async job
    worker.cancel_job(job.job_id)
    # Then the async job status should be "cancelled"
    assert stored(jobs, job).status == "cancelled"
    # And the worker health should show 0 jobs processed
    assert processed(worker) == 0
    # And the worker health should show 0 jobs failed
    assert worker.health_report()["jobs_failed"] == 0


# ---- Review Fixes: Error message audit trail (SEC1) ----


@pytest.mark.spec("async_jobs: Failed job records error message for audit trail")
def test_failed_job_records_error_message_for_audit_trail(jobs: JobStore) -> None:
    # Given an async worker is initialised with a failing executor
    worker = spec_worker(jobs, failing)
    # And a queued async job exists
    job = create_job(jobs)
    # When the worker picks up and executes the job
    worker.pickup_and_execute(job)
    # Then the async job status should be "failed"
    assert stored(jobs, job).status == "failed"
    # And the async job should have an error_message set
    assert stored(jobs, job).error_message == "RuntimeError: boom"


# ---- Coverage: Safe Initialisation and Cleanup ----


@pytest.mark.spec("async_jobs: Worker start creates thread pool and stop destroys it cleanly")
def test_worker_start_creates_thread_pool_and_stop_destroys_it_cleanly(jobs: JobStore) -> None:
    threads: list[str] = []

    def noted(ctx: JobContext) -> None:
        threads.append(threading.current_thread().name)

    # Given an async worker is initialised with max_workers 2
    worker = spec_worker(jobs, noted, max_workers=2)
    # And a queued async job exists
    job = create_job(jobs)
    try:
        # When I start the worker
        worker.start()
        # And the worker processes all queued jobs within 3 seconds
        wait_for(lambda: stored(jobs, job).is_terminal, timeout=3, what="the queued job")
    finally:
        # And I stop the worker
        worker.stop()
    # Then the worker should not be running
    assert not worker.is_running
    # And the async job status should be "succeeded"
    assert stored(jobs, job).status == "succeeded"
    assert threads and threads[0].startswith("planq-job")  # ran on the worker's pool


@pytest.mark.spec("async_jobs: Worker poll loop dispatches jobs via thread pool")
def test_worker_poll_loop_dispatches_jobs_via_thread_pool(jobs: JobStore) -> None:
    # Given an async worker is initialised with max_workers 4
    worker = spec_worker(jobs, max_workers=4)
    # And 2 queued async jobs exist
    created = [create_job(jobs) for _ in range(2)]
    try:
        # When I start the worker
        worker.start()
        # And all created jobs reach a terminal state within 3 seconds
        wait_for(
            lambda: all(stored(jobs, j).is_terminal for j in created),
            timeout=3,
            what="both created jobs to end",
        )
    finally:
        # And I stop the worker
        worker.stop()
    # Then all 2 jobs should be in a terminal state
    assert all(stored(jobs, j).is_terminal for j in created)
    # And the worker health should show 2 jobs processed total
    assert processed(worker) == 2


@pytest.mark.spec("async_jobs: Worker stop cancels in-flight jobs via tokens")
def test_worker_stop_cancels_in_flight_jobs_via_tokens(jobs: JobStore) -> None:
    # Given an async worker is initialised with a blocking executor
    blocking = Blocking()
    worker = spec_worker(jobs, blocking)
    # And a queued async job exists
    job = create_job(jobs)
    try:
        # When I start the worker
        worker.start()
        # And the blocking executor has been entered
        assert blocking.entered.wait(30), "the blocking executor was never entered"
    finally:
        # And I stop the worker
        worker.stop()
    # Then the cancellation token for the job should be signalled
    assert blocking.tokens and blocking.tokens[0].is_cancelled
    # planq then ends the job failed "interrupted: worker shutdown", its checkpoint kept, so
    # the retry policy resumes it elsewhere (a stop is not an operator's cancel).
    row = stored(jobs, job)
    assert (row.status, row.error_message) == (S.failed, "interrupted: worker shutdown")


# ---- Coverage: Cancellation Paths ----


@pytest.mark.spec("async_jobs: Running job cancelled via token records cancelled count")
def test_running_job_cancelled_via_token_records_cancelled_count(jobs: JobStore) -> None:
    # Given an async worker is initialised with a blocking executor
    blocking = Blocking()
    worker = spec_worker(jobs, blocking)
    # And a queued async job exists
    job = create_job(jobs)
    # When I dispatch the job in a background thread
    results: list[PickupResult] = []
    thread = threading.Thread(target=lambda: results.append(worker.pickup_and_execute(job)))
    thread.start()
    # And the blocking executor has been entered
    assert blocking.entered.wait(30), "the blocking executor was never entered"
    # And I cancel the running async job via the worker
    assert worker.cancel_job(job.job_id) is True
    # And the background job thread completes
    thread.join(30)
    assert not thread.is_alive() and results == [PickupResult.cancelled]
    # Then the async job status should be "cancelled"
    assert stored(jobs, job).status == "cancelled"
    # And the worker health should show 1 jobs cancelled
    assert worker.health_report()["jobs_cancelled"] == 1
    # And the worker health should show 0 jobs processed
    assert processed(worker) == 0


@pytest.mark.spec("async_jobs: Pickup and execute skips already-terminal job safely")
def test_pickup_and_execute_skips_already_terminal_job_safely(jobs: JobStore) -> None:
    # Given an async worker is initialised with max_workers 2
    worker = spec_worker(jobs, max_workers=2)
    # And a queued async job exists
    job = create_job(jobs)
    # And the async job is already cancelled
    job.mark_cancelled()
    jobs.update(job)
    # When the worker picks up and executes the job
    assert worker.pickup_and_execute(job) is PickupResult.skipped
    # Then the async job status should be "cancelled"
    assert stored(jobs, job).status == "cancelled"
    # And the worker health should show 0 jobs processed
    assert processed(worker) == 0


@pytest.mark.spec("async_jobs: Executor that moves job to terminal during execution is handled")
def test_executor_that_moves_job_to_terminal_during_execution_is_handled(
    jobs: JobStore,
) -> None:
    # Given an async worker is initialised with a terminal-forcing executor
    worker = spec_worker(jobs, lambda ctx: force_terminal(jobs, ctx))
    # And a queued async job exists
    job = create_job(jobs)
    # When the worker picks up and executes the job
    assert worker.pickup_and_execute(job) is PickupResult.finished_elsewhere
    # Then the async job should be in a terminal state
    assert stored(jobs, job).is_terminal
    assert stored(jobs, job).status == "cancelled"  # the executor's write stands
    # And the worker health should show 0 jobs processed
    assert processed(worker) == 0


@pytest.mark.spec("async_jobs: Pickup handles already-running job gracefully")
def test_pickup_handles_already_running_job_gracefully(jobs: JobStore) -> None:
    # Given an async worker is initialised with max_workers 2
    worker = spec_worker(jobs, max_workers=2)
    # And a queued async job exists
    job = create_job(jobs)
    # And the async job is already running with worker "other-worker"
    job.mark_running("other-worker")
    jobs.update(job)
    # When the worker picks up and executes the job
    assert worker.pickup_and_execute(job) is PickupResult.skipped
    # Then the async job status should be "running"
    assert stored(jobs, job).status == "running"
    assert stored(jobs, job).worker_id == "other-worker"
    # And the worker health should show 0 jobs processed
    assert processed(worker) == 0


@pytest.mark.spec("async_jobs: Executor exception on already-terminal job skips mark_failed")
def test_executor_exception_on_already_terminal_job_skips_mark_failed(jobs: JobStore) -> None:
    def crash_after_terminal(ctx: JobContext) -> None:
        force_terminal(jobs, ctx)
        raise RuntimeError("crashed after the job ended")

    # Given an async worker is initialised with a crash-after-terminal executor
    worker = spec_worker(jobs, crash_after_terminal)
    # And a queued async job exists
    job = create_job(jobs)
    # When the worker picks up and executes the job
    worker.pickup_and_execute(job)
    # Then the async job should be in a terminal state
    row = stored(jobs, job)
    assert row.is_terminal
    assert (row.status, row.error_message) == (S.cancelled, None)  # mark_failed skipped


@pytest.mark.spec("async_jobs: detect_stuck_jobs tolerates already-terminal jobs")
def test_detect_stuck_jobs_tolerates_already_terminal_jobs(jobs: JobStore) -> None:
    # Given an async worker is initialised with job_timeout 1
    worker = spec_worker(jobs, job_timeout=1)
    # And a running async job with expired heartbeat exists
    job = running_with_expired_heartbeat(jobs)
    # And the running async job has already been cancelled externally
    job.mark_cancelled()
    jobs.update(job)
    # When the worker detects stuck jobs
    report = worker.detect_stuck_jobs()
    # Then no additional stuck jobs should be reported
    assert not report and len(report) == 0 and list(report) == []  # the spec's empty list
    assert report.expired == [] and report.retried == {}
    assert stored(jobs, job).status == "cancelled"


# ---- Review Fix: Error message redaction (P2) ----


@pytest.mark.spec("async_jobs: Failed job error message redacts secrets")
def test_failed_job_error_message_redacts_secrets(jobs: JobStore) -> None:
    raw = "s3cr3t-RAW-VALUE"

    def leaking(ctx: JobContext) -> None:
        raise RuntimeError(f"upstream refused: password={raw}")

    # Given an async worker is initialised with a secret-leaking executor
    worker = spec_worker(jobs, leaking)
    # And a queued async job exists
    job = create_job(jobs)
    # When the worker picks up and executes the job
    worker.pickup_and_execute(job)
    # Then the async job status should be "failed"
    row = stored(jobs, job)
    assert row.status == "failed"
    # And the async job error_message should not contain the raw secret
    assert row.error_message is not None and raw not in row.error_message
    # And the async job error_message should contain "***REDACTED***"
    assert "***REDACTED***" in row.error_message
